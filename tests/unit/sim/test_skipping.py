"""What the replay skips changes no start: passes in which no pending job finds its nodes
(``hal.sim.fitscreen``), held-back jobs an EASY stage that has made its reservation need
not look at (``backfill._Settled``), and passes after a settled one in which no new job
could start (``backfill.SettledStage``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from hal.core.job import Allocation, Job
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.predict import UserPredictor
from hal.scheduler.framework import backfill
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.framework.start_bound import StartBound
from hal.sim import Cleaning, ClusterModel, Simulation, load_workload, scheduler_for
from hal.sim.cluster import PARTITION
from hal.sim.fitscreen import FitScreen
from hal.sim.run import make_predictor
from hal.testing import JobBuilder, make_job
from hal.testing import cluster as make_cluster
from hal.testing.examples import FULL
from hal.testing.traces import trace_path

CURIE = trace_path("CEA-Curie-2011-2.1-cln.head3000.swf.gz")
# the replays' length: 1,200 jobs in CI; 600 in a developer's run, where every rule below
# still skips passes, but for ``learned``'s: too few of its predictions expire in 600
CURIE_JOBS = 1200 if FULL else 600


# ``learned``'s replays (1,200 jobs and a model trained on the way) run in CI only
SLOW = pytest.mark.slow


def _length(predictor: str) -> int:
    return 1200 if predictor == "learned" else CURIE_JOBS


def _table(cluster: ClusterModel, busy: dict[int, int]) -> NodeTable:
    nodes = cluster.build_nodes()
    table = NodeTable(nodes, cluster.partitions())
    for row, cpus in busy.items():
        table.take(Allocation((nodes[row].name,), (ResourceVector(cpus, 0, 0),)))
    return table


def _job(cluster: ClusterModel, job_id: int, procs: int) -> Job:
    spec = cluster.spec_for(procs, 1)
    return Job(id=job_id, spec=spec, partition=PARTITION, submit_time=0.0, time_limit_s=60)


def test_counts_nodes_with_enough_cpus_each() -> None:
    """Four 16-core nodes with 9, 6, 6 and 16 cores free: two nodes of 9 cores fit, two
    of 10 or 16 do not, one of 16 does."""
    cluster = ClusterModel(nodes=4, cores_per_node=16)
    table = _table(cluster, {0: 7, 1: 10, 2: 10})
    screen = FitScreen()

    def fits(procs: int) -> bool:
        return screen.any_fits(table, [screen.need(_job(cluster, procs, procs))])

    assert fits(17) is True  # 2 nodes x 9 cores
    assert fits(20) is False  # 2 x 10
    assert fits(32) is False  # 2 x 16
    assert fits(16) is True  # 1 x 16
    assert fits(48) is False  # 3 x 16


def test_pending_jobs_are_counted_until_removed() -> None:
    cluster = ClusterModel(nodes=2, cores_per_node=16)
    table = _table(cluster, {0: 16, 1: 8})
    screen = FitScreen()
    wide, small = _job(cluster, 1, 32), _job(cluster, 2, 8)
    screen.add(wide)
    assert screen.any_fits(table) is False
    screen.add(small)
    assert screen.any_fits(table) is True
    screen.remove(small)
    assert screen.any_fits(table) is False


def test_a_job_it_cannot_judge_always_lets_the_pass_run() -> None:
    cluster = ClusterModel(nodes=2, cores_per_node=16)
    table = _table(cluster, {0: 16, 1: 16})
    screen = FitScreen()
    job = _job(cluster, 1, 16)
    ranged = Job(
        id=2,
        spec=job.spec.with_changes(nodes_min=1, nodes_max=2),
        partition=PARTITION,
        submit_time=0.0,
        time_limit_s=60,
    )
    screen.add(job)
    assert screen.any_fits(table) is False
    screen.add(ranged)
    assert screen.any_fits(table) is True


def _curie_replay(
    policy: str, predictor: str, *, every_event: bool = False
) -> tuple[list[tuple[float, float]], int]:
    """CEA-Curie's first jobs (``_length``) on a busy 8,000-CPU machine: each job's start and the
    prediction it started with, and the passes skipped. Run afresh: for a replay with a
    rule patched out or counted (``monkeypatch``)."""
    workload = load_workload(CURIE, Cleaning(first_jobs=_length(predictor), procs=8000))
    chosen = make_predictor(predictor, workload)
    sim = Simulation(
        workload.jobs,
        ClusterModel.for_procs(8000, 16),
        scheduler_for(policy, chosen),
        predictor=chosen,
        every_event=every_event,
    )
    run = sim.run()
    return [(o.start, o.predicted) for o in run.outcomes], run.skipped_passes


@functools.cache
def _unpatched_replay(
    policy: str, predictor: str, *, every_event: bool = False
) -> tuple[tuple[tuple[float, float], ...], int]:
    """``_curie_replay`` of the code as it is (nothing patched), run once per test run:
    several tests compare against the same replay, each a few seconds of CPU. Call it
    only before a test patches anything."""
    starts, skipped = _curie_replay(policy, predictor, every_event=every_event)
    return tuple(starts), skipped


def _rule_keeps_every_start(policy: str, predictor: str, turn_off: Callable[[], None]) -> None:
    """A pass-skipping rule: the same starts (and predictions) as a pass at every event,
    the same with the rule turned off by ``turn_off``, and more passes skipped with it."""
    skipping, skipped = _unpatched_replay(policy, predictor)
    full, _ = _unpatched_replay(policy, predictor, every_event=True)
    assert skipping == full
    turn_off()
    without, skipped_without = _curie_replay(policy, predictor)
    assert tuple(without) == skipping
    assert skipped > skipped_without


def test_skips_passes_on_multicore_nodes_and_changes_no_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CEA-Curie's first ``CURIE_JOBS`` on a machine of 500 nodes of 16 cores (so that it is
    busy): the screen skips passes the CPU count alone would run, and every job starts
    when a pass at every event starts it."""

    def starts(outcomes: Sequence[tuple[float, float]]) -> list[float]:
        return [start for start, _ in outcomes]

    screened, skipped = _unpatched_replay("easy", "user")
    full, _ = _unpatched_replay("easy", "user", every_event=True)
    assert starts(screened) == starts(full)
    monkeypatch.setattr(FitScreen, "any_fits", lambda *args: True)
    unscreened, skipped_without = _curie_replay("easy", "user")
    assert starts(unscreened) == starts(screened)
    assert skipped > skipped_without


@pytest.mark.parametrize("predictor", ["user", "avg2"])
def test_settled_backfill_skips_jobs_and_changes_no_start(
    predictor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill stage's skipping of jobs that would change nothing once EASY's
    reservation is made (``backfill._Settled``): the same starts without it, also with
    a pinned predictor (which remembers what it was asked while a job waited)."""
    asked: list[int] = []
    next_candidate = backfill._Settled.next_candidate

    def counted(self: backfill._Settled, first: int) -> int:
        asked.append(first)
        return next_candidate(self, first)

    def replay() -> list[float]:
        return [start for start, _ in _curie_replay("easy", predictor)[0]]

    monkeypatch.setattr(backfill._Settled, "next_candidate", counted)
    settled = replay()
    assert asked  # the stage settled and skipped
    monkeypatch.setattr(backfill._Settled, "of", classmethod(lambda *args: None))
    assert replay() == settled


def test_settled_stage_tells_which_new_job_could_start() -> None:
    """Four one-core nodes, a job running on two until t=100, a four-node head reserved
    from 100. Later, with nothing else changed: a two-node job that ends before 100
    could start, one that would run past 100 or needs three nodes could not, and a job
    that would sort before the head is left to the pass."""
    cluster = ClusterModel(nodes=4, cores_per_node=1)
    nodes, partitions = cluster.build_nodes(), cluster.partitions()
    one = ResourceVector(1, 0, 0)
    running = Job(
        id=1,
        spec=cluster.spec_for(2, 1),
        state=JobState.RUNNING,
        partition=PARTITION,
        start_time=0.0,
        time_limit_s=100,
        allocation=Allocation((nodes[0].name, nodes[1].name), (one, one)),
    )
    head = Job(id=2, spec=cluster.spec_for(4, 1), partition=PARTITION, time_limit_s=100)
    scheduler = scheduler_for("easy", UserPredictor())

    def snapshot(now: float, *pending: Job) -> ClusterSnapshot:
        return ClusterSnapshot(
            revision=1,
            now=now,
            nodes=nodes,
            partitions=partitions,
            pending=pending,
            running=(running,),
        )

    first = scheduler.run_pass(snapshot(10.0, head), explain=False)
    assert not first.plan.placements
    settled = first.settled  # (the head's reservation is left to be made when asked)
    assert settled is not None

    ids = iter(range(3, 100))

    def could_start(procs: int, limit: int, priority: int = 0) -> bool:
        job = Job(
            id=next(ids),
            spec=cluster.spec_for(procs, 2),
            partition=PARTITION,
            submit_time=20.0,
            time_limit_s=limit,
            priority=priority,
        )
        snap = snapshot(20.0, head, job)
        ctx = PassContext.from_snapshot(snap)
        answer = settled.could_start(ctx, [job])
        # what the pass itself does with it
        started = bool(scheduler.run_pass(snap, explain=False).plan.placements)
        assert answer or not started
        return answer

    assert could_start(2, 50) is True
    assert could_start(2, 200) is False
    assert could_start(3, 50) is False
    assert could_start(2, 200, priority=10) is True  # ahead of the head: the pass decides


def test_a_new_job_naming_another_partition_is_left_to_the_pass() -> None:
    """The same head in ``batch`` (four nodes); a fifth node is in ``other`` alone. A new
    job of ``-p batch,other`` that would run past the head's start in ``batch`` starts
    at once on the fifth node: the settled stage must not answer that it cannot."""

    def snapshot(now: float, *pending: JobBuilder) -> ClusterSnapshot:
        builder = make_cluster(now).uniform_nodes(5, cpus=1)
        builder.partition("batch", *(f"n{i:04d}" for i in range(1, 5))).partition("other", "n0005")
        builder.running(
            make_job(1).partition("batch").nodes(2).limit(100).running_on("n0001", "n0002")
        )
        return builder.pending(make_job(2).partition("batch").nodes(4).limit(100), *pending).build()

    scheduler = scheduler_for("easy", UserPredictor())
    settled = scheduler.run_pass(snapshot(10.0), explain=False).settled
    assert settled is not None
    new = make_job(3).partitions("batch", "other").limit(200).submitted(20.0)
    snap = snapshot(20.0, new)
    (placed,) = scheduler.run_pass(snap, explain=False).plan.placements
    assert (placed.job_id, placed.partition) == (3, "other")
    assert settled.could_start(PassContext.from_snapshot(snap), [new.build()])


@pytest.mark.parametrize(
    ("policy", "predictor"),
    [("easy", "user"), ("easy-sjbf", "avg2"), pytest.param("easy-sjbf", "learned", marks=SLOW)],
)
def test_passes_no_new_job_could_start_are_skipped_and_change_no_start(
    policy: str, predictor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule (4) of the engine: CEA-Curie's first ``CURIE_JOBS`` on a busy machine give the
    same starts (and the same predictions they started with) as a pass at every event,
    with more passes skipped than when the settled stage always says a job could start."""
    _rule_keeps_every_start(
        policy,
        predictor,
        lambda: monkeypatch.setattr(backfill.SettledStage, "could_start", lambda *args: True),
    )


@pytest.mark.parametrize("predictor", ["avg2", pytest.param("learned", marks=SLOW)])
def test_expiries_before_the_heads_start_skip_the_pass_and_change_no_start(
    predictor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule (5) of the engine: an instant where only predictions expired, after a settled
    pass, runs no pass when every corrected end still comes before the head's reserved
    start; the starts (and predictions) are those of a pass at every event, and more
    passes are skipped than when ``outlasts`` always says no."""
    _rule_keeps_every_start(
        "easy-sjbf",
        predictor,
        lambda: monkeypatch.setattr(backfill.SettledStage, "outlasts", lambda *args: False),
    )


@pytest.mark.parametrize(("policy", "predictor"), [("easy", "user"), ("easy-sjbf", "avg2")])
def test_the_heads_start_bound_changes_no_start(
    policy: str, predictor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head's reservation taken from its last start (``StartBound``) where no earlier
    row can have come free: the same starts and predictions as a full screen at every
    pass, and the bound is used."""
    used = 0
    row = StartBound.row

    def counted(self: StartBound, *args: Any) -> int | None:
        nonlocal used
        found = row(self, *args)
        used += found is not None
        return found

    monkeypatch.setattr(StartBound, "row", counted)
    bounded, _ = _curie_replay(policy, predictor)
    assert used > 50
    monkeypatch.setattr(StartBound, "row", lambda *args: None)
    assert _curie_replay(policy, predictor)[0] == bounded
