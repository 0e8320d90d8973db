"""The preemption plugin: who is chosen, how few, and when nobody is."""

from __future__ import annotations

from hal.core.job import Job
from hal.core.preemption import (
    PREEMPTED_BY,
    PREEMPTING,
    PreemptionPolicy,
    PreemptMode,
    PreemptType,
)
from hal.core.priority import PriorityPolicy, Qos
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework import ClusterSnapshot
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import Preemption
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import cluster, make_job

NOW = 1_000_000.0
QOS = (
    Qos("high", priority=100, preempt=("low",), grace_time_s=30),
    Qos("low", priority=0, preempt_mode="cancel"),
    Qos("normal"),
)


def run(
    snap: ClusterSnapshot,
    kind: PreemptType = PreemptType.QOS,
    *,
    exempt_s: float = 0.0,
) -> PassResult:
    policy = PreemptionPolicy(type=kind, mode=PreemptMode.REQUEUE, exempt_time_s=exempt_s)
    scheduler = build_scheduler(
        default_profile(preemption=True, backfill=False),
        default_registry(policy=PriorityPolicy(qos=QOS), preemption_policy=policy),
    )
    return scheduler.run_pass(snap)


def low(job_id: int, node: str, *, cpus: int = 8, priority: int = 10, start: float = 0) -> Job:
    return (
        make_job(job_id)
        .qos("low")
        .cpus(cpus)
        .priority(priority)
        .running_on(node, start=NOW - 100 if start == 0 else start)
        .build()
    )


def high(job_id: int = 1, cpus: int = 8, nodes: int = 1) -> Job:
    return make_job(job_id).qos("high").cpus(cpus).nodes(nodes).priority(1000).build()


def victims(result: PassResult) -> list[int]:
    return sorted(p.job_id for p in result.plan.preemptions)


def test_a_high_qos_job_preempts_the_cheapest_low_job_it_needs() -> None:
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=8)
        .running(low(10, "n0001", priority=5), low(11, "n0002", priority=7))
        .pending(high())
        .build()
    )
    result = run(snap)
    # one node is enough: the lower-priority job goes, the other stays
    assert result.plan.preemptions == (Preemption(10, 1, "cancel", 0.0),)
    status = result.statuses[1]
    assert status.reason is PendingReason.RESOURCES
    assert "preempting job(s) 10" in status.message
    assert not result.plan.placements


def test_least_lost_work_breaks_a_priority_tie() -> None:
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=8)
        .running(
            low(10, "n0001", start=NOW - 5000),  # has run longer: more work lost
            low(11, "n0002", start=NOW - 50),
        )
        .pending(high())
        .build()
    )
    assert victims(run(snap)) == [11]


def test_only_the_victims_needed_are_taken_across_nodes() -> None:
    # a 2-node job: two whole nodes must be freed, the third job is spared
    snap = (
        cluster(NOW)
        .uniform_nodes(3, cpus=8)
        .running(
            low(10, "n0001", priority=1),
            low(11, "n0002", priority=2),
            low(12, "n0003", priority=3),
        )
        .pending(high(nodes=2))
        .build()
    )
    assert victims(run(snap)) == [10, 11]


def test_small_jobs_on_one_node_are_reprieved_when_not_needed() -> None:
    # n0001: two 4-CPU jobs; n0002: one 8-CPU job of a higher priority. The job needs 4
    # CPUs: freeing one small job is enough, the rest are spared.
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=8)
        .running(
            low(10, "n0001", cpus=4, priority=1),
            low(11, "n0001", cpus=4, priority=2),
            low(12, "n0002", cpus=8, priority=3),
        )
        .pending(high(cpus=4))
        .build()
    )
    assert victims(run(snap)) == [10]


def test_only_a_listed_qos_is_preempted_whatever_its_job_priority() -> None:
    normal = make_job(12).cpus(8).priority(1).running_on("n0002", start=NOW - 10).build()
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=8)
        .running(low(10, "n0001", priority=5000), normal)
        .pending(high())
        .build()
    )
    # the job priority orders victims; who may be a victim is the QoS's standing
    assert victims(run(snap)) == [10]
    only_normal = (
        cluster(NOW)
        .uniform_nodes(1, cpus=8)
        .running(make_job(12).cpus(8).priority(1).running_on("n0001", start=NOW - 10))
        .pending(high())
        .build()
    )
    result = run(only_normal)
    assert result.plan.preemptions == ()
    assert result.statuses[1].reason is PendingReason.RESOURCES


def test_nobody_is_preempted_when_even_all_candidates_would_not_do() -> None:
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=8)
        .running(low(10, "n0001"), make_job(11).cpus(8).running_on("n0002").build())
        .pending(high(nodes=2))
        .build()
    )
    assert run(snap).plan.preemptions == ()


def test_jobs_already_leaving_count_as_free_so_nobody_new_is_chosen() -> None:
    leaving = low(10, "n0001").evolve(extra={PREEMPTED_BY: "1"})
    completing = low(11, "n0002").evolve(state=JobState.COMPLETING)
    snap = (
        cluster(NOW)
        .uniform_nodes(3, cpus=8)
        .running(leaving, completing, low(12, "n0003"))
        .pending(high(nodes=2))
        .build()
    )
    result = run(snap)
    assert result.plan.preemptions == ()
    assert "waiting for preempted jobs" in result.statuses[1].message


def test_exempt_time_protects_young_jobs() -> None:
    snap = (
        cluster(NOW)
        .uniform_nodes(1, cpus=8)
        .running(low(10, "n0001", start=NOW - 30))
        .pending(high())
        .build()
    )
    assert victims(run(snap, exempt_s=60)) == []
    assert victims(run(snap, exempt_s=10)) == [10]


def test_partition_priority_tiers() -> None:
    base = (
        cluster(NOW)
        .uniform_nodes(1, cpus=8)
        .partition("scavenger", "n0001", priority_tier=1)
        .partition("urgent", "n0001", priority_tier=5)
    )
    victim = make_job(10).cpus(8).partition("scavenger").priority(1)
    victim = victim.running_on("n0001", start=NOW - 100)
    job = make_job(1).cpus(8).partition("urgent").priority(50)
    snap = base.running(victim).pending(job).build()
    result = run(snap, PreemptType.PARTITION_PRIO)
    assert result.plan.preemptions == (Preemption(10, 1, "requeue", 0.0),)
    # the other way round: a scavenger job never preempts an urgent one
    rev = (
        cluster(NOW)
        .uniform_nodes(1, cpus=8)
        .partition("scavenger", "n0001", priority_tier=1)
        .partition("urgent", "n0001", priority_tier=5)
        .running(make_job(10).cpus(8).partition("urgent").priority(1).running_on("n0001"))
        .pending(make_job(1).cpus(8).partition("scavenger").priority(50))
        .build()
    )
    assert run(rev, PreemptType.PARTITION_PRIO).plan.preemptions == ()


def test_a_job_that_fits_preempts_nobody_and_off_means_off() -> None:
    snap = cluster(NOW).uniform_nodes(2, cpus=8).running(low(10, "n0001")).pending(high()).build()
    result = run(snap)
    assert result.plan.preemptions == ()
    assert [p.job_id for p in result.plan.placements] == [1]
    full = cluster(NOW).uniform_nodes(1, cpus=8).running(low(10, "n0001")).pending(high())
    assert run(full.build(), PreemptType.OFF).plan.preemptions == ()


def test_backfill_and_test_only_add_no_nomination() -> None:
    snap = (
        cluster(NOW)
        .uniform_nodes(1, cpus=8)
        .running(low(10, "n0001").evolve(time_limit_s=3600))
        .pending(high(), make_job(2).qos("high").cpus(8).priority(999))
        .build()
    )
    scheduler = build_scheduler(
        default_profile(preemption=True),  # with backfill, which re-runs held-back jobs
        default_registry(
            policy=PriorityPolicy(qos=QOS),
            preemption_policy=PreemptionPolicy(type=PreemptType.QOS),
        ),
    )
    result = scheduler.run_pass(snap)
    # job 1 takes the one victim; job 2 waits behind it and chooses nobody
    assert result.plan.preemptions == (Preemption(10, 1, "cancel", 0.0),)
    # a what-if run is never acted on: it reports the shortage and nominates nothing
    status = scheduler.test_only(snap, high())
    assert getattr(status, "reason", None) is PendingReason.RESOURCES


def test_the_queue_tries_a_job_before_the_jobs_it_may_preempt() -> None:
    # the requeued victim has the higher job priority (it was submitted first), but its
    # preemptor gets the node it was freed for; without preemption, priority decides
    victim = make_job(10).qos("low").cpus(8).priority(2000).build()
    snap = cluster(NOW).uniform_nodes(1, cpus=8).pending(victim, high()).build()
    assert [p.job_id for p in run(snap).plan.placements] == [1]
    plain = build_scheduler(
        default_profile(backfill=False), default_registry(policy=PriorityPolicy(qos=QOS))
    )
    assert [p.job_id for p in plain.run_pass(snap).plan.placements] == [10]


def test_partition_tiers_order_the_queue_under_partition_priority_preemption() -> None:
    snap = (
        cluster(NOW)
        .uniform_nodes(1, cpus=8)
        .partition("scavenger", "n0001", priority_tier=1)
        .partition("urgent", "n0001", priority_tier=5)
        .pending(
            make_job(10).cpus(8).partition("scavenger").priority(2000),
            make_job(1).cpus(8).partition("urgent").priority(1),
        )
        .build()
    )
    policy = PreemptionPolicy(type=PreemptType.PARTITION_PRIO)
    scheduler = build_scheduler(
        default_profile(preemption=True, backfill=False),
        default_registry(preemption_policy=policy, partitions=snap.partitions),
    )
    assert [p.job_id for p in scheduler.run_pass(snap).plan.placements] == [1]


def test_a_job_that_preempted_goes_first_so_its_victims_cannot_take_the_nodes_back() -> None:
    # same QoS, the victim (requeued) has the higher priority: without the mark it would
    # win the node again; with it the preemptor does
    victim = make_job(10).cpus(8).priority(2000).build()
    preemptor = make_job(1).cpus(8).priority(1).build()
    snap = cluster(NOW).uniform_nodes(1, cpus=8).pending(victim, preemptor).build()
    assert [p.job_id for p in run(snap).plan.placements] == [10]
    marked = preemptor.evolve(extra={PREEMPTING: str(NOW - 5)})
    snap = cluster(NOW).uniform_nodes(1, cpus=8).pending(victim, marked).build()
    assert [p.job_id for p in run(snap).plan.placements] == [1]
