"""``PacedScheduler``: the server's passes backfill at most once per bf_interval and
time their plugins once per ``time_plugins_every_s`` (sampled per-plugin timing: a timed
pass decides exactly what an untimed one does)."""

from __future__ import annotations

import asyncio
import time

import pytest
from blocked_head import blocked_head

from hal.core.errors import Unavailable
from hal.core.states import PendingReason
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.service import PacedScheduler, PassBounds, SchedulerService
from hal.testing import cluster, make_job, placed_nodes


def test_backfill_runs_once_per_interval(sched: Scheduler) -> None:
    """bf_interval is 30 s in the default profile: the pass at 1000 backfills job 12,
    the one at 1010 does not (the main pass alone), the one at 1030 does again."""
    paced = PacedScheduler(sched)
    assert set(placed_nodes(paced.schedule(blocked_head(1000.0)))) == {12}
    assert placed_nodes(paced.schedule(blocked_head(1010.0))) == {}
    assert set(placed_nodes(paced.schedule(blocked_head(1030.0)))) == {12}


def test_a_clock_stepped_back_does_not_postpone_backfill(sched: Scheduler) -> None:
    paced = PacedScheduler(sched)
    paced.schedule(blocked_head(5000.0))
    assert set(placed_nodes(paced.schedule(blocked_head(1000.0)))) == {12}


def test_interval_zero_backfills_every_pass_and_no_plugin_never() -> None:
    config = default_profile()
    config["plugin_args"] = {"noderesources": {"score": "best_fit"}, "backfill": {"interval_s": 0}}
    paced = PacedScheduler(build_scheduler(config))
    for _ in range(3):
        assert set(placed_nodes(paced.schedule(blocked_head(1000.0)))) == {12}
    plain = PacedScheduler(build_scheduler(default_profile(backfill=False)))
    assert not plain.backfill_due(1000.0)
    assert placed_nodes(plain.schedule(blocked_head(1000.0))) == {}


def test_a_timed_pass_decides_the_same_and_reports_each_plugin(sched: Scheduler) -> None:
    plain = sched.run_pass(blocked_head(1000.0))
    timed = sched.run_pass(blocked_head(1000.0), time_plugins=True)
    assert plain.plugin_seconds is None
    assert timed.plan == plain.plan
    assert timed.statuses == plain.statuses
    assert timed.reservations == plain.reservations
    seconds = timed.plugin_seconds
    assert seconds is not None
    # named by extension point, as kube-scheduler labels them
    assert {
        ("noderesources", "Filter"),
        ("noderesources", "Score"),
        ("priority", "QueueSort"),
        ("backfill", "Backfill"),
        ("dependency", "Reserve"),
    } <= set(seconds)
    assert all(s >= 0 for s in seconds.values())
    assert sum(seconds.values()) > 0
    # the scheduler's own profile is left untimed: the next pass reports nothing
    assert sched.run_pass(blocked_head(1000.0)).plugin_seconds is None


def test_paced_scheduler_times_one_pass_per_interval(sched: Scheduler) -> None:
    """Not a pass that backfills (1000, 1030: the heaviest): the next one is."""
    paced = PacedScheduler(sched, time_plugins_every_s=10.0)
    at = (1000, 1001, 1005, 1011, 1030, 1031)
    timed = [paced.run_pass(blocked_head(t)).plugin_seconds is not None for t in at]
    assert timed == [False, True, False, True, False, True]
    never = PacedScheduler(sched)
    assert never.run_pass(blocked_head(1000.0)).plugin_seconds is None
    every = PacedScheduler(sched, time_plugins_every_s=0.0)
    assert all(every.run_pass(blocked_head(1000.0)).plugin_seconds for _ in range(2))


def test_timing_is_put_off_once_when_every_pass_backfills(sched: Scheduler) -> None:
    """With backfill due on every pass (``interval_s = 0``, or a quiet server's passes
    as far apart as bf_interval) a due pass puts its timing off once, and the next one
    is timed, backfill stage and all: the per-plugin metric never goes silent."""
    config = default_profile()
    config["plugin_args"] = {"noderesources": {"score": "best_fit"}, "backfill": {"interval_s": 0}}
    paced = PacedScheduler(build_scheduler(config), time_plugins_every_s=10.0)
    at = (1000, 1001, 1002, 1011, 1012)
    results = [paced.run_pass(blocked_head(t)) for t in at]
    assert all(r.backfill is not None for r in results)
    assert [r.plugin_seconds is not None for r in results] == [False, True, False, False, True]
    quiet = PacedScheduler(sched, time_plugins_every_s=10.0)  # bf_interval 30 s
    timed = [quiet.run_pass(blocked_head(t)).plugin_seconds is not None for t in (1000, 1040, 1080)]
    assert timed == [False, True, False]


def _capped(now: float) -> ClusterSnapshot:
    """Eight idle nodes, ten one-node jobs: a pass stops at two starts (max_starts)."""
    return (
        cluster(now)
        .uniform_nodes(8, cpus=1)
        .pending(*(make_job(i).limit(100) for i in range(1, 11)))
        .build()
    )


def test_backfills_turn_is_not_timed_the_next_pass_is(sched: Scheduler) -> None:
    """While passes stop at max_starts, backfill's turn (the heaviest pass) is not timed
    when timing is due: the pass after it is."""
    paced = PacedScheduler(sched, time_plugins_every_s=10.0, bounds=PassBounds(max_starts=2))
    turn = paced.run_pass(_capped(1000.0))  # both due
    assert turn.capped and turn.backfill is not None and turn.plugin_seconds is None
    after = paced.run_pass(_capped(1001.0))
    assert after.backfill is None and after.plugin_seconds is not None
    assert paced.run_pass(_capped(1031.0)).plugin_seconds is None  # the next turn


def test_a_timed_pass_keeps_the_running_jobs_ledger() -> None:
    """The ledger of the running jobs' rows is the scheduler's, timed pass or not: a
    timed pass does not write every running job's rows again."""
    sched = build_scheduler()
    ledger = sched.framework.releases
    assert len(ledger) == 0
    timed = sched.run_pass(blocked_head(1000.0), time_plugins=True)
    assert timed.plugin_seconds is not None and timed.backfill is not None
    assert len(ledger) == 2  # jobs 1 and 2, written by the timed pass, kept for the next
    plain = build_scheduler().run_pass(blocked_head(1000.0))
    assert timed.plan == plain.plan


class _Host:
    """A ``SchedulerHost`` over one snapshot that applies nothing."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()
        self.applied: list[Plan] = []

    def has_pending(self) -> bool:
        return True

    def snapshot(self) -> ClusterSnapshot:
        return blocked_head(1000.0)

    async def fill_related(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        return snap

    async def apply_plan(self, plan: Plan, started: list[int] | None = None) -> list[int]:
        self.applied.append(plan)
        return [] if started is None else started


def test_a_cycle_times_its_pass_and_its_forecast_slice_apart() -> None:
    """``CycleStats``: the pass alone, the forecast slice alone (None when the cycle ran
    none) and the cycle, both together (what sdiag's main schedule and forecast lines,
    and ``hal bench scale``'s max_pass_s and max_cycle_s, read)."""
    forecasting = [True, False]

    def decide(snap: ClusterSnapshot) -> Plan:
        time.sleep(0.03)
        return Plan(snap.revision, forecasting=(10,) if forecasting.pop(0) else ())

    def forecast(plan: Plan) -> tuple[PendingUpdate, ...]:
        time.sleep(0.01)
        return (PendingUpdate(10, PendingReason.RESOURCES, 1090.0),)

    host = _Host()
    service = SchedulerService(host, decide, forecast=forecast)
    stats = service.stats
    asyncio.run(service.cycle())
    assert stats.last_pass_s >= 0.03
    assert stats.last_forecast_s is not None and stats.last_forecast_s >= 0.01
    assert stats.last_duration_s == stats.last_pass_s + stats.last_forecast_s
    assert [len(p.updates) for p in host.applied] == [0, 1]  # the slice's, applied
    asyncio.run(service.cycle())  # a plan with nothing left to forecast: no slice
    assert service.stats.last_forecast_s is None  # (``stats``' is narrowed above)
    assert stats.last_duration_s == stats.last_pass_s >= 0.03
    assert stats.cycles == 2


def test_a_plan_applied_in_part_counts_the_starts_it_made() -> None:
    """The database went away after the plan's first change committed two starts:
    the cycle fails, and the stats count those two (they run)."""

    class _PartlyApplied(_Host):
        async def apply_plan(self, plan: Plan, started: list[int] | None = None) -> list[int]:
            assert started is not None  # (the service passes its own list)
            started += [10, 12]
            raise Unavailable("the database is away")

    service = SchedulerService(_PartlyApplied(), lambda snap: Plan(snap.revision))
    with pytest.raises(Unavailable):
        asyncio.run(service.cycle())
    assert (service.stats.last_started, service.stats.total_started) == (2, 2)
