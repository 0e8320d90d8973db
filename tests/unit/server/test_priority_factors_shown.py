"""What ``sprio`` and ``hal explain`` are served (``PriorityService.pending`` and
``calculated``) is the calculation that gave each pending job its priority, as Slurm's
sprio shows ``job_ptr->prio_factors``: the factors add up to the priority the queue is
ordered by. Found by exploratory testing: between two calculations (``calc_period``)
HAL served fresh factors beside the stored priority (``PRIORITY 9335, FAIRSHARE 7122``
and every other factor 0), and an ``sshare`` replaced the standing those fresh factors
were read from, so a read changed what the next ``sprio`` answered."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.priority import Account, PriorityPolicy, UserAccount
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.server.priority import JobPriority, PriorityService
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore

NOW = 1_000_000.0
ADMIN = Caller("root", admin=True)
POLICY = PriorityPolicy(
    enabled=True,
    weight_age=100_000,
    weight_fairshare=10_000,
    max_age_s=1000.0,  # 100 points a second
    decay_half_life_s=0.0,  # plain CPU-seconds
    calc_period_s=60.0,
    accounts=(Account("a"), Account("b")),
    users=(UserAccount("ann", "a", default=True), UserAccount("bob", "b", default=True)),
)


class Scene:
    """bob used 900 CPU-seconds earlier; ann's job runs on all 4 CPUs of n1 (her usage
    grows 4 CPU-seconds a second, so her factor falls and bob's rises); a job of bob's
    and a second one of ann's wait."""

    def __init__(self, cluster: Cluster, clock: VirtualClock) -> None:
        self.cluster = cluster
        self.clock = clock
        self.service = PriorityService(cluster, POLICY)
        self.waiting: list[int] = []

    async def start(self) -> None:
        await self.cluster.load()
        self.cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
        await self.service.start()
        self.service.ledger.record(("b", "bob"), 1.0, NOW - 1000, NOW - 100)
        (run,) = await self.cluster.submit([JobSpec(user="ann", script="#!/bin/sh\ntrue\n")])
        four = Allocation(("n1",), (ResourceVector(4, 0),))
        await self.cluster.apply_plan(Plan(self.cluster.revision, (Placement(run.job_id, four),)))
        self.clock.advance(100)
        for user in ("bob", "ann"):
            (job,) = await self.cluster.submit([JobSpec(user=user, script="#!/bin/sh\ntrue\n")])
            self.waiting.append(job.job_id)
        self.service.recalculate()  # a calc_period

    def shown(self) -> dict[int, JobPriority]:
        return {p.job.id: p for p in self.service.pending()}


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    clock = VirtualClock(NOW)
    cluster = Cluster(SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}"), HalConfig(), clock)
    scene = Scene(cluster, clock)
    asyncio.run(scene.start())
    yield scene
    asyncio.run(cluster.close())


def _sum(p: JobPriority) -> int:
    w = p.weighted
    return round(w.site + w.age + w.fairshare + w.job_size + w.partition + w.qos) - w.nice


def test_the_factors_shown_between_calculations_add_up_to_the_queues_priority(
    scene: Scene,
) -> None:
    """30 s after a calculation the age factor has grown by 3000 points and ann's usage
    by 120 CPU-seconds; sprio showed those fresh factors beside the stored priority."""
    calculated = scene.shown()
    scene.clock.advance(30)
    for job_id, p in scene.shown().items():
        assert p.weighted == calculated[job_id].weighted
        assert p.priority == _sum(p) == scene.cluster.jobs[job_id].priority


def test_sshare_does_not_change_what_sprio_or_explain_shows(scene: Scene) -> None:
    """An ``sshare`` (``shares()``) replaced the service's standing, so the factor the
    next sprio read was the sshare's, not the one the priority was calculated with."""
    before = scene.shown()
    scene.clock.advance(30)
    rows = {(r.account, r.user): r for r in scene.service.shares()}
    assert rows[("a", "ann")].raw_usage == pytest.approx(4 * 130)  # sshare is fresh
    after = scene.shown()
    assert after == before
    for job_id in scene.waiting:
        p = scene.service.calculated(scene.cluster.jobs[job_id])
        assert p.share is not None and p.share.fairshare == p.factors.fairshare  # explain's
        assert p.priority == _sum(p) == scene.cluster.jobs[job_id].priority


def test_the_next_calculation_shows_new_factors_that_add_up_again(scene: Scene) -> None:
    first = scene.shown()
    scene.clock.advance(60)
    scene.service.recalculate()
    for job_id, p in scene.shown().items():
        assert p.weighted.age == pytest.approx(first[job_id].weighted.age + 6000)
        assert p.priority == _sum(p) == scene.cluster.jobs[job_id].priority
    bob, ann = (scene.shown()[job_id] for job_id in scene.waiting)
    assert ann.weighted.fairshare < first[ann.job.id].weighted.fairshare  # she ran on
    assert bob.weighted.fairshare > first[bob.job.id].weighted.fairshare


def test_a_nice_update_is_calculated_at_once_with_the_factors_of_that_moment(
    scene: Scene,
) -> None:
    job_id = scene.waiting[0]
    scene.clock.advance(30)
    asyncio.run(commands.update(scene.cluster, str(job_id), ADMIN, nice=500))
    p = scene.shown()[job_id]
    assert p.factors.nice == 500
    assert p.priority == _sum(p) == scene.cluster.jobs[job_id].priority


def test_an_administrators_priority_is_shown_as_set_with_the_factors_it_would_have(
    scene: Scene,
) -> None:
    job_id = scene.waiting[0]
    asyncio.run(commands.update(scene.cluster, str(job_id), ADMIN, priority=42))
    scene.clock.advance(30)
    scene.service.recalculate()
    p = scene.shown()[job_id]
    assert p.priority == 42 == scene.cluster.jobs[job_id].priority
    assert p.weighted.age > 0  # REST keeps the factors (``fixed``); sprio prints them 0


def test_a_new_associations_first_job_is_calculated_with_its_own_row(scene: Scene) -> None:
    """carl is not in ``[[users]]``: his first job's association (root, carl) was not
    in the standing, so its factor was a bare 1.0 and ``hal explain`` read his row from
    a fresh standing (and stored it). Now the calculation adds his row first."""
    scene.clock.advance(30)
    spec = JobSpec(user="carl", script="#!/bin/sh\ntrue\n")
    (job,) = asyncio.run(scene.cluster.submit([spec]))
    p = scene.service.calculated(scene.cluster.jobs[job.job_id])
    assert p.share is not None and (p.share.account, p.share.user) == ("root", "carl")
    assert p.share.fairshare == p.factors.fairshare
    assert p.priority == _sum(p) == scene.cluster.jobs[job.job_id].priority
