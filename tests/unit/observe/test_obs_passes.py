"""The long scheduling passes' breakdown (``hal.server.observe.passes``): one warning
per pass over the threshold, with its wait, CPU, stages and full collections; the
longest kept for ``/v1/diag`` until sdiag's reset."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.observe.config import ObserveConfig
from hal.scheduler.framework.scheduler import (
    PASS_STAGES,
    BackfillCycle,
    PassResult,
    ProcessFacts,
)
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.plugins import build_scheduler
from hal.scheduler.service import CycleStats
from hal.server.observe.heap import _Collector
from hal.server.observe.passes import PassFacts, SlowPasses
from hal.state.cluster import Cluster
from hal.testing.builders import cluster as snapshot_of
from hal.testing.builders import make_job, make_node

STAGES = {name: 0.1 * (i + 1) for i, name in enumerate(PASS_STAGES)}


def stats(
    pass_s: float, *, wait_s: float = 0.2, cpu_s: float = 1.0, back_s: float = 0.0
) -> CycleStats:
    return CycleStats(
        cycles=7,
        last_duration_s=pass_s,
        last_pass_s=pass_s,
        last_started=1000,
        last_pass_wait_s=wait_s,
        last_pass_cpu_s=cpu_s,
        last_pass_handback_s=back_s,
        last_pass_began=100.0,
        last_snapshot_s=0.05,
        last_apply_s=0.4,
    )


def result() -> PassResult:
    """A pass that stopped at max_job_starts in partition bulk."""
    return PassResult(Plan(revision=1), capped=("bulk",), complete=False, stages=STAGES)


def no_gc(since: float, until: float) -> tuple[int, float]:
    return 0, 0.0


def test_a_pass_over_the_threshold_logs_its_breakdown_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[float, float]] = []

    def one_gc(since: float, until: float) -> tuple[int, float]:
        seen.append((since, until))
        return 1, 0.25

    passes = SlowPasses(2.0, one_gc, lambda: 5000.0)
    passes.record(result())
    with caplog.at_level(logging.WARNING, logger="hal.server.observe.passes"):
        passes.on_cycle(stats(3.0), pending=90_000)
    [record] = [r for r in caplog.records if r.getMessage() == "scheduling pass took long"]
    fields = record.__dict__
    assert (fields["pass_s"], fields["wait_s"], fields["cpu_s"]) == (3.0, 0.2, 1.0)
    assert fields["waited_s"] == pytest.approx(1.8)  # 3.0 - 0.2 waiting for a worker - 1.0 CPU
    assert (fields["gc_full"], fields["gc_s"]) == (1, 0.25)
    assert seen == [(100.0, 103.0)]  # the pass's own time
    assert fields["stage_main_s"] == pytest.approx(STAGES["main"])
    assert {f"stage_{name}_s" for name in PASS_STAGES} <= set(fields)
    assert (fields["pending"], fields["started"], fields["capped"]) == (90_000, 1000, True)
    assert (fields["complete"], fields["backfill"], fields["cycle"], fields["at"]) == (
        False,
        False,
        7,
        5000.0,
    )
    assert (fields["snapshot_s"], fields["apply_s"], fields["timed"]) == (0.05, 0.4, False)
    assert passes.logged == 1 and passes.longest is not None
    assert passes.longest["pass_s"] == 3.0


def test_a_short_pass_logs_nothing_but_the_longest_is_kept_until_the_reset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    passes = SlowPasses(2.0, no_gc, lambda: 0.0)
    with caplog.at_level(logging.WARNING, logger="hal.server.observe.passes"):
        passes.on_cycle(stats(0.5), pending=10)
        passes.on_cycle(stats(0.3), pending=10)  # shorter: the longest stays
        passes.on_cycle(stats(0.9), pending=10)
    assert not [r for r in caplog.records if r.getMessage() == "scheduling pass took long"]
    assert passes.longest_s == 0.9
    passes.reset()
    assert passes.longest is None and passes.longest_s == 0.0
    passes.on_cycle(stats(0.1), pending=10)
    assert passes.longest_s == 0.1


def test_the_log_off_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    passes = SlowPasses(0.0, no_gc, lambda: 0.0)
    with caplog.at_level(logging.WARNING, logger="hal.server.observe.passes"):
        passes.on_cycle(stats(30.0), pending=10)
    assert passes.logged == 0 and not caplog.records
    assert passes.longest is not None  # (still kept for /v1/diag)


def test_a_pass_result_says_what_it_was() -> None:
    facts = PassFacts.of(result())
    assert (facts.capped, facts.complete, facts.backfill, facts.placed) == (True, False, False, 0)
    assert facts.stages == STAGES and not facts.timed
    timed = PassResult(Plan(revision=1), plugin_seconds={("fit", "Filter"): 0.1})
    assert PassFacts.of(timed).timed


def test_a_pass_times_each_of_its_stages() -> None:
    scheduler = build_scheduler()
    snap = (
        snapshot_of()
        .nodes(*(make_node(f"n{i}").cpus(4) for i in range(4)))
        .pending(*(make_job(i).cpus(2) for i in range(1, 20)))
        .build()
    )
    began = time.perf_counter()
    got = scheduler.run_pass(snap)
    took = time.perf_counter() - began
    assert set(got.stages) == set(PASS_STAGES)
    assert all(s >= 0 for s in got.stages.values())
    assert sum(got.stages.values()) <= took
    assert got.stages["main"] > 0


def test_full_collections_are_timed_and_found_by_their_overlap() -> None:
    collector = _Collector()
    collector.full.extend([(10.0, 0.5), (20.0, 1.0), (30.0, 0.2)])
    assert collector.full_between(10.2, 20.5) is None  # no freezer: nothing was timed
    collector.users = 1  # (as ``join`` counts one, without the process's callback)
    found = collector.full_between(10.2, 20.5)
    assert found is not None
    count, seconds = found
    assert count == 2 and seconds == pytest.approx(0.8)  # 0.3 + 0.5
    assert collector.full_between(11.0, 19.0) == (0, 0.0)
    began = time.perf_counter()
    collector.on_gc("start", {"generation": 2})
    collector.on_gc("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    collector.on_gc("start", {"generation": 0})  # (the young ones are not kept)
    try:
        assert len(collector.full) == 4 and collector.full[-1][0] >= began
        found = collector.full_between(began, time.perf_counter())
        assert found is not None and found[0] == 1
    finally:
        import gc

        gc.unfreeze()


def test_the_lock_the_hand_back_and_untimed_collections_are_their_own_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The backfill stage's wait for the predictor (``lock_s``) and the event loop's
    delay taking the plan back (``handback_s``) are not blamed on ``waited_s``; with no
    full collections timed (``HAL_GC_THAW_S=0``) ``gc_full``/``gc_s`` are null, not 0."""
    passes = SlowPasses(2.0, lambda since, until: None, lambda: 0.0)
    cycle = BackfillCycle(1.0, 10, 0, 1, lock_s=0.5)
    passes.record(PassResult(Plan(revision=1), backfill=cycle, stages=STAGES))
    with caplog.at_level(logging.WARNING, logger="hal.server.observe.passes"):
        passes.on_cycle(stats(3.0, back_s=0.3), pending=10)
    [record] = [r for r in caplog.records if r.getMessage() == "scheduling pass took long"]
    fields = record.__dict__
    assert (fields["lock_s"], fields["handback_s"]) == (0.5, 0.3)
    # 3.0 - 0.2 waiting for a worker - 0.3 handing back - 1.0 CPU - 0.5 the lock
    assert fields["waited_s"] == pytest.approx(1.0)
    assert fields["gc_full"] is None and fields["gc_s"] is None
    assert fields["backfill"] is True


def test_a_forked_pass_reports_its_process_s_cpu_fork_and_reading_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pass decided in a process of its own (ADR 0031): ``cpu_s`` is the child's, the
    fork and the unpickling of its result are their own fields, not ``waited_s``."""
    passes = SlowPasses(2.0, no_gc, lambda: 0.0)
    process = ProcessFacts(fork_s=0.1, cpu_s=1.5, load_s=0.2)
    passes.record(PassResult(Plan(revision=1), stages=STAGES, process=process))
    with caplog.at_level(logging.WARNING, logger="hal.server.observe.passes"):
        passes.on_cycle(stats(3.0, cpu_s=0.3), pending=10)  # (the parent thread's 0.3)
    [record] = [r for r in caplog.records if r.getMessage() == "scheduling pass took long"]
    fields = record.__dict__
    assert fields["forked"] is True
    assert (fields["fork_s"], fields["cpu_s"], fields["load_s"]) == (0.1, 1.5, 0.2)
    # 3.0 - 0.2 waiting for a worker - 0.1 the fork - 1.5 the child's CPU - 0.2 reading
    assert fields["waited_s"] == pytest.approx(1.0)
    passes.record(result())
    with caplog.at_level(logging.WARNING, logger="hal.server.observe.passes"):
        passes.on_cycle(stats(3.0), pending=10)
    assert caplog.records[-1].__dict__["forked"] is False


class _Host:
    """A scheduler host with one pending job whose plan takes ``apply_s`` to apply."""

    def __init__(self, apply_s: float) -> None:
        self.changed = asyncio.Event()
        self.apply_s = apply_s

    def has_pending(self) -> bool:
        return True

    def snapshot(self) -> ClusterSnapshot:
        return snapshot_of().pending(make_job(1)).build()

    async def fill_related(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        return snap

    async def apply_plan(self, plan: Plan, started: list[int] | None = None) -> list[int]:
        await asyncio.sleep(self.apply_s)
        return []


def test_the_service_times_the_wait_and_the_cpu_of_a_pass() -> None:
    from hal.scheduler.service import SchedulerService

    def decide(snap: ClusterSnapshot) -> Plan:
        end = time.thread_time() + 0.03
        while time.thread_time() < end:
            pass
        time.sleep(0.02)  # (not the thread's CPU)
        return Plan(snap.revision)

    service = SchedulerService(_Host(apply_s=0.02), decide)
    asyncio.run(service.cycle())
    s = service.stats
    assert s.last_pass_cpu_s >= 0.03
    assert s.last_pass_s >= s.last_pass_cpu_s + 0.02
    assert 0 <= s.last_pass_wait_s < s.last_pass_s
    assert 0 <= s.last_pass_handback_s < s.last_pass_s - s.last_pass_cpu_s
    assert s.last_apply_s >= 0.02 and s.last_pass_began > 0


def test_the_event_loop_late_to_take_the_plan_back_is_the_hand_back() -> None:
    """The pass ends on its thread while the event loop is held (0.15 s): that delay is
    ``last_pass_handback_s``, not the thread's."""
    from hal.scheduler.service import SchedulerService

    def decide(snap: ClusterSnapshot) -> Plan:
        time.sleep(0.02)
        return Plan(snap.revision)

    async def both(service: SchedulerService) -> None:
        async def hog() -> None:
            await asyncio.sleep(0.005)
            time.sleep(0.15)  # (the event loop held past the pass's end)

        await asyncio.gather(service.cycle(), hog())

    service = SchedulerService(_Host(apply_s=0.0), decide)
    asyncio.run(both(service))
    s = service.stats
    assert s.last_pass_handback_s >= 0.1
    assert s.last_pass_s >= s.last_pass_handback_s + 0.02


def test_diag_gives_the_longest_pass_breakdown_until_the_reset(
    cluster: Cluster, clock: VirtualClock
) -> None:
    from hal.server.observe.diag import reset_diag, scheduler_diag
    from hal.server.observe.plane import ObservePlane

    asyncio.run(cluster.load())
    plane = ObservePlane(HalConfig(cluster_name="test"), cluster, clock, ObserveConfig())
    snap, plan = snapshot_of().pending(make_job(1)).build(), Plan(revision=0)
    plane.passes.record(result())
    plane._on_cycle(stats(2.5), snap, plan)
    plane._on_cycle(stats(0.5), snap, plan)
    got = scheduler_diag(plane).max_pass_breakdown
    assert got is not None and got["pass_s"] == 2.5 and got["pending"] == 1
    assert got["at"] == clock.now()
    reset_diag(plane)
    assert scheduler_diag(plane).max_pass_breakdown is None
