"""Preemption, over random clusters, queues and QoS (``type = "qos"``) or partition
tiers (``type = "partition_prio"``): a victim is of lower standing than its preemptor
(a QoS the preemptor's QoS may preempt, of a lower QoS priority; a partition of a lower
priority tier), never a job of equal or higher standing; it was running, not already
leaving; the victims of one preemptor are enough for it to fit (checked independently:
it fits once they are gone); and the same snapshot gives the same preemptions."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.preemption import PreemptionPolicy, PreemptType
from hal.core.priority import PriorityPolicy, Qos
from hal.core.states import JobState
from hal.scheduler.framework import ClusterSnapshot
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import Preemption
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import cluster, make_job
from hal.testing.examples import examples

NOW = 1_000_000.0
QOS = (
    Qos("top", priority=200, preempt=("mid", "low")),
    Qos("mid", priority=100, preempt=("low",)),
    Qos("low"),
)
MAY = {q.name: set(q.preempt) for q in QOS}
QOS_PRIORITY = {q.name: q.priority for q in QOS}
NODES = 4
TIERS = {"scavenger": 1, "batch": 3, "urgent": 5}


@st.composite
def cases(draw: st.DrawFn, tiers: bool = False) -> ClusterSnapshot:
    """Running and pending jobs in random QoS; with ``tiers``, in random partitions of
    ``TIERS`` over all the nodes as well."""
    builder = cluster(NOW).uniform_nodes(NODES, cpus=8, mem_gib=32, gpus=2)
    names = tuple(f"n{i:04d}" for i in range(1, NODES + 1))
    parts = tuple(TIERS) if tiers else ("",)
    for part in parts if tiers else ():
        builder.partition(part, *names, priority_tier=TIERS[part])
    for i in range(draw(st.integers(2, 14))):
        node = f"n{draw(st.integers(1, NODES)):04d}"
        j = (
            make_job(100 + i)
            .qos(draw(st.sampled_from([q.name for q in QOS])))
            .cpus(draw(st.integers(2, 6)))
            .gpus(draw(st.integers(0, 1)))
            .priority(draw(st.integers(0, 50)))
            .running_on(node, start=NOW - draw(st.integers(1, 5000)))
        )
        if tiers:
            j = j.partition(draw(st.sampled_from(parts)))
        state = draw(st.sampled_from([JobState.RUNNING] * 4 + [JobState.COMPLETING]))
        builder.running(j.build().evolve(state=state))
    for i in range(1, draw(st.integers(1, 6)) + 1):
        p = (
            make_job(i)
            .qos(draw(st.sampled_from([q.name for q in QOS])))
            .cpus(draw(st.integers(1, 8)))
            .gpus(draw(st.integers(0, 2)))
            .nodes(draw(st.integers(1, 2)))
            .priority(draw(st.integers(0, 60)))
        )
        builder.pending(p.partition(draw(st.sampled_from(parts))) if tiers else p)
    return builder.build()


def _scheduler(
    kind: PreemptType = PreemptType.QOS, snap: ClusterSnapshot | None = None
) -> Scheduler:
    return build_scheduler(
        default_profile(preemption=True),
        default_registry(
            policy=PriorityPolicy(qos=QOS),
            preemption_policy=PreemptionPolicy(type=kind),
            partitions=snap.partitions if snap is not None else (),
        ),
    )


def _qos(job: Job) -> str:
    return job.spec.qos or "normal"


def _lower_qos(victim: Job, job: Job) -> bool:
    return QOS_PRIORITY[_qos(victim)] < QOS_PRIORITY[_qos(job)] and _qos(victim) in MAY[_qos(job)]


def _lower_tier(victim: Job, job: Job) -> bool:
    return TIERS[victim.partition or ""] < TIERS[job.partition or ""]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_preemption_takes_only_lower_priority_preemptable_running_jobs(
    snap: ClusterSnapshot,
) -> None:
    _only_lower_standing(snap, _scheduler, _lower_qos)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(tiers=True))
def test_partition_priority_preempts_only_lower_tiers(snap: ClusterSnapshot) -> None:
    _only_lower_standing(snap, lambda: _scheduler(PreemptType.PARTITION_PRIO, snap), _lower_tier)


def _only_lower_standing(
    snap: ClusterSnapshot, make: Callable[[], Scheduler], lower: Callable[[Job, Job], bool]
) -> None:
    scheduler = make()
    result = scheduler.run_pass(snap)
    running = {j.id: j for j in snap.running}
    pending = {j.id: j for j in snap.pending}
    placed = {p.job_id for p in result.plan.placements}
    by: dict[int, list[Preemption]] = {}
    for p in result.plan.preemptions:
        victim, job = running[p.job_id], pending[p.by]
        assert victim.state is JobState.RUNNING
        assert lower(victim, job)
        assert p.by not in placed
        by.setdefault(p.by, []).append(p)
    assert len({p.job_id for p in result.plan.preemptions}) == len(result.plan.preemptions)
    for job_id, chosen in by.items():
        # once the victims and every job already leaving are gone, the job fits now
        gone = {p.job_id for p in chosen} | {
            j.id for j in snap.running if j.state is JobState.COMPLETING
        }
        after = ClusterSnapshot(
            revision=snap.revision,
            now=snap.now,
            nodes=snap.nodes,
            partitions=snap.partitions,
            pending=(pending[job_id],),
            running=tuple(j for j in snap.running if j.id not in gone),
        )
        fits = scheduler.test_only(after, pending[job_id])
        assert not hasattr(fits, "code"), fits
    # the same snapshot, the same decisions
    again = make().run_pass(snap)
    assert again.plan == result.plan
