"""``hal explain`` names the topology when a job waits for a placement it allows: a
``--switches`` wait, a ``required`` level with no domain free enough now, and a
``required=nvlink`` job with no free NVLink island."""

from __future__ import annotations

from hal.core.job import Job
from hal.core.states import PendingReason
from hal.core.topology import Topology
from hal.scheduler.framework import ClusterSnapshot, Framework, PassContext, Scheduler
from hal.scheduler.framework.explain import diagnose
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.server.explain import _detail
from hal.testing import cluster, make_job, make_node

SCHED: Scheduler = build_scheduler(default_profile(topology=Topology(level_names=("leaf", "rack"))))


def _two_leaves() -> list[object]:
    """Two leaves of two nodes under one rack switch."""
    return [make_node(f"n{i}").topology("rack0", f"leaf{i // 2}") for i in range(4)]


def _explain(snap: ClusterSnapshot, job: Job) -> str:
    diag = diagnose(Framework(SCHED.profile), PassContext.from_snapshot(snap), job)
    return _detail(job, diag, [], [])


def test_a_switches_wait_is_shown_as_waiting_for_a_better_placement() -> None:
    job = make_job(1).nodes(3).switches(1, 600).build().evolve(reason=PendingReason.TOPOLOGY)
    snap = cluster().at(100.0).nodes(*_two_leaves()).pending(job).build()  # type: ignore[arg-type]
    detail = _explain(snap, job)
    assert detail.startswith("waiting for a better placement: --switches=1: ")
    assert "spans 2 leaf switches" in detail and "4/4 nodes available" in detail


def test_a_required_level_with_no_free_domain_says_so() -> None:
    busy = make_job(9).exclusive().running_on("n0")
    job = (
        make_job(1)
        .nodes(2)
        .topology("leaf", required=True)
        .build()
        .evolve(reason=PendingReason.RESOURCES)
    )
    snap = (
        cluster()
        .nodes(*_two_leaves())  # type: ignore[arg-type]
        .running(busy, make_job(8).exclusive().running_on("n2"))
        .pending(job)
        .build()
    )
    assert _explain(snap, job) == (
        "no placement the topology allows now: --topology required=leaf: no leaf domain "
        "has 2 free nodes (2/4 nodes available: 2 allocated exclusively)"
    )


def test_required_nvlink_names_the_missing_island() -> None:
    node = make_node("g").gpus(8).islands((0, 1, 2, 3), (4, 5, 6, 7))
    running = make_job(9).gpus(4).running_on("g", gpu_ids=((0, 1, 4, 5),))
    job = (
        make_job(1)
        .gpus(3)
        .topology("nvlink", required=True)
        .build()
        .evolve(reason=PendingReason.RESOURCES)
    )
    snap = cluster().nodes(node).running(running).pending(job).build()
    assert _explain(snap, job) == (
        "not enough free resources: 0/1 nodes available: 1 no NVLink island with 3 free "
        "GPUs (--topology required=nvlink)"
    )


def test_a_multi_node_nvlink_job_names_the_missing_domain() -> None:
    """Two domains of two nodes, one node of each busy: 2 nodes are free, never in one
    domain, so the 2-node required=nvlink job waits and explain says why."""
    nodes = [make_node(f"g{i}").gpus(4).nvlink_domain(f"nvl{i // 2}") for i in range(4)]
    job = (
        make_job(1)
        .nodes(2)
        .gpus(4)
        .topology("nvlink", required=True)
        .build()
        .evolve(reason=PendingReason.RESOURCES)
    )
    snap = (
        cluster()
        .nodes(*nodes)
        .running(make_job(8).exclusive().running_on("g0"), make_job(9).exclusive().running_on("g2"))
        .pending(job)
        .build()
    )
    assert _explain(snap, job) == (
        "no placement the topology allows now: --topology required=nvlink: no NVLink domain "
        "has 2 free nodes (2/4 nodes available: 2 allocated exclusively)"
    )
