"""A ``--signal`` victim is signalled first so that it can checkpoint, also under the
default grace time 0: it gets its own ``@SECS`` (capped) before it is ended; on a real
``Cluster`` over SQLite, no agents (``hal.state.preempt``)."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace

from hal.core.clock import VirtualClock
from hal.core.job import Job, SignalSpec
from hal.core.preemption import GRACE_END
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Plan, Preemption
from hal.state import preempt
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.mirror import signals, store


def victim(clock: VirtualClock, sig: SignalSpec | None) -> Job:
    job = make_job(1).cpus(2).mem_gib(1).running_on("n1", start=clock.now() - 60).build()
    return job.evolve(launched=True, spec=replace(job.spec, signal=sig))


def preempt_for_high(cluster: Cluster, clock: VirtualClock, sig: SignalSpec | None,
                     grace_s: float = 0.0) -> None:  # fmt: skip
    store(cluster, victim(clock, sig), make_job(2).cpus(2).mem_gib(1).build())
    plan = Plan(cluster.revision, preemptions=(Preemption(1, 2, "requeue", grace_s),))
    asyncio.run(cluster.apply_plan(plan))


def grace_given(cluster: Cluster) -> float:
    (event,) = [e for e in cluster.recent_events if e.kind == "job.preempted"]
    grace = event.data["grace_s"]
    assert isinstance(grace, float)
    return grace


def test_with_grace_0_a_signal_job_gets_its_secs_to_checkpoint(
    cluster: Cluster, clock: VirtualClock
) -> None:
    preempt_for_high(cluster, clock, SignalSpec(signal.SIGUSR1, 45, batch_only=True))
    job = cluster.jobs[1]
    assert job.state is JobState.RUNNING  # still running: checkpointing
    assert float(job.extra[GRACE_END]) == clock.now() + 45
    assert signals(cluster, 1) == [signal.SIGUSR1]
    assert grace_given(cluster) == 45.0
    states = []
    for step in (44, 1):  # ended when its 45 s are over, not before
        clock.advance(step)
        asyncio.run(preempt.end_graced(cluster))
        states.append(cluster.jobs[1].state)
    assert states == [JobState.RUNNING, JobState.COMPLETING]


def test_the_signal_time_is_capped(cluster: Cluster, clock: VirtualClock) -> None:
    preempt_for_high(cluster, clock, SignalSpec(signal.SIGUSR1, 3600))
    assert grace_given(cluster) == preempt.SIGNAL_GRACE_MAX_S


def test_a_configured_grace_time_wins(cluster: Cluster, clock: VirtualClock) -> None:
    preempt_for_high(cluster, clock, SignalSpec(signal.SIGUSR1, 45), grace_s=10.0)
    assert float(cluster.jobs[1].extra[GRACE_END]) == clock.now() + 10
    assert grace_given(cluster) == 10.0


def test_without_signal_grace_0_ends_it_at_once(cluster: Cluster, clock: VirtualClock) -> None:
    preempt_for_high(cluster, clock, None)
    assert cluster.jobs[1].state is JobState.COMPLETING
    assert GRACE_END not in cluster.jobs[1].extra
    assert signals(cluster, 1) == []
    assert grace_given(cluster) == 0.0
