"""A replay split over several processes (``hal.sim.parallel``) gives the replay of one,
to the last digit: every job's start, end and state, the time series and the pass
counts; where the machine never empties it still does, with one worker doing it all."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from hal.cli.main import main
from hal.core.errors import InvalidRequest
from hal.predict import UserPredictor
from hal.scheduler.framework.scheduler import Scheduler
from hal.sim import (
    Cleaning,
    ClusterModel,
    SimOptions,
    SimRun,
    Simulation,
    load_workload,
    parallel,
    run_workload,
)
from hal.sim.parallel import makespan, replay, split_starts
from hal.sim.policies import scheduler_for
from hal.sim.swf import SwfRecord
from hal.sim.workload import TraceJob, Workload
from hal.testing.examples import FULL
from hal.testing.traces import trace_path

SDSC = trace_path("SDSC-SP2-1998-4.2-cln.swf.gz")


@functools.cache
def sdsc_6000() -> Workload:
    """SDSC-SP2's first 6,000 jobs: its machine empties before jobs 5,304 and 5,306. A
    developer's run replays the last 1,500 of them: the same two empty instants, where
    the split hands over, for a quarter of the replay's CPU."""
    workload = load_workload(SDSC, Cleaning(first_jobs=6000))
    return workload if FULL else replace(workload, jobs=workload.jobs[SKIPPED:])


SKIPPED = 0 if FULL else 4500  # the first jobs ``sdsc_6000`` leaves out


@functools.cache
def one_process(policy: str, predictor: str) -> tuple[SimRun, dict[str, Any]]:
    """The one-process replay of ``sdsc_6000`` (asked by several tests)."""
    return run_workload(sdsc_6000(), SimOptions(policy=policy, predictor=predictor))


def assert_same(one: SimRun, many: SimRun) -> None:
    assert [(o.job.id, o.start, o.end, o.state) for o in one.outcomes] == [
        (o.job.id, o.start, o.end, o.state) for o in many.outcomes
    ]
    for a, b in (
        (one.series_t, many.series_t),
        (one.series_queue, many.series_queue),
        (one.series_busy, many.series_busy),
    ):
        assert np.array_equal(a, b)
    assert (one.passes, one.skipped_passes) == (many.passes, many.skipped_passes)


@pytest.mark.parametrize(
    ("policy", "predictor", "workers"),
    [
        ("easy", "user", 2),
        # three workers and another policy: the same hand-over, a minute each, in CI
        pytest.param("easy", "user", 3, marks=pytest.mark.slow),
        pytest.param("easy-sjbf", "perfect", 2, marks=pytest.mark.slow),
    ],
)
def test_split_replay_is_the_replay(
    policy: str, predictor: str, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers hand over where both machines were empty, and the result is the
    one-process replay's."""
    monkeypatch.setattr(parallel, "available_cores", lambda: workers)  # one each
    one, summary_one = one_process(policy, predictor)
    options = SimOptions(policy=policy, predictor=predictor, workers=workers)
    many, summary = run_workload(sdsc_6000(), options)
    assert summary["workers"] == workers
    assert summary["handovers"], "no hand-over: the test would not test the split"
    assert all(3000 <= SKIPPED + h <= 6000 for h in summary["handovers"])
    assert_same(one, many)
    for key in ("mean_wait_s", "mean_bsld", "utilization", "makespan_s", "passes"):
        assert summary[key] == summary_one[key]
    assert summary["cpu_s"] > 0


def trace_job(i: int, submit: float, run: float, procs: int = 1, wait: float = 0) -> TraceJob:
    """Job ``i`` of user 1 + i % 3, asking exactly its run time, recorded as waiting
    ``wait`` (-1: not recorded)."""
    user = 1 + i % 3
    rec = SwfRecord(i, submit, wait, run, procs, -1, -1, procs, run, -1, 1, user,
                    1, -1, 1, 1, -1, -1)  # fmt: skip
    return TraceJob(i, submit, run, procs, run, user, rec)


def busy_forever(n: int) -> tuple[TraceJob, ...]:
    """One long job holds a CPU of 2 from the start until after the last arrival."""
    jobs = [trace_job(1, 0.0, 10.0 * n + 100)]
    jobs += [trace_job(i, 5.0 * i, 7.0 + i % 5, 1 + i % 2) for i in range(2, n)]
    return tuple(jobs)


def test_a_machine_that_never_empties_is_replayed_by_the_first_worker() -> None:
    jobs = busy_forever(400)
    cluster = ClusterModel.for_procs(2)

    def make() -> Scheduler:
        return scheduler_for("easy", UserPredictor())

    one = Simulation(jobs, cluster, make()).run()
    many, split = replay(jobs, cluster, make, UserPredictor(), 2, cores=2)
    assert split.starts == (0, len(jobs) // 2)
    assert split.chain == ((0, 0, len(jobs)),)  # no hand-over: worker 0 did it all
    assert_same(one, many)


def gaps_before(n: int, gaps: tuple[int, ...]) -> list[TraceJob]:
    """A job every 10 s running 100 s: busy, but for a long gap before each of ``gaps``."""
    jobs = []
    t = 0.0
    for i in range(n):
        t += 1000.0 if i in gaps else 10.0
        jobs.append(trace_job(i, t, 100.0))
    return jobs


def test_split_starts_at_the_traces_own_empty_instants() -> None:
    """Where the recorded schedule emptied (every earlier job waited and ran before
    the next submission); without recorded waits, at the first job of any instant."""
    jobs = gaps_before(100, (30, 70))
    assert split_starts(jobs, 1, 2) == [0]
    assert split_starts(jobs, 2, 2) == [0, 30]  # parts of 30 and 70 jobs (or 70 and 30)
    assert split_starts(jobs, 3, 3) == [0, 30, 70]
    assert split_starts(jobs, 4, 4) == [0, 30, 70]  # no other empty instant
    unknown = [trace_job(j.id, j.submit, j.run, wait=-1) for j in jobs]
    assert split_starts(unknown, 2, 2) == [0, 50]
    # equal submit times: a worker starts at the first job of its instant
    tied = [replace(j, submit=float(j.id // 2)) for j in unknown]
    assert split_starts(tied, 2, 2) == [0, 50]
    assert split_starts(tied[:99], 2, 2) == [0, 50]  # 50 and 49 jobs, not 48 and 51


def test_split_takes_more_workers_than_cores_where_they_end_sooner() -> None:
    """Empty instants before jobs 25 and 70 of 100: on two cores, three workers (the
    parts of 30 and 45 jobs at once, then that of 25) are done at 55 jobs' time, two
    (70 and 30) at 70; one core gains nothing from a split, so it gets one worker; a
    worker that would not end the replay sooner is not started."""
    jobs = gaps_before(100, (25, 70))
    assert split_starts(jobs, 2, 2) == [0, 70]
    assert split_starts(jobs, 4, 2) == [0, 25, 70]
    assert split_starts(jobs, 4, 1) == [0]
    # a third worker (30, 5 and 65 jobs) ends no sooner than two (35 and 65)
    assert split_starts(gaps_before(100, (30, 35)), 4, 2) == [0, 35]
    assert makespan([25, 45, 30], 2) == 55
    assert makespan([70, 30], 2) == 70
    assert makespan([70, 30], 1) == 100
    assert makespan([25, 45, 30], 3) == 45


@pytest.mark.timeout(120)  # (a worker waiting for one never started would hang)
def test_workers_beyond_the_cores_wait_for_one_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three workers on one core at a time: each starts when the one before it (the
    last part first) is done, and the result is still the one-process replay."""
    jobs = tuple(gaps_before(120, (40, 80)))
    cluster = ClusterModel.for_procs(4)
    monkeypatch.setattr(parallel, "split_starts", lambda *_: [0, 40, 80])

    def make() -> Scheduler:
        return scheduler_for("easy", UserPredictor())

    one = Simulation(jobs, cluster, make()).run()
    many, split = replay(jobs, cluster, make, UserPredictor(), 3, cores=1)
    assert split.chain == ((0, 0, 40), (1, 40, 80), (2, 80, 120))
    assert_same(one, many)


def test_workers_below_one_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="--workers must be 1 or more"):
        SimOptions(workers=0)


def test_a_learning_predictor_replays_on_one_process() -> None:
    """``avg2`` keeps what it learnt: a split replay could not be the same one."""
    workload = load_workload(SDSC, Cleaning(first_jobs=300))
    _, summary = run_workload(workload, SimOptions(policy="easy-sjbf", predictor="avg2", workers=2))
    assert summary["workers"] == 1
    assert "handovers" not in summary


def test_the_command_splits_by_default_and_says_where(
    write_trace: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hal sim run`` on two workers: the summary of one (but for the time taken and
    where the parts met), the hand-over at an instant where both machines were empty."""
    # bursts of four 1-CPU jobs every 100 s, each running 30 s: empty before every burst
    jobs = [(i, 100.0 * (i // 4), 30, 1, 60) for i in range(1, 200)]
    trace = write_trace(jobs, procs=4)
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    assert main(["sim", "run", str(trace), "--workers", "2", "--json"]) == 0
    split = json.loads(capsys.readouterr().out)
    assert main(["sim", "run", str(trace), "--workers", "1", "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert (split["workers"], single["workers"]) == (2, 1)
    # the second worker starts at the burst nearest half the jobs (job 100, index 99),
    # where the first one's machine is empty too
    assert split["handovers"] == [99]
    for key in ("wall_s", "jobs_per_wall_s", "workers", "handovers", "cpu_s"):
        split.pop(key, None)
        single.pop(key, None)
    assert split == single


@pytest.mark.parametrize("death", ["raises", pytest.param("exits", marks=pytest.mark.slow)])
def test_a_worker_that_dies_leaves_the_replay_to_the_others(death: str) -> None:
    """The second worker fails as it starts (an exception, or its process gone without a
    word): the first never hands over to it and replays everything itself."""
    cluster = ClusterModel.for_procs(128)

    def make() -> Scheduler:
        if multiprocessing.current_process().name == "hal-sim-1":
            if death == "exits":
                os._exit(3)
            raise RuntimeError("a broken worker")
        return scheduler_for("easy", UserPredictor())

    jobs = sdsc_6000().jobs
    many, split = replay(jobs, cluster, make, UserPredictor(), 2, cores=2)
    assert split.chain == ((0, 0, len(jobs)),)
    assert_same(one_process("easy", "user")[0], many)


def test_a_failing_replay_says_which_worker_and_why() -> None:
    jobs = busy_forever(100)

    def make() -> Scheduler:
        raise RuntimeError("no scheduler today")

    with pytest.raises(
        RuntimeError, match=r"worker 0 failed: (?s:.*)RuntimeError: no scheduler today"
    ):
        replay(jobs, ClusterModel.for_procs(2), make, UserPredictor(), 2, cores=2)
