"""noderesources: per-node fit, exclusive, --mem=0, features, node lists, multi-node
all-or-nothing, GPU id choice, best-fit scoring and the BadConstraints safety net."""

from __future__ import annotations

import pytest

from hal.core.resources import GiB, ResourceVector
from hal.core.states import PendingReason as R
from hal.scheduler.framework import Scheduler
from hal.testing import JobBuilder, allocations, cluster, make_job, make_node, placed_nodes, reasons

N = make_node
J = make_job

# (situation, nodes, running jobs, pending job, expected nodes or expected reason)
CASES: list[tuple[str, list[object], list[JobBuilder], JobBuilder, tuple[str, ...] | R]] = [
    ("1 cpu fits on an idle node", [N("a")], [], J(1), ("a",)),
    (
        "cpus larger than free cpus wait",
        [N("a").cpus(4)],
        [J(9).cpus(3).running_on("a")],
        J(1).cpus(2),
        R.RESOURCES,
    ),
    (
        "memory is per node and must be free",
        [N("a").mem_gib(8)],
        [J(9).mem_gib(6).running_on("a")],
        J(1).mem_gib(4),
        R.RESOURCES,
    ),
    (
        "gpus must be free",
        [N("a").gpus(2)],
        [J(9).gpus(2).running_on("a")],
        J(1).gpus(1),
        R.RESOURCES,
    ),
    ("a DOWN node takes nothing", [N("a").down(), N("b")], [], J(1), ("b",)),
    ("a DRAIN node takes nothing", [N("a").drain()], [], J(1), R.RESOURCES),
    (
        "constraint needs every feature",
        [N("a").features("ib"), N("b").features("ib", "a100")],
        [],
        J(1).constraint("ib", "a100"),
        ("b",),
    ),
    (
        "unknown feature can never fit",
        [N("a").features("ib")],
        [],
        J(1).constraint("nope"),
        R.BAD_CONSTRAINTS,
    ),
    ("more memory than any node has", [N("a").mem_gib(8)], [], J(1).mem_gib(9), R.BAD_CONSTRAINTS),
    ("more nodes than the partition has", [N("a"), N("b")], [], J(1).nodes(3), R.BAD_CONSTRAINTS),
    (
        "gpu type must match",
        [N("a").gpus(1, "v100"), N("b").gpus(1, "a100")],
        [],
        J(1).gpus(1, "a100"),
        ("b",),
    ),
    (
        "a gpu type matches a word of the model NVML reports",
        [N("a").gpus(1, "NVIDIA A100-SXM4-80GB"), N("b").gpus(1, "NVIDIA H100 80GB HBM3")],
        [],
        J(1).gpus(1, "h100"),
        ("b",),
    ),
    (
        "a gpu type is never part of a word",
        [N("a").gpus(1, "NVIDIA H100 80GB HBM3")],
        [],
        J(1).gpus(1, "100"),
        R.BAD_CONSTRAINTS,
    ),
    ("exclude is honoured", [N("a"), N("b")], [], J(1).exclude("a"), ("b",)),
    (
        "nodelist nodes are all in the allocation",
        [N("a"), N("b"), N("c")],
        [],
        J(1).nodes(2).nodelist("c"),
        ("a", "c"),
    ),
    ("a DOWN nodelist node", [N("a").down(), N("b")], [], J(1).nodelist("a"), R.REQ_NODE_NOT_AVAIL),
    (
        "a DRAIN nodelist node",
        [N("a").drain(), N("b")],
        [],
        J(1).nodelist("a"),
        R.REQ_NODE_NOT_AVAIL,
    ),
    (
        "a busy nodelist node",
        [N("a").cpus(1), N("b")],
        [J(9).running_on("a")],
        J(1).nodelist("a"),
        R.RESOURCES,
    ),
    ("an unknown nodelist node", [N("a")], [], J(1).nodelist("zz"), R.BAD_CONSTRAINTS),
    (
        "nodelist and exclude clash",
        [N("a"), N("b")],
        [],
        J(1).nodelist("a").exclude("a"),
        R.BAD_CONSTRAINTS,
    ),
    (
        "exclusive needs a wholly idle node",
        [N("a"), N("b")],
        [J(9).running_on("a")],
        J(1).exclusive(),
        ("b",),
    ),
    (
        "exclusive waits when no node is idle",
        [N("a")],
        [J(9).running_on("a")],
        J(1).exclusive(),
        R.RESOURCES,
    ),
    (
        "nobody joins an exclusive job's node",
        [N("a")],
        [J(9).exclusive().running_on("a", per_node=ResourceVector(1, 0, 0))],
        J(1),
        R.RESOURCES,
    ),
    (
        "--mem=0 needs all memory free",
        [N("a"), N("b")],
        [J(9).mem_gib(1).running_on("a")],
        J(1).whole_node_memory(),
        ("b",),
    ),
    (
        "--mem=0 waits while memory is in use",
        [N("a")],
        [J(9).mem_gib(1).running_on("a")],
        J(1).whole_node_memory(),
        R.RESOURCES,
    ),
    (
        "multi-node is all or nothing",
        [N("a").cpus(2), N("b").cpus(2)],
        [J(9).cpus(2).running_on("b")],
        J(1).cpus(2).nodes(2),
        R.RESOURCES,
    ),
    (
        "multi-node spans distinct nodes",
        [N("a"), N("b"), N("c")],
        [],
        J(1).nodes(3),
        ("a", "b", "c"),
    ),
    (
        "a node range takes as many as fit",
        [N("a"), N("b"), N("c").down()],
        [],
        J(1).nodes(1, 3),
        ("a", "b"),
    ),
    (
        "tasks spread over nodes lower the per-node need",
        [N("a").cpus(4), N("b").cpus(4)],
        [],
        J(1).tasks(8).nodes(1, 2),
        ("a", "b"),
    ),
    (
        "best fit prefers the fuller node",
        [N("a"), N("b")],
        [J(9).cpus(4).running_on("b")],
        J(1),
        ("b",),
    ),
    ("cpu jobs keep off gpu nodes", [N("g").gpus(4), N("c")], [], J(1), ("c",)),
    (
        "only the partition's nodes are used",
        [N("a").partitions("other"), N("b")],
        [],
        J(1).partition("p"),
        ("b",),
    ),
]


@pytest.mark.parametrize(
    ("situation", "nodes", "running", "job", "expected"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_fit(
    sched: Scheduler,
    situation: str,
    nodes: list[object],
    running: list[JobBuilder],
    job: JobBuilder,
    expected: tuple[str, ...] | R,
) -> None:
    """One pending job against a small cluster: where it lands, or why it waits."""
    snap = cluster().nodes(*nodes).running(*running)  # type: ignore[arg-type]
    built = job.build()
    if built.partition == "p":
        snap = snap.partition("p", "b").partition("other", "a")
    plan = sched.schedule(snap.pending(built).build())
    if isinstance(expected, R):
        assert placed_nodes(plan) == {}
        assert reasons(plan) == {1: expected}
    else:
        assert placed_nodes(plan) == {1: expected}


def test_gpu_ids_avoid_those_held_by_running_jobs(sched: Scheduler) -> None:
    """A 4-GPU node with GPUs 0 and 2 busy gives the next 2-GPU job GPUs 1 and 3."""
    snap = (
        cluster()
        .nodes(N("g").gpus(4))
        .running(J(9).gpus(2).running_on("g", gpu_ids=((0, 2),)))
        .pending(J(1).gpus(2))
        .build()
    )
    alloc = allocations(sched.schedule(snap))[1]
    assert alloc.gpu_ids == ((1, 3),)
    assert alloc.per_node == (ResourceVector(1, 0, 2),)


def test_gpu_ids_accumulate_within_a_pass(sched: Scheduler) -> None:
    """Two 1-GPU jobs placed in one pass on one node get different GPUs."""
    snap = cluster().nodes(N("g").gpus(2)).pending(J(1).gpus(1), J(2).gpus(1)).build()
    allocs = allocations(sched.schedule(snap))
    assert {allocs[1].gpu_ids, allocs[2].gpu_ids} == {((0,),), ((1,),)}


def test_exclusive_job_holds_the_whole_node(sched: Scheduler) -> None:
    """An exclusive 1-CPU job is recorded as holding all 8 CPUs, 32 GiB and both GPUs,
    so the next job in the same pass cannot join it."""
    snap = cluster().nodes(N("a").gpus(2)).pending(J(1).exclusive(), J(2)).build()
    plan = sched.schedule(snap)
    assert allocations(plan)[1].per_node == (ResourceVector(8, 32 * GiB, 2),)
    assert allocations(plan)[1].gpu_ids == ((0, 1),)
    assert reasons(plan) == {2: R.RESOURCES}


def test_mem_zero_takes_the_node_memory(sched: Scheduler) -> None:
    """--mem=0 on a 64 GiB node records 64 GiB for the job."""
    snap = cluster().nodes(N("a").mem_gib(64)).pending(J(1).whole_node_memory()).build()
    assert allocations(sched.schedule(snap))[1].per_node[0].memory_bytes == 64 * GiB


def test_allocations_accumulate_within_a_pass(sched: Scheduler) -> None:
    """Three 3-CPU jobs on one 8-CPU node: two start, the third waits for Resources."""
    snap = cluster().nodes(N("a")).pending(J(1).cpus(3), J(2).cpus(3), J(3).cpus(3)).build()
    plan = sched.schedule(snap)
    assert set(placed_nodes(plan)) == {1, 2}
    assert reasons(plan) == {3: R.RESOURCES}


def test_spread_strategy_prefers_the_emptier_node() -> None:
    """score=spread puts the job on the idle node rather than the busy one."""
    from hal.scheduler.plugins import build_scheduler, default_profile

    config = default_profile()
    config["plugin_args"] = {"noderesources": {"score": "spread"}}
    snap = cluster().nodes(N("a"), N("b")).running(J(9).cpus(4).running_on("a")).pending(J(1))
    assert placed_nodes(build_scheduler(config).schedule(snap.build())) == {1: ("b",)}
