"""``hal bench topology``: placing one multi-node job on a 10,000-node, 3-level switch
tree, with the default profile plus the topology plugin, beside the same placement
without the plugin (measured in the same run).

The cluster is a synthetic tree (leaves of 16 nodes, 3 levels) with a seeded ~half of
the nodes busy, so most jobs cannot fit in one leaf. One placement is one
``Framework.place(TEST_ONLY)`` on a fresh pass context (the NodeTable is built once and
copied, as a pass would have it; per-pass caches start empty): PreFilter, Filter,
Score and the Placement stage. The tree index is built once per tree, as on the server
(its cost is reported apart, as ``index_build_ms``).

Target (issue 7): median ≤ 10 ms per placement.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Mapping
from typing import Any

from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.topology import Topology
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.runtime import Mode
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.topology import TreeIndex
from hal.sim.cluster import PARTITION, ClusterModel

TARGET_MS = 10.0
JOB_SIZES = (8, 64, 512)


def _median_ms(
    scheduler: Scheduler,
    snap: ClusterSnapshot,
    table: NodeTable,
    job: Job,
    repeats: int,
    *,
    new_node_tuple: bool = False,
) -> tuple[float, tuple[str, ...]]:
    times: list[float] = []
    nodes: tuple[str, ...] = ()
    partitions = {p.name: p for p in snap.partitions}
    for _ in range(repeats):
        fresh = table.copy()
        if new_node_tuple:
            # The server builds a new node tuple every pass: the plugin then compares the
            # nodes' paths with the cached tree's once per pass.
            fresh.nodes = tuple(list(table.nodes))
        ctx = PassContext(snap, fresh, snap.now, snap.running, partitions)
        t0 = time.perf_counter()
        out = scheduler.framework.place(ctx, job, Mode.TEST_ONLY)
        times.append((time.perf_counter() - t0) * 1000.0)
        if out.allocation is None:
            raise RuntimeError(f"the benchmark job did not fit: {out.status.message}")
        nodes = out.allocation.nodes
    return statistics.median(times), nodes


def busy_cluster(
    cluster_nodes: tuple[Node, ...], busy: float
) -> tuple[ClusterSnapshot, NodeTable, list[int]]:
    """A snapshot of ``cluster_nodes`` and its node table with a seeded ``busy``
    fraction of whole nodes taken out directly (no running jobs to replay)."""
    rng = random.Random(7)
    busy_rows = [i for i in range(len(cluster_nodes)) if rng.random() < busy]
    snap = ClusterSnapshot(1, 0.0, cluster_nodes, (Partition(PARTITION, default=True),), (), ())
    table = NodeTable(cluster_nodes, snap.partitions)
    table.free_cpus[busy_rows] = 0
    table.jobs_on[busy_rows] = 1
    return snap, table, busy_rows


def size_cases(
    aware: Scheduler,
    snap: ClusterSnapshot,
    table: NodeTable,
    model: ClusterModel,
    repeats: int,
    group_of: Mapping[str, str],
    unit: str,
) -> dict[str, Any]:
    """The 8-, 64- and 512-node jobs placed by ``aware`` beside the same placement
    without the topology plugin (``unit``: how many groups of ``group_of`` each spans),
    and a 64-node job on a new node tuple per pass (as the server's passes hand it)."""
    plain = build_scheduler(default_profile(topology_aware=False))
    cases: dict[str, Any] = {}
    for size in JOB_SIZES:
        job = Job(1, model.spec_for(size * model.cores_per_node, 1), partition=PARTITION)
        aware_ms, aware_nodes = _median_ms(aware, snap, table, job, repeats)
        plain_ms, plain_nodes = _median_ms(plain, snap, table, job, repeats)
        cases[f"{size}_nodes"] = {
            "median_ms": round(aware_ms, 3),
            "baseline_median_ms": round(plain_ms, 3),
            unit: len({group_of[n] for n in aware_nodes}),
            f"baseline_{unit}": len({group_of[n] for n in plain_nodes}),
        }
    job = Job(1, model.spec_for(64 * model.cores_per_node, 1), partition=PARTITION)
    server_ms, _ = _median_ms(aware, snap, table, job, repeats, new_node_tuple=True)
    cases["64_nodes_new_pass"] = {"median_ms": round(server_ms, 3)}
    return cases


def run_topology_bench(
    nodes: int = 10_000, leaf: int = 16, levels: int = 3, repeats: int = 50, busy: float = 0.5
) -> dict[str, Any]:
    model = ClusterModel(nodes=nodes, cores_per_node=32, nodes_per_switch=leaf, tree_levels=levels)
    cluster_nodes = model.build_nodes()
    snap, table, busy_rows = busy_cluster(cluster_nodes, busy)
    leaf_of = {n.name: n.topology[-1] for n in cluster_nodes}

    t0 = time.perf_counter()
    TreeIndex.from_nodes(cluster_nodes)
    index_ms = (time.perf_counter() - t0) * 1000.0

    aware = build_scheduler(default_profile(topology=Topology()))
    cases = size_cases(aware, snap, table, model, repeats, leaf_of, "leaves")
    worst = max(c["median_ms"] for c in cases.values())
    return {
        "benchmark": "topology",
        "nodes": nodes,
        "leaf_size": leaf,
        "levels": levels,
        "busy_nodes": len(busy_rows),
        "repeats": repeats,
        "index_build_ms": round(index_ms, 3),
        "cases": cases,
        "worst_median_ms": worst,
        "target_ms": TARGET_MS,
        "meets_target": worst <= TARGET_MS,
    }
