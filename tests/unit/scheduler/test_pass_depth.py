"""The main pass's bounds (ADR 0029): a pass between full ones looks at a queue depth of
jobs (Slurm's default_queue_depth), every pass stops at its most starts
(sched_max_job_start), a full pass still looks at every job and decides what it always
did, and the forecast of expected starts goes in slices, one per cycle
(bf_yield_interval)."""

from __future__ import annotations

import pytest

from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.service import PacedScheduler, PassBounds
from hal.testing import cluster, make_job

NOW = 1000.0


def _queue(now: float = NOW, pending: int = 30) -> ClusterSnapshot:
    """Eight 4-CPU nodes, the queue of 1-, 2- and 4-CPU jobs in id order (equal
    priority): the first ones fit, the rest wait for Resources or behind them."""
    jobs = [make_job(100 + i).cpus((1, 2, 4)[i % 3]).limit(600) for i in range(pending)]
    return cluster(now).uniform_nodes(8, cpus=4).pending(*jobs).build()


def _no_backfill() -> Scheduler:
    return build_scheduler(default_profile(backfill=False))


def test_a_full_pass_looks_at_every_job() -> None:
    """Without bounds (the simulator's passes, a full pass of the server) every pending
    job gets its verdict."""
    result = _no_backfill().run_pass(_queue())
    assert result.complete
    assert set(result.statuses) == {100 + i for i in range(30)}


def test_a_pass_with_a_queue_depth_looks_at_that_many_jobs_first_in_queue_order() -> None:
    """An event-triggered pass at depth 5 decides jobs 100-104 exactly as the full pass
    does, and says nothing about the others: no verdict, no update (they keep what the
    store has)."""
    snap = _queue()
    full = _no_backfill().run_pass(snap)
    bounded = _no_backfill().run_pass(snap, depth=5)
    assert not bounded.complete
    assert set(bounded.statuses) == {100, 101, 102, 103, 104}
    assert all(bounded.statuses[i] == full.statuses[i] for i in bounded.statuses)
    placed = [p.job_id for p in full.plan.placements]
    assert [p.job_id for p in bounded.plan.placements] == [i for i in placed if i < 105]
    assert {u.job_id for u in bounded.plan.updates} <= set(bounded.statuses)


def test_a_pass_stops_once_it_has_placed_max_starts() -> None:
    """sched_max_job_start: the pass stops looking at its fourth placement; the starts
    it gives are the full pass's first four, in order (what the plan applier's cap
    would have kept of the full pass)."""
    snap = _queue()
    full = _no_backfill().run_pass(snap)
    capped = _no_backfill().run_pass(snap, max_starts=4)
    assert not capped.complete
    assert capped.plan.placements == full.plan.placements[:4]
    assert len(full.plan.placements) > 4


def test_a_partitions_backlog_does_not_keep_another_partitions_job_waiting() -> None:
    """The most starts count per partition: behind a backlog that fills its cap, a job of
    another partition with an idle node is placed in the same pass; the backlog's jobs
    past the cap are passed over (no verdict) and the pass is not complete."""
    backlog = [make_job(100 + i).cpus(1).limit(600).partition("bulk") for i in range(12)]
    probe = make_job(200).cpus(1).limit(60).partition("probe")
    snap = (
        cluster(NOW)
        .uniform_nodes(4, cpus=4)
        .uniform_nodes(1, cpus=1, prefix="p")
        .partition("bulk", "n0001", "n0002", "n0003", "n0004")
        .partition("probe", "p0001")
        .pending(*backlog, probe)
        .build()
    )
    result = _no_backfill().run_pass(snap, max_starts=4)
    placed = [p.job_id for p in result.plan.placements]
    assert placed == [100, 101, 102, 103, 200]
    assert not result.complete
    assert 104 not in result.statuses  # passed over, not decided


def test_a_stopped_pass_runs_no_backfill_stage() -> None:
    """Backfill plans the whole queue behind the jobs placed: a pass that stopped early
    leaves it to the next full one, and the held-back jobs keep their expected starts."""
    snap = _queue()
    assert build_scheduler().run_pass(snap).backfill is not None
    stopped = build_scheduler().run_pass(snap, depth=3)
    assert stopped.backfill is None and stopped.plan.forecasting == ()


def test_a_stopped_pass_still_notices_deep_jobs_becoming_eligible() -> None:
    """Slurm tests begin times and dependencies on every pending job each pass; only the
    placements stop at the depth. Deep in the queue, a job whose --begin has passed and
    one whose dependency was met (job 5 completed) get reason None from a depth-3 pass,
    so the plan applier records their eligible time now, not at the next full pass; a
    job whose dependency is still unmet, or not judged yet, gets Dependency; an
    ordinary deep job still gets nothing."""
    done = make_job(5).state(JobState.COMPLETED)
    running = make_job(6).state(JobState.RUNNING)
    deep = [
        make_job(200).begin(NOW - 10).reason(PendingReason.BEGIN_TIME),
        make_job(201).depends("afterok:5").reason(PendingReason.DEPENDENCY),
        make_job(202).depends("afterok:6").reason(PendingReason.DEPENDENCY),
        make_job(203).depends("afterok:6"),
        make_job(204).cpus(1).limit(600),
    ]
    jobs = [make_job(100 + i).cpus(4).limit(600) for i in range(10)]
    snap = cluster(NOW).uniform_nodes(2, cpus=4).related(done, running)
    result = _no_backfill().run_pass(snap.pending(*jobs, *deep).build(), depth=3)
    assert not result.complete
    reasons = {u.job_id: u.reason for u in result.plan.updates if u.job_id >= 200}
    assert reasons == {
        200: PendingReason.NONE,
        201: PendingReason.NONE,
        203: PendingReason.DEPENDENCY,
    }
    assert result.statuses[202].reason is PendingReason.DEPENDENCY
    assert 204 not in result.statuses


def _paced(depth: int = 5, interval: float = 60.0, starts: int = 0) -> PacedScheduler:
    return PacedScheduler(_no_backfill(), bounds=PassBounds(depth, interval, starts))


def test_paced_passes_are_full_every_sched_interval_and_bounded_between() -> None:
    """The server's passes: the first full, those within sched_interval at the queue
    depth, the next full one sched_interval later."""
    paced = _paced()
    looked = [len(paced.run_pass(_queue(NOW + t)).statuses) for t in (0, 1, 30, 60, 61)]
    assert looked == [30, 5, 5, 30, 5]


def test_paced_queue_depth_zero_makes_every_pass_full() -> None:
    paced = _paced(depth=0)
    assert [len(paced.run_pass(_queue(NOW + t)).statuses) for t in (0, 1, 2)] == [30, 30, 30]


def test_a_pass_stopped_at_max_starts_is_not_full_so_the_next_one_is() -> None:
    """A full pass that stopped at its starts left jobs unseen: the next pass looks at
    the whole queue again rather than at a depth (then, once one completes, the depth
    applies until sched_interval has passed)."""
    paced = _paced(depth=5, starts=4)
    first = paced.run_pass(_queue(NOW))
    assert not first.complete
    roomy = cluster(NOW + 1).uniform_nodes(8, cpus=4)
    few = roomy.pending(*[make_job(200 + i).limit(600) for i in range(3)]).build()
    assert paced.run_pass(few).complete  # full: three jobs, all looked at and placed
    # within sched_interval: at the depth, and here stopped at its fourth start first
    assert len(paced.run_pass(_queue(NOW + 2)).statuses) == 4


def test_a_backfill_pass_is_a_full_pass() -> None:
    """Backfill plans the held-back jobs of the whole queue: a pass where it is due looks
    at every job even within sched_interval."""
    paced = PacedScheduler(build_scheduler(), bounds=PassBounds(5, 600.0))
    assert len(paced.run_pass(_queue(NOW)).statuses) == 30
    assert len(paced.run_pass(_queue(NOW + 1)).statuses) == 5
    assert len(paced.run_pass(_queue(NOW + 31)).statuses) == 30


def _forecasting() -> tuple[ClusterSnapshot, ClusterSnapshot]:
    """A full machine (four 1-CPU nodes busy until 1100) and six 1-CPU jobs: EASY
    reserves for the first, the other five get forecast starts; then the same queue a
    second later."""

    def at(now: float) -> ClusterSnapshot:
        running = [make_job(i).limit(100).running_on(f"n000{i}", start=NOW) for i in (1, 2, 3, 4)]
        jobs = [make_job(10 + i).limit(60 * (i + 1)) for i in range(6)]
        return cluster(now).uniform_nodes(4, cpus=1).running(*running).pending(*jobs).build()

    return at(NOW), at(NOW + 1)


def _no_time() -> bool:
    return False  # (a slice's time is up after its first job)


def test_a_forecast_in_slices_gives_the_starts_of_a_whole_one() -> None:
    """bf_yield_interval: with no time to spare each slice plans one job; the passes
    after it (no backfill stage) carry the rest in their plans' ``forecasting`` and the
    slices together give exactly the whole forecast's updates."""
    first, later = _forecasting()
    whole = build_scheduler()
    plan = whole.run_pass(first).plan
    assert len(plan.forecasting) == 5
    expected = sorted(whole.forecast(plan))
    sliced = build_scheduler()
    plan = sliced.run_pass(first).plan
    got = list(sliced.forecast(plan, go_on=_no_time))
    assert len(got) == 1
    for _ in range(4):
        plan = sliced.run_pass(later, backfill=False).plan
        assert len(plan.forecasting) == 5 - len(got)
        got += sliced.forecast(plan, go_on=_no_time)
    assert sorted(got) == expected
    assert sliced.run_pass(later, backfill=False).plan.forecasting == ()


def test_a_backfill_pass_drops_a_forecast_not_yet_done() -> None:
    """The next backfill stage plans afresh: what was left of the last forecast goes."""
    first, _ = _forecasting()
    sched = build_scheduler()
    plan = sched.run_pass(first).plan
    sched.forecast(plan, go_on=_no_time)
    again = sched.run_pass(first).plan
    assert again.forecasting == plan.forecasting  # its own forecast, whole
    assert len(sched.forecast(again)) == 5


def test_a_full_pass_with_nothing_held_back_carries_no_forecast() -> None:
    """A pass whose backfill stage was due drops what was left of the last forecast even
    when it holds no job back (its stage then plans nothing): a full pass's plan is its
    snapshot's alone, the same as a fresh scheduler's."""
    first, _ = _forecasting()
    sched = build_scheduler()
    sched.forecast(sched.run_pass(first).plan, go_on=_no_time)  # four jobs left
    empty = cluster(NOW + 1).uniform_nodes(4, cpus=1).build()
    assert sched.schedule(empty) == build_scheduler().schedule(empty)
    assert sched.schedule(empty).forecasting == ()


def test_config_takes_the_bounds_with_slurm_names() -> None:
    raw: dict[str, object] = {"scheduler": {"default_queue_depth": 50, "sched_interval": 20}}
    config = config_from_dict(raw, "t")
    assert config.scheduler_default_queue_depth == 50
    assert config.scheduler_sched_interval_s == 20.0
    assert config_from_dict({}, "t").scheduler_default_queue_depth == 100
    with pytest.raises(InvalidRequest, match="sched_interval"):
        config_from_dict({"scheduler": {"sched_interval": 0}}, "t")
    with pytest.raises(InvalidRequest, match="default_queue_depth"):
        config_from_dict({"scheduler": {"default_queue_depth": -1}}, "t")
