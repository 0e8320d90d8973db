"""The preemption plugin with mode ``suspend``: suspending frees a victim's CPUs but not
its memory, GPUs or node, so a victim is chosen only when CPUs are what the job lacks,
and a job already suspended by preemption leaves its CPUs free to the pass."""

from __future__ import annotations

from hal.core.job import Job
from hal.core.preemption import PREEMPT_MODE, PREEMPTED_BY, PreemptionPolicy, PreemptType
from hal.core.priority import PriorityPolicy, Qos
from hal.core.states import JobState
from hal.scheduler.framework import ClusterSnapshot
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import Preemption
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import cluster, make_job

NOW = 1_000_000.0


def run(snap: ClusterSnapshot, mode: str = "suspend", *, backfill: bool = False) -> PassResult:
    qos = (
        Qos("high", priority=100, preempt=("low",)),
        Qos("low", priority=0, preempt_mode=mode, grace_time_s=30),  # no grace to suspend
    )
    scheduler = build_scheduler(
        default_profile(preemption=True, backfill=backfill),
        default_registry(
            policy=PriorityPolicy(qos=qos), preemption_policy=PreemptionPolicy(PreemptType.QOS)
        ),
    )
    return scheduler.run_pass(snap)


def low(job_id: int = 10, *, mem_gib: float = 4, state: JobState = JobState.RUNNING) -> Job:
    builder = make_job(job_id).qos("low").cpus(8).mem_gib(mem_gib).priority(10)
    return builder.running_on("n0001", start=NOW - 100, state=state).build()


def suspended_victim(job_id: int = 10) -> Job:
    job = low(job_id, state=JobState.SUSPENDED)
    return job.evolve(extra={PREEMPTED_BY: "1", PREEMPT_MODE: "suspend"})


def high(*, mem_gib: float = 4, exclusive: bool = False) -> Job:
    builder = make_job(1).qos("high").cpus(8).mem_gib(mem_gib).priority(1000)
    return (builder.exclusive() if exclusive else builder).build()


def one_node(*running: Job, pending: Job) -> ClusterSnapshot:
    return cluster(NOW).uniform_nodes(1, cpus=8, mem_gib=32).running(*running).pending(pending)


def test_a_victim_whose_qos_says_suspend_is_suspended_without_grace_time() -> None:
    result = run(one_node(low(), pending=high()).build())
    assert result.plan.preemptions == (Preemption(10, 1, "suspend", 0.0),)
    assert not result.plan.placements  # it starts once the victim is stopped


def test_nobody_is_suspended_when_the_job_needs_the_memory_the_victim_keeps() -> None:
    # 24 GiB held by the victim, 16 wanted: suspending frees the CPUs, not the memory
    snap = one_node(low(mem_gib=24), pending=high(mem_gib=16)).build()
    assert run(snap).plan.preemptions == ()
    # requeueing it would free both: then it is chosen
    assert run(snap, "requeue").plan.preemptions == (Preemption(10, 1, "requeue", 30.0),)


def test_an_exclusive_job_does_not_suspend_anyone() -> None:
    # a suspended job still sits on its node: no exclusive job may join it
    snap = one_node(low(), pending=high(exclusive=True)).build()
    assert run(snap).plan.preemptions == ()


def test_the_preemptor_is_placed_on_the_cpus_of_a_suspended_victim() -> None:
    for backfill in (False, True):
        result = run(one_node(suspended_victim(), pending=high()).build(), backfill=backfill)
        assert [p.job_id for p in result.plan.placements] == [1]
        assert result.plan.placements[0].allocation.nodes == ("n0001",)
        assert result.plan.preemptions == ()


def test_a_suspended_victim_is_not_counted_as_leaving() -> None:
    # its memory stays held: a job that needs it neither starts nor "waits for it to
    # end" (nothing else to preempt: no plan at all)
    result = run(one_node(suspended_victim(), pending=high(mem_gib=30)).build())
    assert result.plan.placements == () and result.plan.preemptions == ()
    assert "waiting for preempted jobs" not in result.statuses[1].message


def test_an_admin_suspended_job_keeps_its_cpus() -> None:
    # scontrol suspend: the job holds its whole allocation, and it is not a candidate
    result = run(one_node(low(state=JobState.SUSPENDED), pending=high()).build())
    assert result.plan.placements == () and result.plan.preemptions == ()
