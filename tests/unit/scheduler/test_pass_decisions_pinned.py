"""The pass's decisions, pinned: placements, every job's verdict (code, reason, message,
plugin), updates, terminations, preemptions, rejection counts and reservations of
seeded ``sched-pass`` workloads, as digests.

The digests were recorded on the tree before the 2026-11-23 speed-ups of the pass
(a9cb594) and are unchanged by them. A change that is *meant* to change decisions
updates them (``python tests/unit/scheduler/test_pass_decisions_pinned.py`` prints
the current ones); any other change must leave them as they are. The ``mutated=True``
digests changed when ``aftercorr`` without a corresponding element came to be judged on
the whole target array, not on the job with the array's id alone (seed 1: one job's
NEVER became WAITING). They changed again when a job kept off nodes only
by a MAINT reservation came to wait with ``ReqNodeNotAvail, Reserved for maintenance``
from the reservation plugin, as Slurm 22.05.8 says it, not ``Resources`` from
noderesources: the verdicts' plugin and reason, and (seed 2, preempt) two such jobs no
longer block their partition.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

import pytest

from hal.bench.sched_limits import build_policy
from hal.bench.sched_pass import CPUS, GPUS, NOW, Workload, build_workload, with_limits
from hal.core.job import Dependency, DependencyKind, DependencyTerm
from hal.core.preemption import PreemptionPolicy, PreemptType
from hal.core.priority import Account, PriorityPolicy, Qos, TresLimits
from hal.core.reservation import Reservation, ReservationFlag
from hal.core.states import NodeState
from hal.scheduler.framework import PassResult, Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry

KINDS = ("default", "conservative", "limits", "preempt")
# ``hal bench sched-pass``'s own limits (org GrpTRES, QoS GrpTRES, MaxWall, MaxTRESPerJob,
# GrpJobs, MaxJobs, MaxJobsPerUser), on the workload charged to its accounts; recorded on
# c497c1a, before the limits plugin's per-pass caches
BENCH_LIMITS = "bench-limits"
# the same, its two organisations lending each other CPUs (a cohort) and the preemption
# plugin taking lent quota back
BENCH_COHORT = "bench-cohort"


def bench_cohort(nodes: int) -> Scheduler:
    policy = build_policy(nodes, CPUS, GPUS)
    cpus = nodes * CPUS
    accounts = tuple(
        replace(a, grp_tres=TresLimits(cpus=int(cpus * share)), cohort="orgs")
        if a.name in ("org0", "org1")
        else a
        for a, share in ((a, 0.30 if a.name == "org0" else 0.20) for a in policy.accounts)
    )
    policy = replace(policy, accounts=accounts)
    registry = default_registry(
        policy=policy, preemption_policy=PreemptionPolicy(type=PreemptType.QOS)
    )
    return build_scheduler(default_profile(limits=True, preemption=True), registry)


def scheduler(kind: str) -> Scheduler:
    if kind == "conservative":
        prof = default_profile()
        prof["plugin_args"]["backfill"] = {"mode": "conservative"}  # type: ignore[index]
        return build_scheduler(prof)
    if kind == "limits":
        accounts = tuple(
            Account(f"acct{i:02d}", max_jobs=2 if i % 2 else None, grp_jobs=6 if i % 3 else None)
            for i in range(20)
        )
        qos = (Qos("normal", max_jobs_per_user=4, max_wall_s=40 * 3600),)
        policy = PriorityPolicy(accounts=accounts, qos=qos)
        return build_scheduler(default_profile(limits=True), default_registry(policy=policy))
    if kind == "preempt":
        policy = PriorityPolicy(qos=(Qos("normal"), Qos("high", priority=10, preempt=("normal",))))
        registry = default_registry(
            policy=policy, preemption_policy=PreemptionPolicy(type=PreemptType.QOS)
        )
        return build_scheduler(default_profile(preemption=True), registry)
    return build_scheduler()


def mutated(w: Workload, seed: int) -> ClusterSnapshot:
    """The workload with what the synthetic one lacks: DOWN and DRAIN nodes, a switch
    tree, node ranges, --nodelist, --exclude, --mem=0, singleton and aftercorr
    dependencies, a never-satisfied one with --kill-on-invalid-dep, priority ties,
    jobs that preempt, and advance reservations (one in force, one maintenance)."""
    rng = random.Random(seed * 7919)
    nodes = list(w.nodes)
    for i in rng.sample(range(len(nodes)), max(1, len(nodes) // 40)):
        nodes[i] = replace(nodes[i], state=rng.choice((NodeState.DOWN, NodeState.DRAIN)))
    nodes = [
        replace(n, topology=("top", f"sw{i // 64}", f"leaf{i // 16}")) for i, n in enumerate(nodes)
    ]
    names = [n.name for n in nodes]
    arrays = sorted({j.array_job_id for j in w.pending if j.array_job_id is not None})
    pending = []
    for j in w.pending:
        s = j.spec
        r = rng.random()
        if r < 0.02 and s.nodes_min > 1:
            s = s.with_changes(nodes_min=1, ntasks=s.nodes_min, ntasks_per_node=None)
        elif r < 0.03 and j.partition == "batch":
            s = s.with_changes(nodelist=(rng.choice(names[: len(names) // 2]),))
        elif r < 0.04:
            s = s.with_changes(exclude=tuple(rng.sample(names, 3)))
        elif r < 0.05 and s.nodes_min == 1 and not s.gpus_per_node:
            s = s.with_changes(memory_per_node_bytes=0, memory_per_cpu_bytes=None)
        elif r < 0.06:
            singleton = Dependency((DependencyTerm(DependencyKind.SINGLETON, ()),))
            s = s.with_changes(dependency=singleton, name=f"single{rng.randrange(5)}")
        elif r < 0.07 and j.array_job_id is not None:
            term = DependencyTerm(DependencyKind.AFTERCORR, (rng.choice(arrays),))
            s = s.with_changes(dependency=Dependency((term,)))
        elif r < 0.075:
            s = s.with_changes(
                qos="high",
                nodes_min=4,
                nodes_max=4,
                ntasks=256,
                ntasks_per_node=64,
                exclusive=True,
                memory_per_node_bytes=0,
                memory_per_cpu_bytes=None,
                gpus_per_node=0,
                gpu_type=None,
                memory_per_gpu_bytes=None,
                constraint=(),
            )
        elif r < 0.08:
            never = Dependency((DependencyTerm(DependencyKind.AFTEROK, (999_999,)),))
            s = s.with_changes(kill_on_invalid_dep=True, dependency=never)
        if r < 0.01:
            j = replace(j, priority=1000)
        pending.append(replace(j, spec=s) if s is not j.spec else j)
    for k in range(0, len(pending), 97):
        pending[k] = replace(pending[k], spec=pending[k].spec.with_changes(reservation="r1"))
    reservations = (
        Reservation("r1", NOW - 100, NOW + 7200, tuple(names[:8]), users=("u001", "u002")),
        Reservation(
            "maint",
            NOW + 3600,
            NOW + 9000,
            tuple(names[10:20]),
            flags=frozenset({ReservationFlag.MAINT}),
        ),
    )
    return ClusterSnapshot(
        1,
        NOW,
        tuple(nodes),
        w.partitions,
        tuple(pending),
        w.running,
        w.related,
        reservations=reservations,
    )


def digest(result: PassResult) -> str:
    plan = result.plan
    statuses = {
        job_id: (
            st.code.value,
            st.reason.value,
            st.message,
            st.plugin,
            st.terminal_state,
            st.earliest_start,
        )
        for job_id, st in sorted(result.statuses.items())
    }
    rejections = sorted((p, reason.value, n) for (p, reason), n in result.rejections.items())
    text = repr(
        (
            [(p.job_id, p.allocation) for p in plan.placements],
            [(u.job_id, u.reason.value, u.expected_start) for u in plan.updates],
            plan.terminations,
            plan.preemptions,
            statuses,
            rejections,
            sorted(result.reservations.items()),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def case_digests() -> dict[str, str]:
    found: dict[str, str] = {}
    for seed in (1, 2):
        workload = build_workload(1500, 120, seed)
        for mutate in (False, True):
            bench, sched = with_limits(workload)
            snap = mutated(bench, seed) if mutate else bench.snapshot()
            for explain in (True, False):
                key = f"seed={seed} mutated={mutate} {BENCH_LIMITS} explain={explain}"
                found[key] = digest(sched.run_pass(snap, explain=explain))
                key = f"seed={seed} mutated={mutate} {BENCH_COHORT} explain={explain}"
                cohort = bench_cohort(len(workload.nodes))
                found[key] = digest(cohort.run_pass(snap, explain=explain))
            snap = mutated(workload, seed) if mutate else workload.snapshot()
            for kind in KINDS:
                sched = scheduler(kind)
                for explain in (True, False):
                    key = f"seed={seed} mutated={mutate} {kind} explain={explain}"
                    found[key] = digest(sched.run_pass(snap, explain=explain))
    return found


PINNED = {
    "seed=1 mutated=False default explain=True": "5903e66e06fdb72d",
    "seed=1 mutated=False default explain=False": "ed9f3a2b94084af5",
    "seed=1 mutated=False conservative explain=True": "f615849e96b843c5",
    "seed=1 mutated=False conservative explain=False": "e07082dc205713d6",
    "seed=1 mutated=False limits explain=True": "6a7ce27de21807c2",
    "seed=1 mutated=False limits explain=False": "0549874f03796f59",
    "seed=1 mutated=False preempt explain=True": "5903e66e06fdb72d",
    "seed=1 mutated=False preempt explain=False": "ed9f3a2b94084af5",
    "seed=1 mutated=True default explain=True": "d08e6923b7c3e4df",
    "seed=1 mutated=True default explain=False": "c969722e20969aea",
    "seed=1 mutated=True conservative explain=True": "02d43afdb3edeb22",
    "seed=1 mutated=True conservative explain=False": "307453c47d5d569b",
    "seed=1 mutated=True limits explain=True": "de895939aa043f86",
    "seed=1 mutated=True limits explain=False": "fbf346a1ee3cac72",
    "seed=1 mutated=True preempt explain=True": "f17703f556ad25db",
    "seed=1 mutated=True preempt explain=False": "3d27937bff528de1",
    "seed=2 mutated=False default explain=True": "60b4b125655397c0",
    "seed=2 mutated=False default explain=False": "f60a678485e2a8cd",
    "seed=2 mutated=False conservative explain=True": "ca3d8aaf39dc087b",
    "seed=2 mutated=False conservative explain=False": "47ebec46fd264ba7",
    "seed=2 mutated=False limits explain=True": "c9185205ca22b188",
    "seed=2 mutated=False limits explain=False": "35f9c3b99f04e02b",
    "seed=2 mutated=False preempt explain=True": "60b4b125655397c0",
    "seed=2 mutated=False preempt explain=False": "f60a678485e2a8cd",
    "seed=2 mutated=True default explain=True": "02e2412f2f17daed",
    "seed=2 mutated=True default explain=False": "dba2ddc7be3aa259",
    "seed=2 mutated=True conservative explain=True": "f0d0d532c2ae7820",
    "seed=2 mutated=True conservative explain=False": "7feb0f53ee81bbf0",
    "seed=2 mutated=True limits explain=True": "f20c9116f1464907",
    "seed=2 mutated=True limits explain=False": "2df9f8f7efd030c6",
    "seed=2 mutated=True preempt explain=True": "c51ac6f21b48ee07",
    "seed=2 mutated=True preempt explain=False": "f5aae6563502cdf5",
    "seed=1 mutated=False bench-limits explain=True": "e2d79f4bb914a17f",
    "seed=1 mutated=False bench-cohort explain=True": "678dcf4bd94a399e",
    "seed=1 mutated=False bench-limits explain=False": "3452c5e4802b0704",
    "seed=1 mutated=False bench-cohort explain=False": "0ddb591534076cfd",
    "seed=1 mutated=True bench-limits explain=True": "43ce1d9c05263fd5",
    "seed=1 mutated=True bench-cohort explain=True": "3017f974f079751a",
    "seed=1 mutated=True bench-limits explain=False": "d904e2129d1ee0d7",
    "seed=1 mutated=True bench-cohort explain=False": "59e7bd1b95f63729",
    "seed=2 mutated=False bench-limits explain=True": "8bf93a2cb024b60e",
    "seed=2 mutated=False bench-cohort explain=True": "1bf804a64b8f2e48",
    "seed=2 mutated=False bench-limits explain=False": "27e780ce9c4aeade",
    "seed=2 mutated=False bench-cohort explain=False": "58091630c2e1840b",
    "seed=2 mutated=True bench-limits explain=True": "accb7f8e09f43ce1",
    "seed=2 mutated=True bench-cohort explain=True": "d71b4c6f0cc0c611",
    "seed=2 mutated=True bench-limits explain=False": "109be351796183a3",
    "seed=2 mutated=True bench-cohort explain=False": "aec84c659170f982",
}


@pytest.mark.parametrize("case", sorted(PINNED))
def test_the_pass_decides_as_pinned(case: str, digests: dict[str, str]) -> None:
    assert digests[case] == PINNED[case]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mutate", [False, True])
def test_a_pass_without_updates_decides_the_same(kind: str, mutate: bool) -> None:
    """``updates=False`` (the simulator's) leaves out the pending jobs' reasons and
    expected starts, and nothing else."""
    workload = build_workload(1500, 120, 1)
    snap = mutated(workload, 1) if mutate else workload.snapshot()
    full = scheduler(kind).run_pass(snap, explain=False)
    bare = scheduler(kind).run_pass(snap, explain=False, updates=False)
    assert full.plan.updates and not bare.plan.updates
    assert bare.plan.placements == full.plan.placements
    assert bare.plan.terminations == full.plan.terminations
    assert bare.plan.preemptions == full.plan.preemptions
    assert bare.statuses == full.statuses
    assert bare.reservations == full.reservations
    assert sum(bare.rejections.values()) == len(full.plan.terminations)


@pytest.fixture(scope="module")
def digests() -> dict[str, str]:
    return case_digests()


if __name__ == "__main__":
    for key, value in case_digests().items():
        print(f"    {key!r}: {value!r},")
