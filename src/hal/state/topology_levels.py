"""Which ``--topology`` levels this cluster has, checked when a job is submitted.

A level the cluster lacks can never be satisfied, so the submit fails with
``BadConstraints`` (400) instead of a job pending forever. The levels are:

* ``nvlink``: always (GPU islands inside a node; NVLink domains across nodes);
* with a configured switch tree or blocks: ``leaf``/``switch`` (``block``),
  ``level1``..., and the configured ``level_names``;
* otherwise the label levels (rack, zone, region, site) that ``[[topology.labels]]``
  or a registered node's agent gives.

Labels arrive with agents, so a label level is known once a node carrying it has
registered (or the config names it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.core.errors import BadConstraints
from hal.core.gpu_islands import NVLINK
from hal.core.job import TopologyConstraint
from hal.core.topology import BLOCK, LEAF
from hal.core.topology_labels import present_levels

if TYPE_CHECKING:
    from hal.state.mirror import Mirror


def known_levels(cluster: Mirror) -> tuple[str, ...]:
    """The level names a ``--topology`` may use on this cluster, lowest first."""
    topo = cluster.config.topology
    if topo is not None and topo.has_tree:
        depth = max(topo.depth, 1)
        names = [topo.level_name(k) for k in range(depth)]
        names += [BLOCK] if topo.block_mode else [LEAF, "switch"]
        names += [f"level{k}" for k in range(1, depth)]
        return (*dict.fromkeys([*names, *topo.level_names]), NVLINK)
    labels = [n.labels for n in cluster.nodes.values()]
    if topo is not None:
        labels += [dict(rule.labels) for rule in topo.label_rules]
    return (*present_levels(labels), NVLINK)


def check_topology_level(cluster: Mirror, wanted: TopologyConstraint, where: str) -> None:
    """Raise ``BadConstraints`` when the cluster has no level named ``wanted.level``."""
    known = known_levels(cluster)
    if wanted.level in known:
        return
    raise BadConstraints(
        f"--topology {wanted}: this cluster has no {wanted.level!r} level; its levels are "
        f"{', '.join(known)}. Configure it ([topology] in hal.toml, or agents with "
        "--topology-label) or ask for one of those",
        field=where + "topology",
    )
