"""``hal.sim.audit``: EASY's promises checked on a replay's starts and ends.

Hand-made schedules on four one-CPU nodes show that each broken promise is caught;
replays of the real simulator (EASY with the requests, EASY-SJBF with exact run times)
keep both, on a micro trace and on the first 2,000 jobs of SDSC-SP2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hal.sim import Cleaning, SimOptions, load_workload, run_trace, run_workload
from hal.sim.audit import Ran, audit_easy, from_outcomes
from hal.sim.workload import TraceJob
from hal.testing.traces import trace_path

SDSC = trace_path("SDSC-SP2-1998-4.2-cln.swf.gz")


def requested(j: TraceJob) -> float:
    return j.requested


def run_time(j: TraceJob) -> float:
    return j.run


def test_a_head_started_after_its_shadow_time_is_caught() -> None:
    """Job 1 holds 3 of 4 CPUs until 100, so the head (job 2, 2 CPUs) is owed 100; job 3
    (1 CPU, planned 300 s) backfilled at 5 uses the one spare CPU, which is allowed, but
    the head then starts at 150."""
    jobs = [
        Ran(1, 0, 0, 100, 3, 100),
        Ran(2, 1, 150, 250, 2, 100),
        Ran(3, 5, 5, 305, 1, 300),
    ]
    audit = audit_easy(jobs, 4)
    assert audit.late_heads == [(2, 100.0, 150)]


def test_a_job_left_waiting_that_ends_before_the_shadow_is_caught() -> None:
    """One CPU free from 0 to 100, and job 3 (1 CPU, 50 s) waits until 100 anyway."""
    jobs = [
        Ran(1, 0, 0, 100, 3, 100),
        Ran(2, 1, 100, 200, 4, 100),
        Ran(3, 2, 200, 250, 1, 50),
    ]
    audit = audit_easy(jobs, 4)
    assert (2, 3, 2) in audit.missed
    assert not audit.late_heads


def test_a_head_that_fits_but_waits_is_caught() -> None:
    jobs = [Ran(1, 0, 0, 100, 2, 100), Ran(2, 1, 50, 150, 2, 100)]
    assert audit_easy(jobs, 4).missed[0] == (1, 2, 2)


def test_a_correct_easy_schedule_is_clean() -> None:
    """Trace A of test_policies_micro as EASY schedules it: job 4 backfilled into the
    spare CPU, job 3 pushed to 200."""
    jobs = [
        Ran(1, 0, 0, 100, 3, 100),
        Ran(2, 1, 100, 200, 2, 100),
        Ran(3, 2, 200, 300, 2, 100),
        Ran(4, 3, 3, 303, 1, 300),
    ]
    audit = audit_easy(jobs, 4)
    assert audit.clean
    assert audit.heads == 2  # job 2 from 1 on, job 3 from 100 on


@pytest.mark.parametrize(("policy", "plan"), [("easy", requested), ("easy-sjbf", run_time)])
def test_micro_replay_keeps_the_promises(write_trace: Any, policy: str, plan: Any) -> None:
    path: Path = write_trace(
        [(1, 0, 100, 3, 100), (2, 1, 100, 2, 100), (3, 2, 100, 2, 100), (4, 3, 300, 1, 300)]
    )
    predictor = "user" if plan is requested else "perfect"
    run, _ = run_trace(path, SimOptions(policy=policy, predictor=predictor))
    audit = audit_easy(from_outcomes(run.outcomes, plan), 4)
    assert audit.clean
    assert audit.heads >= 1


@pytest.mark.parametrize(
    ("policy", "predictor", "plan"),
    [("easy", "user", requested), ("easy-sjbf", "perfect", run_time)],
)
def test_sdsc_replays_keep_the_promises(policy: str, predictor: str, plan: Any) -> None:
    """A busy stretch: hundreds of heads, thousands of instants with jobs waiting."""
    w = load_workload(SDSC, Cleaning(first_jobs=2000))
    run, _ = run_workload(w, SimOptions(policy=policy, predictor=predictor))
    audit = audit_easy(from_outcomes(run.outcomes, plan), 128)
    assert audit.heads > 100
    assert audit.instants > 1000
    assert audit.late_heads == []
    assert audit.missed == []
