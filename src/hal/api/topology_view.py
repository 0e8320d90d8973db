"""``GET /v1/topology``'s node-side part: the label tree (site > region > zone > rack),
multi-node NVLink domains and each node's GPU islands, from the registered nodes."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from hal.core.topology_labels import LABEL_LEVELS, display_name, present_levels
from hal.wire.nodes import LabelDomainInfo, NvlinkDomainInfo, TopologyInfo

if TYPE_CHECKING:
    from hal.state.cluster import Cluster


def with_node_topology(info: TopologyInfo, cluster: Cluster) -> TopologyInfo:
    """``info`` (the configured switch tree) plus what the nodes carry."""
    nodes = cluster.nodes
    idle = {n for n, node in nodes.items() if cluster.node_display_state(node) == "idle"}
    levels = present_levels(n.labels for n in nodes.values())
    topo = cluster.config.topology
    domains: dict[str, list[str]] = defaultdict(list)
    for name, node in sorted(nodes.items()):
        if node.nvlink_domain:
            domains[node.nvlink_domain].append(name)
    return info.model_copy(
        update={
            "configured": info.configured or bool(levels or domains),
            "label_levels": list(levels),
            "labels_place": bool(levels) and (topo is None or not topo.has_tree),
            "label_domains": label_domains(
                {n: node.labels for n, node in nodes.items()}, levels, idle
            ),
            "nvlink_domains": [
                NvlinkDomainInfo(name=d, nodes=members, nodes_free=len(idle.intersection(members)))
                for d, members in sorted(domains.items())
            ],
            "gpu_islands": {
                n: [list(i) for i in node.gpu_islands]
                for n, node in sorted(nodes.items())
                if node.gpu_islands
            },
        }
    )


def label_domains(
    labels: dict[str, dict[str, str]], levels: tuple[str, ...], idle: set[str]
) -> list[LabelDomainInfo]:
    """The label tree in pre-order over the present levels (top first); nodes without
    any label are left out (they are outside the label tree)."""
    if not levels:
        return []
    top_down = [k for k in reversed(LABEL_LEVELS) if k in levels]
    keyed: list[tuple[tuple[str, ...], str]] = []
    for node, lab in labels.items():
        if not any(lab.get(k) for k in levels):
            continue
        key = tuple(f"{k}={lab.get(k, '')}" for k in top_down[:-1])
        rack = lab.get(top_down[-1]) or ("~" + node if top_down[-1] == "rack" else "")
        keyed.append(((*key, f"{top_down[-1]}={rack}"), node))
    keyed.sort()
    # one pass: every prefix of every path collects its nodes; dicts keep the sorted
    # (pre-order) first appearance of each domain
    members: dict[tuple[str, ...], list[str]] = {}
    for path, node in keyed:
        for depth in range(len(path)):
            members.setdefault(path[: depth + 1], []).append(node)
    leaf_depth = len(top_down) - 1
    return [
        LabelDomainInfo(
            level=top_down[len(prefix) - 1],
            name=display_name(prefix[-1]),
            depth=len(prefix) - 1,
            nodes=names if len(prefix) - 1 == leaf_depth else [],
            nodes_total=len(names),
            nodes_free=len(idle.intersection(names)),
        )
        for prefix, names in members.items()
    ]
