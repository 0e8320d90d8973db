"""Invariants of a replay, on the first 400 jobs of SDSC-SP2 (a busy 128-CPU machine):
no job starts before it is submitted, the machine is never over-full, every job ends,
the same input gives the same schedule, and the simulator's shortcuts (incremental
node table, skipped passes, no reasons behind a blocked queue) change nothing."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from hal.predict import UserPredictor
from hal.sim import (
    POLICIES,
    Cleaning,
    ClusterModel,
    SimRun,
    Simulation,
    load_workload,
    scheduler_for,
)
from hal.testing.traces import trace_path

TRACE = trace_path("SDSC-SP2-1998-4.2-cln.swf.gz")


def replay(policy: str, **kw: bool) -> SimRun:
    w = load_workload(TRACE, Cleaning(first_jobs=400))
    sim = Simulation(
        w.jobs, ClusterModel.for_procs(128), scheduler_for(policy, UserPredictor()), **kw
    )
    return sim.run()


def starts(run: SimRun) -> list[float]:
    return [o.start for o in run.outcomes]


@pytest.mark.parametrize("policy", POLICIES)
def test_schedule_invariants(policy: str) -> None:
    """Starts after submits, ends after starts and no later than the request, at most
    128 busy processors at any instant, and every job ran."""
    run = replay(policy, check_tables=True)
    for o in run.outcomes:
        assert o.start >= o.job.submit
        assert o.start <= o.end <= o.start + o.job.requested
    assert len(run.outcomes) == 400
    assert run.series_busy.max() <= run.machine_procs
    # ends before starts at the same instant: a finished job frees its CPUs first
    events = sorted(
        [(o.start, o.job.procs) for o in run.outcomes]
        + [(o.end, -o.job.procs) for o in run.outcomes]
    )
    assert max(np.cumsum([p for _, p in events])) <= 128


@pytest.mark.parametrize("policy", ["easy", "conservative"])
def test_shortcuts_give_the_same_schedule(policy: str) -> None:
    """A pass at every event with full explanations starts every job exactly when the
    fast path does: skipped passes could not have started anything."""
    assert starts(replay(policy, every_event=True, explain=True)) == starts(replay(policy))


def test_same_input_same_schedule() -> None:
    """Determinism: two runs, identical schedules."""
    assert starts(replay("easy-sjbf")) == starts(replay("easy-sjbf"))


def test_the_collector_is_off_during_a_replay_and_restored() -> None:
    """The cyclic garbage collector is off while the replay runs and as it was after,
    on or off."""
    seen: list[bool] = []
    sched = scheduler_for("easy", UserPredictor())
    pass_once = sched.run_pass

    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        return pass_once(*args, **kwargs)

    sched.run_pass = watched  # type: ignore[method-assign]
    w = load_workload(TRACE, Cleaning(first_jobs=50))
    Simulation(w.jobs, ClusterModel.for_procs(128), sched).run()
    assert seen and not any(seen)
    assert gc.isenabled()
    gc.disable()
    try:
        Simulation(w.jobs, ClusterModel.for_procs(128), sched).run()
        assert not gc.isenabled()
    finally:
        gc.enable()
