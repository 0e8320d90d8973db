"""Preemption, over random clusters, queues and QoS: a victim's QoS is one the
preemptor's QoS may preempt, of a lower QoS priority (never a job of equal or higher
standing); it was running,
not already leaving; the victims of one preemptor are enough for it to fit (checked
independently: it fits once they are gone); and the same snapshot gives the same
preemptions."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.preemption import PreemptionPolicy, PreemptType
from hal.core.priority import PriorityPolicy, Qos
from hal.core.states import JobState
from hal.scheduler.framework import ClusterSnapshot
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import Preemption
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import cluster, make_job

NOW = 1_000_000.0
QOS = (
    Qos("top", priority=200, preempt=("mid", "low")),
    Qos("mid", priority=100, preempt=("low",)),
    Qos("low"),
)
MAY = {q.name: set(q.preempt) for q in QOS}
QOS_PRIORITY = {q.name: q.priority for q in QOS}
NODES = 4


@st.composite
def cases(draw: st.DrawFn) -> ClusterSnapshot:
    builder = cluster(NOW).uniform_nodes(NODES, cpus=8, mem_gib=32, gpus=2)
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
        state = draw(st.sampled_from([JobState.RUNNING] * 4 + [JobState.COMPLETING]))
        builder.running(j.build().evolve(state=state))
    for i in range(1, draw(st.integers(1, 6)) + 1):
        builder.pending(
            make_job(i)
            .qos(draw(st.sampled_from([q.name for q in QOS])))
            .cpus(draw(st.integers(1, 8)))
            .gpus(draw(st.integers(0, 2)))
            .nodes(draw(st.integers(1, 2)))
            .priority(draw(st.integers(0, 60)))
        )
    return builder.build()


def _scheduler() -> Scheduler:
    return build_scheduler(
        default_profile(preemption=True),
        default_registry(
            policy=PriorityPolicy(qos=QOS),
            preemption_policy=PreemptionPolicy(type=PreemptType.QOS),
        ),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_preemption_takes_only_lower_priority_preemptable_running_jobs(
    snap: ClusterSnapshot,
) -> None:
    scheduler = _scheduler()
    result = scheduler.run_pass(snap)
    running = {j.id: j for j in snap.running}
    pending = {j.id: j for j in snap.pending}
    placed = {p.job_id for p in result.plan.placements}
    by: dict[int, list[Preemption]] = {}
    for p in result.plan.preemptions:
        victim, job = running[p.job_id], pending[p.by]
        assert victim.state is JobState.RUNNING
        assert QOS_PRIORITY[victim.spec.qos or "normal"] < QOS_PRIORITY[job.spec.qos or "normal"]
        assert (victim.spec.qos or "normal") in MAY[job.spec.qos or "normal"]
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
    again = _scheduler().run_pass(snap)
    assert again.plan == result.plan
