"""``hal bench topology --labels``: placement on a label tree and in NVLink domains.

The same method as ``hal bench topology`` (one ``Framework.place(TEST_ONLY)`` per
placement on a fresh pass context, median of ``repeats``), on 10,000 nodes placed by
their topology labels instead of a switch tree: racks of 16 nodes, 8 racks a zone, 4
zones a region, 2 regions a site, and NVLink domains of 72 consecutive nodes (NVL72).
A seeded half of the nodes is busy. Cases: 8-, 64- and 512-node jobs with the default
profile beside the same placement without the topology plugin (racks spanned by each),
an 8-node ``--topology required=nvlink`` job, and a 64-node job on a new node tuple per
pass (as the server's passes hand the plugin).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hal.bench.topology import TARGET_MS, _median_ms, busy_cluster, size_cases
from hal.core.job import Job, TopologyConstraint
from hal.core.node import Node
from hal.core.topology_labels import label_path
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.sim.cluster import PARTITION, ClusterModel

RACK, ZONE, REGION, SITE, DOMAIN = 16, 8, 4, 2, 72  # each in units of the level below


def labelled_nodes(count: int) -> tuple[Node, ...]:
    out: list[Node] = []
    for i, node in enumerate(ClusterModel(nodes=count, cores_per_node=32).build_nodes()):
        r = i // RACK
        labels = {
            "rack": f"r{r}",
            "zone": f"z{r // ZONE}",
            "region": f"g{r // (ZONE * REGION)}",
            "site": f"s{r // (ZONE * REGION * SITE)}",
        }
        path = label_path(node.name, labels)
        out.append(replace(node, topology=path, labels=labels, nvlink_domain=f"nvl{i // DOMAIN}"))
    return tuple(out)


def run_label_bench(nodes: int = 10_000, repeats: int = 50, busy: float = 0.5) -> dict[str, Any]:
    model = ClusterModel(nodes=nodes, cores_per_node=32)
    cluster_nodes = labelled_nodes(nodes)
    snap, table, busy_rows = busy_cluster(cluster_nodes, busy)
    by_name = {n.name: n for n in cluster_nodes}
    rack_of = {n.name: n.labels["rack"] for n in cluster_nodes}
    aware = build_scheduler(default_profile())
    cases = size_cases(aware, snap, table, model, repeats, rack_of, "racks")
    spec = replace(
        model.spec_for(8 * model.cores_per_node, 1), topology=TopologyConstraint("nvlink", True)
    )
    nvlink_ms, placed = _median_ms(aware, snap, table, Job(1, spec, partition=PARTITION), repeats)
    cases["8_nodes_required_nvlink"] = {
        "median_ms": round(nvlink_ms, 3),
        "domains": len({by_name[n].nvlink_domain for n in placed}),
    }
    worst = max(c["median_ms"] for c in cases.values())
    return {
        "benchmark": "topology-labels",
        "nodes": nodes,
        "busy_nodes": len(busy_rows),
        "repeats": repeats,
        "cases": cases,
        "worst_median_ms": worst,
        "target_ms": TARGET_MS,
        "meets_target": worst <= TARGET_MS,
    }
