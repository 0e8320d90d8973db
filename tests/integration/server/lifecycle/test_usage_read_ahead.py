"""A standby reads the fair-share history ahead (``PriorityService.preload``, kept in a
``UsageMemo`` with each row's version): at its takeover ``PriorityService.start`` fetches
only the finished runs that ended or changed since, and the decayed usage it charges is
the very number a cold start charges (same runs, same order), and what the runs are worth
computed directly, while runs end, change, are requeued or purged between read-aheads."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from collections.abc import Iterable, Sequence

import pytest
from sqlalchemy import text

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, Job
from hal.core.priority import Account, PriorityPolicy, UserAccount
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState
from hal.core.suspension import SUSPENDED_S
from hal.scheduler.plugins.multifactor import Assoc
from hal.server.priority import PriorityService
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.testing import make_job

HALF_LIFE = 3_600.0
POLICY = PriorityPolicy(
    enabled=True,
    decay_half_life_s=HALF_LIFE,  # the window: 40 half-lives
    usage_gpu_weight=2.5,
    accounts=(Account("a"), Account("b")),
    users=(
        UserAccount("ann", "a", default=True),
        UserAccount("bob", "b", default=True),
        UserAccount("cat", "a", default=True),
        UserAccount("cat", "b"),
    ),
)
USERS = (("ann", None), ("bob", None), ("cat", None), ("cat", "b"))
START = 10_000_000.0


def _finished(rng: random.Random, job_id: int, now: float) -> Job:
    """A job that ran and ended before ``now``: some of them before the usage window,
    some suspended for a while, some with GPUs, some ending at the same time as others."""
    user, account = rng.choice(USERS)
    builder = make_job(job_id).user(user)
    if account is not None:
        builder = builder.account(account)
    end = now - rng.choice([rng.uniform(0, 45 * HALF_LIFE), 7_200.0])
    start = end - rng.uniform(1, 5_000)
    nodes = rng.randint(1, 3)
    per = ResourceVector(cpus=rng.randint(1, 64), memory_bytes=GiB, gpus=rng.choice([0, 0, 4]))
    names = tuple(f"n{i}" for i in range(nodes))
    marks = {SUSPENDED_S: str(rng.uniform(0, end - start))} if rng.random() < 0.2 else {}
    job = builder.build()
    return dataclasses.replace(
        job,
        state=rng.choice([JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT]),
        submit_time=start - 1,
        start_time=start,
        end_time=end,
        allocation=Allocation(names, (per,) * nodes),
        extra=marks,
    )


def _worth(jobs: Sequence[Job], now: float) -> dict[Assoc, float]:
    """What the finished runs in the window are worth at ``now``, summed exactly
    (``math.fsum``) from the decay's closed form: the cold read's number, computed
    another way."""
    h = HALF_LIFE
    parts: dict[Assoc, list[float]] = {}
    for job in jobs:
        assert job.start_time is not None and job.end_time is not None
        if job.end_time < now - 40 * h or job.allocation is None:
            continue
        total = job.allocation.total()
        rate = total.cpus + POLICY.usage_gpu_weight * total.gpus
        start = job.start_time + float(job.extra.get(SUSPENDED_S, 0.0))
        if job.end_time <= start:
            continue
        value = (
            rate * h / math.log(2) * (2 ** (-(now - job.end_time) / h) - 2 ** (-(now - start) / h))
        )
        account = job.spec.account or ("b" if job.spec.user == "bob" else "a")
        parts.setdefault((account, job.spec.user), []).append(value)
    return {assoc: math.fsum(values) for assoc, values in parts.items()}


async def _service(url: str, clock: VirtualClock) -> tuple[Cluster, PriorityService]:
    cluster = Cluster(SqlStateStore(url), HalConfig(), clock)
    await cluster.load()
    return cluster, PriorityService(cluster, POLICY)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_usage_read_ahead_is_a_cold_reads_usage_to_the_last_bit(pg_url: str, seed: int) -> None:
    rng = random.Random(seed)
    store = SqlStateStore(pg_url)
    store.migrate()
    jobs: dict[int, Job] = {}
    next_id = 1

    def add(n: int, now: float) -> None:
        nonlocal next_id
        made = [_finished(rng, next_id + i, now) for i in range(n)]
        next_id += n
        with store.transaction() as tx:
            if next_id == n + 1:  # (the first batch: the script all share)
                tx.insert_scripts([(1, made[0].spec.script)])
            tx.insert_jobs(made, [1] * n)
        jobs.update((j.id, j) for j in made)

    def change(now: float) -> None:
        """The leader's writes between two read-aheads: runs ended, a run's end moved,
        runs requeued (no longer finished), runs purged."""
        add(rng.randint(20, 60), now)
        ids = rng.sample(sorted(jobs), 12)
        moved = [
            dataclasses.replace(jobs[i], end_time=now - rng.uniform(0, HALF_LIFE)) for i in ids[:4]
        ]
        requeued = [
            dataclasses.replace(jobs[i], state=JobState.PENDING, start_time=None, end_time=None)
            for i in ids[4:8]
        ]
        with store.transaction() as tx:
            tx.update_jobs([*moved, *requeued])
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM jobs WHERE id = ANY(:ids)"), {"ids": ids[8:]})
        jobs.update((j.id, j) for j in moved)
        for gone in ids[4:]:
            del jobs[gone]

    async def scenario() -> tuple[dict[Assoc, float], dict[Assoc, float], float, tuple[int, int]]:
        clock = VirtualClock(START)
        add(400, clock.now())
        warm_cluster, warm = await _service(pg_url, clock)
        assert await asyncio.to_thread(warm.preload) == _in_window(jobs.values(), START)
        for _ in range(2):
            clock.advance(rng.uniform(1, 600))
            change(clock.now())
            await asyncio.to_thread(warm.preload)
        clock.advance(rng.uniform(1, 600))
        change(clock.now())  # after the last read ahead: fetched at the takeover
        await warm.start()
        now = clock.now()
        cold_cluster, cold = await _service(pg_url, clock)
        await cold.start()
        assert cold.history_read_ahead is None  # read cold
        read_ahead = warm.history_read_ahead
        assert read_ahead is not None
        warm_usage, cold_usage = dict(warm.usage(now)), dict(cold.usage(now))
        await warm_cluster.close()
        await cold_cluster.close()
        assert warm_usage == cold_usage  # to the last bit
        return warm_usage, _worth(list(jobs.values()), now), now, read_ahead

    warm_usage, worth, now, (kept, charged) = asyncio.run(scenario())
    store.close()
    assert set(warm_usage) == set(worth) and len(worth) == 4
    for assoc, value in worth.items():
        assert warm_usage[assoc] == pytest.approx(value, rel=1e-9)
    # every run of the window charged; most as read ahead, those written since fetched
    assert charged == _in_window(jobs.values(), now)
    assert 0 < kept < charged


def _in_window(jobs: Iterable[Job], now: float) -> int:
    return sum(1 for j in jobs if j.end_time is not None and j.end_time >= now - 40 * HALF_LIFE)
