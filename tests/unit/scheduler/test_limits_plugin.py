"""The ``limits`` plugin: QoS and (hierarchical) account limits, Slurm's reason names,
counting within a pass, and limit-held jobs not holding back the queue."""

from __future__ import annotations

import pytest

from hal.config.priority import priority_from_dict
from hal.core.errors import InvalidRequest
from hal.core.priority import Account, PriorityPolicy, Qos, TresLimits, UserAccount
from hal.core.states import PendingReason as R
from hal.scheduler.framework import Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import JobBuilder, cluster, make_job, placed_nodes, reasons

NOW = 1_000_000.0
GiB = 1 << 30


def _sched(policy: PriorityPolicy) -> Scheduler:
    return build_scheduler(
        default_profile(limits=policy.has_limits), default_registry(policy=policy)
    )


def J(job_id: int) -> JobBuilder:
    return make_job(job_id).asked_limit(600)  # as with -t 10


def _run(
    policy: PriorityPolicy, *pending: JobBuilder, running: tuple[JobBuilder, ...] = ()
) -> tuple[set[int], dict[int, R]]:
    snap = cluster(NOW).uniform_nodes(4, cpus=8, mem_gib=32, gpus=4).pending(*pending)
    snap = snap.running(*running)
    plan = _sched(policy).schedule(snap.build())
    return set(placed_nodes(plan)), reasons(plan)


QOS_CASES: list[tuple[str, Qos, JobBuilder, R]] = [
    ("MaxWall", Qos("q", max_wall_s=300), J(1).qos("q"), R.QOS_MAX_WALL_PER_JOB),
    (
        "MaxWall, unlimited job",
        Qos("q", max_wall_s=300),
        J(1).qos("q").asked_limit(0),
        R.QOS_MAX_WALL_PER_JOB,
    ),
    (
        "MaxTRESPerJob cpus",
        Qos("q", max_tres_per_job=TresLimits(cpus=4)),
        J(1).qos("q").cpus(5),
        R.QOS_MAX_CPU_PER_JOB,
    ),
    (
        "MaxTRESPerJob gpus",
        Qos("q", max_tres_per_job=TresLimits(gpus=1)),
        J(1).qos("q").gpus(2),
        R.QOS_MAX_GRES_PER_JOB,
    ),
    (
        "MaxTRESPerJob mem",
        Qos("q", max_tres_per_job=TresLimits(mem_bytes=GiB)),
        J(1).qos("q").mem_gib(2),
        R.QOS_MAX_MEM_PER_JOB,
    ),
    (
        "MaxTRESPerJob nodes",
        Qos("q", max_tres_per_job=TresLimits(nodes=1)),
        J(1).qos("q").nodes(2),
        R.QOS_MAX_NODE_PER_JOB,
    ),
    ("GrpTRES cpus", Qos("q", grp_tres=TresLimits(cpus=4)), J(1).qos("q").cpus(5), R.QOS_GRP_CPU),
    ("GrpTRES gpus", Qos("q", grp_tres=TresLimits(gpus=3)), J(1).qos("q").gpus(4), R.QOS_GRP_GRES),
    (
        "GrpTRES mem",
        Qos("q", grp_tres=TresLimits(mem_bytes=GiB)),
        J(1).qos("q").mem_gib(2),
        R.QOS_GRP_MEM,
    ),
    (
        "GrpTRES nodes",
        Qos("q", grp_tres=TresLimits(nodes=1)),
        J(1).qos("q").nodes(2),
        R.QOS_GRP_NODE,
    ),
]


@pytest.mark.parametrize(("case", "qos", "job", "reason"), QOS_CASES, ids=[c[0] for c in QOS_CASES])
def test_a_job_over_a_qos_limit_pends_with_slurms_reason(
    case: str, qos: Qos, job: JobBuilder, reason: R
) -> None:
    placed, why = _run(PriorityPolicy(qos=(qos,)), job)
    assert placed == set()
    assert why == {1: reason}


def test_a_job_of_another_qos_is_not_limited() -> None:
    policy = PriorityPolicy(qos=(Qos("q", max_tres_per_job=TresLimits(cpus=1)),))
    placed, _ = _run(policy, J(1).cpus(4), J(2).qos("other").cpus(4))
    assert placed == {1, 2}


def test_max_jobs_per_user_counts_running_and_placed_this_pass() -> None:
    policy = PriorityPolicy(qos=(Qos("q", max_jobs_per_user=2),))
    running = (J(10).qos("q").running_on("n0001"),)
    placed, why = _run(
        policy, J(1).qos("q"), J(2).qos("q"), J(3).qos("q").user("bob"), running=running
    )
    assert placed == {1, 3}  # alice: 1 running + job 1; bob has his own count
    assert why[2] is R.QOS_MAX_JOBS_PER_USER


def test_qos_grp_jobs_counts_every_user() -> None:
    policy = PriorityPolicy(qos=(Qos("q", grp_jobs=2),))
    placed, why = _run(policy, J(1).qos("q"), J(2).qos("q").user("bob"), J(3).qos("q").user("eve"))
    assert placed == {1, 2}
    assert why[3] is R.QOS_GRP_JOBS


def test_qos_grp_cpus_over_running_and_placed_jobs() -> None:
    policy = PriorityPolicy(qos=(Qos("q", grp_tres=TresLimits(cpus=10)),))
    running = (J(10).qos("q").cpus(4).running_on("n0001"),)
    placed, why = _run(
        policy, J(1).qos("q").cpus(4), J(2).qos("q").cpus(4), J(3).qos("q").cpus(2), running=running
    )
    assert placed == {1, 3}  # 4 + 4 + 2 = 10; job 2 would make 12
    assert why[2] is R.QOS_GRP_CPU


def _tree(**limits: object) -> PriorityPolicy:
    """root → physics → lattice; alice's default account is lattice."""
    return PriorityPolicy(
        accounts=(Account("physics", **limits), Account("lattice", "physics")),  # type: ignore[arg-type]
        users=(
            UserAccount("alice", "lattice", default=True),
            UserAccount("bob", "lattice", default=True),
            UserAccount("bob", "physics"),
        ),
    )


def test_an_ancestor_accounts_grp_gres_holds_a_child_accounts_job() -> None:
    placed, why = _run(_tree(grp_tres=TresLimits(gpus=4)), J(1).gpus(3), J(2).gpus(2).user("bob"))
    assert placed == {1}
    assert why == {2: R.ASSOC_GRP_GRES}


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        ({"grp_tres": TresLimits(cpus=3)}, R.ASSOC_GRP_CPU),
        ({"grp_tres": TresLimits(mem_bytes=3 * GiB)}, R.ASSOC_GRP_MEM),
        ({"grp_tres": TresLimits(nodes=1)}, R.ASSOC_GRP_NODE),
        ({"grp_jobs": 1}, R.ASSOC_GRP_JOBS),
    ],
)
def test_account_group_limits(limits: dict[str, object], reason: R) -> None:
    placed, why = _run(
        _tree(**limits), J(1).cpus(2).mem_gib(2), J(2).cpus(2).mem_gib(2).user("bob")
    )
    assert placed == {1}
    assert why == {2: reason}


def test_account_max_jobs_is_per_user() -> None:
    placed, why = _run(_tree(max_jobs=1), J(1), J(2), J(3).user("bob"))
    assert placed == {1, 3}
    assert why == {2: R.ASSOC_MAX_JOBS}


ACCOUNT_PER_JOB_CASES: list[tuple[str, dict[str, object], JobBuilder, R]] = [
    ("MaxWall", {"max_wall_s": 300}, J(1), R.ASSOC_MAX_WALL_PER_JOB),
    ("MaxWall, unlimited job", {"max_wall_s": 300}, J(1).asked_limit(0), R.ASSOC_MAX_WALL_PER_JOB),
    (
        "MaxTRES cpus",
        {"max_tres_per_job": TresLimits(cpus=4)},
        J(1).cpus(5),
        R.ASSOC_MAX_CPU_PER_JOB,
    ),
    (
        "MaxTRES gpus",
        {"max_tres_per_job": TresLimits(gpus=1)},
        J(1).gpus(2),
        R.ASSOC_MAX_GRES_PER_JOB,
    ),
    (
        "MaxTRES mem",
        {"max_tres_per_job": TresLimits(mem_bytes=GiB)},
        J(1).mem_gib(2),
        R.ASSOC_MAX_MEM_PER_JOB,
    ),
    (
        "MaxTRES nodes",
        {"max_tres_per_job": TresLimits(nodes=1)},
        J(1).nodes(2),
        R.ASSOC_MAX_NODE_PER_JOB,
    ),
]


@pytest.mark.parametrize(
    ("case", "limits", "job", "reason"),
    ACCOUNT_PER_JOB_CASES,
    ids=[c[0] for c in ACCOUNT_PER_JOB_CASES],
)
def test_an_ancestor_accounts_per_job_limit_holds_a_job_with_slurms_reason(
    case: str, limits: dict[str, object], job: JobBuilder, reason: R
) -> None:
    """The limit is on physics; alice's job is charged to lattice below it. A job of
    bob's that keeps the limit (time 60 s, 1 CPU, no GPU, 1 GiB, 1 node) starts."""
    ok = make_job(2).user("bob").limit(60).cpus(1).mem_gib(1)
    placed, why = _run(_tree(**limits), job, ok)
    assert placed == {2}
    assert why == {1: reason}


def test_an_account_per_job_limit_holds_nothing_at_the_cap_nor_in_other_accounts() -> None:
    policy = PriorityPolicy(
        accounts=(
            Account(
                "small", max_tres_per_job=TresLimits(cpus=4, mem_bytes=2 * GiB), max_wall_s=600
            ),
            Account("big"),
        ),
        users=(UserAccount("alice", "small", default=True), UserAccount("alice", "big")),
    )
    placed, why = _run(
        policy,
        J(1).cpus(4).mem_gib(2),  # exactly at every cap (time limit 600 s too)
        J(2).cpus(6).account("big"),
        J(3).cpus(6),
    )
    assert placed == {1, 2}
    assert why == {3: R.ASSOC_MAX_CPU_PER_JOB}


def test_the_qos_per_job_limit_is_the_reason_before_the_accounts() -> None:
    policy = PriorityPolicy(
        accounts=(Account("a", max_tres_per_job=TresLimits(cpus=2)),),
        users=(UserAccount("alice", "a", default=True),),
        qos=(Qos("q", max_tres_per_job=TresLimits(cpus=2)),),
    )
    placed, why = _run(policy, J(1).qos("q").cpus(3), J(2).cpus(3))
    assert placed == set()
    assert why == {1: R.QOS_MAX_CPU_PER_JOB, 2: R.ASSOC_MAX_CPU_PER_JOB}


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (
            PriorityPolicy(qos=(Qos("q", max_tres_per_job=TresLimits(mem_bytes=16 * GiB)),)),
            R.QOS_MAX_MEM_PER_JOB,
        ),
        (_tree(max_tres_per_job=TresLimits(mem_bytes=16 * GiB)), R.ASSOC_MAX_MEM_PER_JOB),
        (_tree(max_tres_per_job=TresLimits(mem_bytes=32 * GiB)), None),
    ],
)
def test_a_whole_node_memory_job_is_held_by_the_memory_it_would_get(
    policy: PriorityPolicy, reason: R | None
) -> None:
    """``--mem=0`` asks for no number PreFilter can check: the 32 GiB a node gives it
    are checked against the per-job memory caps at Reserve."""
    placed, why = _run(policy, J(1).qos("q").whole_node_memory())
    assert (placed, why) == ((set(), {1: reason}) if reason else ({1}, {}))


def test_the_account_asked_for_is_charged() -> None:
    policy = PriorityPolicy(
        accounts=(Account("a", grp_jobs=0), Account("b")),
        users=(UserAccount("alice", "a", default=True), UserAccount("alice", "b")),
    )
    placed, why = _run(policy, J(1), J(2).account("b"))
    assert placed == {2}
    assert why == {1: R.ASSOC_GRP_JOBS}


def test_a_limit_held_job_does_not_hold_back_the_jobs_behind() -> None:
    """Job 1 (highest priority) is held by its QoS; job 2 fits and starts, and gets no
    reason Priority behind it (Slurm skips a limit-held job)."""
    policy = PriorityPolicy(qos=(Qos("q", max_jobs_per_user=0),))
    placed, why = _run(policy, J(1).qos("q").priority(100), J(2).priority(1))
    assert placed == {2}
    assert why == {1: R.QOS_MAX_JOBS_PER_USER}


def test_reserve_counts_the_real_allocation() -> None:
    """An --exclusive job asks for 1 CPU but gets a whole node (8): the second such job
    would take the QoS over 12 CPUs and waits, although its request (1 CPU) fits."""
    policy = PriorityPolicy(qos=(Qos("q", grp_tres=TresLimits(cpus=12)),))
    placed, why = _run(policy, J(1).qos("q").exclusive(), J(2).qos("q").exclusive())
    assert len(placed) == 1
    assert why == {2: R.QOS_GRP_CPU}


@pytest.mark.parametrize(
    ("policy", "nodes"),
    [
        (PriorityPolicy(qos=(Qos("q", max_tres_per_job=TresLimits(nodes=2)),)), 2),
        (PriorityPolicy(qos=(Qos("q", max_tres_per_job=TresLimits(cpus=12)),)), 3),
        (PriorityPolicy(qos=(Qos("q", grp_tres=TresLimits(nodes=3)),)), 3),
        (_tree(max_tres_per_job=TresLimits(nodes=1)), 1),
        (_tree(grp_tres=TresLimits(cpus=8)), 2),
    ],
    ids=["qos MaxTRESPerJob nodes", "qos MaxTRESPerJob cpus", "qos GrpTRES nodes",
         "account MaxTRES nodes", "account GrpTRES cpus"],
)  # fmt: skip
def test_a_node_range_gets_as_many_nodes_as_its_limits_allow(
    policy: PriorityPolicy, nodes: int
) -> None:
    """``-N 1-4 --ntasks-per-node=4`` on 4 idle nodes: as Slurm, the range is capped by
    the limits (the CPUs grow with the nodes). The job used to get all 4 nodes, over a
    per-job limit, or be refused at Reserve by a group limit in every pass."""
    job = J(1).qos("q").nodes(1, 4).tasks(4, per_node=4)
    snap = cluster(NOW).uniform_nodes(4, cpus=8, mem_gib=32).pending(job).build()
    plan = _sched(policy).schedule(snap)
    assert {j: len(n) for j, n in placed_nodes(plan).items()} == {1: nodes}
    assert reasons(plan) == {}


def test_no_limits_leaves_the_plugin_out_of_the_default_profile() -> None:
    assert "limits" not in default_profile()["plugins"]  # type: ignore[operator]
    plugins = default_profile(limits=True)["plugins"]
    assert isinstance(plugins, list)
    assert plugins.index("limits") == plugins.index("noderesources") - 1


def test_config_reads_the_limits() -> None:
    policy = priority_from_dict(
        {
            "accounts": [
                {"name": "p", "max_jobs": 2, "grp_jobs": 5, "grp_tres": {"gpus": 8, "mem": "1G"}}
            ],
            "qos": [
                {
                    "name": "q",
                    "max_jobs_per_user": 1,
                    "max_submit_jobs_per_user": 3,
                    "max_wall": "1:00:00",
                    "max_tres_per_job": {"cpus": 4, "nodes": 2},
                    "grp_tres": {"cpus": 64},
                    "grp_jobs": 9,
                }
            ],
        }
    )
    assert policy.accounts[0] == Account(
        "p", max_jobs=2, grp_jobs=5, grp_tres=TresLimits(gpus=8, mem_bytes=GiB)
    )
    q = policy.qos[0]
    assert (q.max_jobs_per_user, q.max_submit_jobs_per_user, q.max_wall_s, q.grp_jobs) == (
        1,
        3,
        3600,
        9,
    )
    assert q.max_tres_per_job == TresLimits(cpus=4, nodes=2)
    assert q.grp_tres == TresLimits(cpus=64)
    assert policy.has_limits


@pytest.mark.parametrize(
    "bad",
    [
        {"qos": [{"name": "q", "max_jobs_per_user": -1}]},
        {"qos": [{"name": "q", "max_tres_per_job": {"disk": 1}}]},
        {"qos": [{"name": "q", "max_tres_per_job": {"mem": "lots"}}]},
        {"accounts": [{"name": "a", "grp_tres": {"disk": 1}}]},
        {"accounts": [{"name": "a", "grp_tres": {"mem": "lots"}}]},
    ],
)
def test_config_refuses_bad_limits(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        priority_from_dict(bad)


@pytest.mark.parametrize("limit", [1200, 0], ids=["limit from another QoS", "unlimited"])
def test_max_wall_leaves_a_limit_the_job_did_not_ask_for(limit: int) -> None:
    """Slurm 22.05.8 (docs/slurm-checks.md): a job whose limit came from its first QoS's
    MaxWall (20 min) or from nowhere (UNLIMITED), moved to a QoS or account with a
    10 min MaxWall by ``scontrol update``, keeps its limit and runs; one whose ``-t 20``
    the user gave pends with QOSMaxWallDurationPerJobLimit."""
    qos = PriorityPolicy(qos=(Qos("q", max_wall_s=600),))
    placed, why = _run(qos, make_job(1).qos("q").limit(limit), J(2).qos("q").asked_limit(1200))
    assert (placed, why) == ({1}, {2: R.QOS_MAX_WALL_PER_JOB})
    account = _tree(max_wall_s=600)
    placed, why = _run(account, make_job(1).limit(limit), J(2).asked_limit(1200))
    assert (placed, why) == ({1}, {2: R.ASSOC_MAX_WALL_PER_JOB})
