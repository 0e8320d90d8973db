"""Hand-computed schedules on four single-CPU nodes, one per policy.

Trace A (EASY vs conservative): job 1 holds 3 CPUs until 100; job 2 (2 CPUs) must wait
for it and is the head; job 3 (2 CPUs) waits behind; job 4 (1 CPU, 300 s) arrives when
one CPU is free. EASY starts job 4 at once (at 100 the head needs only 2 of the 3 CPUs
then free), which pushes job 3 to 200; conservative refuses, because job 3's reservation
at 100 needs the CPU job 4 would hold.

Trace B (EASY vs EASY-SJBF): with one CPU free before the head's start at 100, jobs 3
(90 s) and 4 (50 s) arrive together; EASY backfills job 3 (first in line), SJBF job 4
(shortest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hal.core.states import JobState
from hal.sim import Cleaning, SimOptions, run_trace

TRACE_A = [(1, 0, 100, 3, 100), (2, 1, 100, 2, 100), (3, 2, 100, 2, 100), (4, 3, 300, 1, 300)]
TRACE_B = [(1, 0, 100, 3, 100), (2, 1, 100, 4, 100), (3, 2, 90, 1, 90), (4, 2, 50, 1, 50)]


def starts(path: Path, policy: str, **kw: Any) -> dict[int, float]:
    run, _ = run_trace(path, SimOptions(policy=policy, **kw))
    return {o.job.id: o.start for o in run.outcomes}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("fcfs", {1: 0, 2: 100, 3: 100, 4: 200}),
        ("easy", {1: 0, 2: 100, 3: 200, 4: 3}),
        ("conservative", {1: 0, 2: 100, 3: 100, 4: 200}),
        ("easy-sjbf", {1: 0, 2: 100, 3: 200, 4: 3}),
    ],
)
def test_trace_a(write_trace: Any, policy: str, expected: dict[int, float]) -> None:
    """EASY protects only the head; conservative protects every earlier job."""
    assert starts(write_trace(TRACE_A), policy) == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("fcfs", {1: 0, 2: 100, 3: 200, 4: 200}),
        ("easy", {1: 0, 2: 100, 3: 2, 4: 200}),
        ("conservative", {1: 0, 2: 100, 3: 2, 4: 200}),
        ("easy-sjbf", {1: 0, 2: 100, 3: 200, 4: 2}),
    ],
)
def test_trace_b(write_trace: Any, policy: str, expected: dict[int, float]) -> None:
    """Shortest-job-first backfilling picks the 50 s job over the 90 s one."""
    assert starts(write_trace(TRACE_B), policy) == expected


def test_perfect_predictions_backfill_what_user_estimates_forbid(write_trace: Any) -> None:
    """Job 3 asks for 200 s but runs 50: with user estimates it would cross the head's
    start at 100 and waits; knowing the real run time, EASY starts it at once."""
    trace = [(1, 0, 100, 3, 100), (2, 1, 100, 4, 100), (3, 2, 50, 1, 200)]
    path = write_trace(trace)
    assert starts(path, "easy")[3] == 200
    assert starts(path, "easy", predictor="perfect")[3] == 2


def test_jobs_are_killed_at_their_requested_time(write_trace: Any) -> None:
    """A job that would run 500 s but asked for 100 ends at 100, as TIMEOUT."""
    path = write_trace([(1, 0, 500, 1, 100)])
    run, _ = run_trace(path, SimOptions(policy="easy"), Cleaning(cap_run_at_request=False))
    (o,) = run.outcomes
    assert (o.start, o.end, o.state) == (0, 100, JobState.TIMEOUT)
