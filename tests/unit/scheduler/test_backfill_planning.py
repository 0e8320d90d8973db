"""The backfill stage holds a predictor shared with other threads for the whole stage
(``BackfillPlugin.planning``): the prediction service's trainer observes and trains
between two stages, never inside one, and the stage's ``runtime`` calls do not wait for
it again one by one."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from blocked_head import blocked_head

from hal.bench.sched_pass import build_workload
from hal.core.job import Job
from hal.predict import SharedPredictor
from hal.predict.registry import planning_predictor
from hal.scheduler.framework.planner import Planner
from hal.scheduler.framework.profile import Profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import backfill, build_scheduler, default_profile, default_registry
from hal.scheduler.plugins.backfill.plugin import Backfill
from hal.testing import make_job


def _held_elsewhere(lock: Any) -> bool:
    """Whether another thread finds ``lock`` taken."""
    got: list[bool] = []

    def probe() -> None:
        free = lock.acquire(blocking=False)
        if free:
            lock.release()
        got.append(not free)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return got[0]


def test_a_shared_predictor_is_held_while_planning_and_no_other_is() -> None:
    shared = SharedPredictor(planning_predictor("avg2"))
    plugin = backfill.new({"mode": "easy"}, predictor=shared)
    assert not _held_elsewhere(shared.lock)
    with plugin.planning():
        assert _held_elsewhere(shared.lock)
        assert plugin.runtime(make_job(1).limit(100).build()) > 0  # (re-entered: no wait)
    assert not _held_elsewhere(shared.lock)
    with backfill.new({"mode": "easy"}).planning():  # the user predictor: nothing held
        pass


class _Watching(Backfill):
    """The plugin, noting whether its predictor was held elsewhere at each run time."""

    seen: list[bool]

    def runtime(self, job: Job, elapsed_s: float = 0.0) -> float:
        assert isinstance(self.predictor, SharedPredictor)
        self.seen.append(_held_elsewhere(self.predictor.lock))
        return super().runtime(job, elapsed_s)


def test_a_pass_plans_every_run_time_with_the_predictor_held() -> None:
    shared = SharedPredictor(planning_predictor("avg2"))
    scheduler = build_scheduler(default_profile(), default_registry(predictor=shared))
    plugin = scheduler.profile.backfill
    assert isinstance(plugin, Backfill)
    plugin.__class__ = _Watching
    watching: Any = plugin
    watching.seen = []
    result = scheduler.run_pass(blocked_head())
    assert result.backfill is not None
    assert watching.seen and all(watching.seen)
    assert not _held_elsewhere(shared.lock)  # let go after the stage


class _NoPlanning:
    """A backfill plugin written before ``planning`` (out of the tree): every method of
    ``BackfillPlugin`` but that optional one."""

    def __init__(self, inner: Backfill) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    @property
    def yield_interval_s(self) -> float:
        return self.inner.yield_interval_s

    def policy_for(self, partition: str) -> Any:
        return self.inner.policy_for(partition)

    def prepare(self, jobs: Sequence[Job]) -> None:
        self.inner.prepare(jobs)

    def runtime(self, job: Job, elapsed_s: float = 0.0) -> float:
        return self.inner.runtime(job, elapsed_s)

    def fixed_runtimes(self, jobs: Sequence[Job]) -> Any:
        return self.inner.fixed_runtimes(jobs)


def test_a_backfill_plugin_without_planning_is_still_one() -> None:
    """``planning`` is optional (``BackfillPlanning``): a plugin without it stays the
    profile's backfill plugin, its stage held around nothing, timed or not."""
    sched = build_scheduler()
    inner = sched.profile.backfill
    assert isinstance(inner, Backfill)
    plugin = _NoPlanning(inner)
    assert not hasattr(plugin, "planning")
    profile = Profile.from_plugins([sched.profile.queue_sort, plugin])
    assert profile.backfill is plugin
    bare = Scheduler(dataclasses.replace(sched.profile, backfill=plugin))
    for timed in (False, True):
        result = bare.run_pass(blocked_head(), time_plugins=timed)
        assert result.backfill is not None and result.backfill.lock_s >= 0
        assert {p.job_id for p in result.plan.placements} == {12}


def test_the_stage_s_wait_for_the_predictor_is_its_lock_s() -> None:
    """Another thread holding the shared predictor (the trainer) as the stage begins:
    the stage's wait to take it is ``BackfillCycle.lock_s``, apart from the rest."""
    shared = SharedPredictor(planning_predictor("avg2"))
    scheduler = build_scheduler(default_profile(), default_registry(predictor=shared))
    taken, let_go = threading.Event(), threading.Event()

    def trainer() -> None:
        with shared.lock:
            taken.set()
            let_go.wait(5)

    thread = threading.Thread(target=trainer)
    thread.start()
    taken.wait(5)
    threading.Timer(0.2, let_go.set).start()
    result = scheduler.run_pass(blocked_head())
    thread.join()
    assert result.backfill is not None
    assert 0.15 <= result.backfill.lock_s <= result.backfill.duration_s
    quiet = scheduler.run_pass(blocked_head())
    assert quiet.backfill is not None and quiet.backfill.lock_s < 0.05


@pytest.mark.parametrize("seed", [1, 2])
def test_the_free_cpus_kept_per_partition_follow_each_start(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every start of a backfill pass (one-node and multi-node jobs, on partitions
    that share nodes: ``debug``'s are ``batch``'s), the free CPUs ``free_now`` keeps per
    partition are what a new sum over the pass's table gives."""
    checked: list[int] = []
    start_now = Planner.start_now

    def checking(self: Planner, job: Job, runtime: float, **kw: Any) -> Any:
        stage = start_now(self, job, runtime, **kw)
        table = self.ctx.nodes
        for partition, free in self._free.items():
            assert free == int(table.free_cpus[table.partition_mask(partition)].sum())
            checked.append(free)
        return stage

    monkeypatch.setattr(Planner, "start_now", checking)
    workload = build_workload(3_000, 300, seed=seed)
    build_scheduler().run_pass(workload.snapshot(), backfill=True)
    assert len(checked) > 50
