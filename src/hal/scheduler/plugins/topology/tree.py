"""``TreeIndex``: the switch tree as small integer arrays over the NodeTable's rows.

Built from the nodes' topology paths (``Node.topology``, root → leaf switch), so the
scheduler needs no other input: whoever builds the nodes (the server from the config's
``[topology]``, the simulator from a synthetic tree) gives them their paths.

Level ``k`` of a node is the switch ``k`` steps above it along its path (level 0 its leaf;
a path shorter than ``k + 1`` stops at its top switch). One more level, ``top``, joins
everything (an unnamed core), so every placement has a common domain. A node without a
path is a leaf of its own. A block topology's paths make the same shape: base blocks
as leaves, their aggregations above (``blocks`` tells).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hal.core.node import Node
from hal.core.topology import BLOCK_ROOT
from hal.core.topology_labels import LABEL_LEVELS, level_of_label

IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class TreeIndex:
    leaf_of: IntArray  # per node row: its leaf's id
    # up[k][leaf] = the id of the leaf's level-k domain; up[0] is the identity, up[top]
    # all zeros (the core)
    up: tuple[IntArray, ...]
    names: tuple[tuple[str, ...], ...]  # names[k][id]: the domain's switch name
    # Both computed once here, not per call: the plugin is in the default profile and
    # asks for every multi-node job; walking 10,000 leaf names each time cost a third of
    # a 50,000-job x 10,000-node pass (hal bench sched-pass, docs/benchmarks.md).
    # flat: no node has a path (each is a leaf of its own): no topology to place on.
    flat: bool = field(init=False)
    # the label levels (rack, zone, ...) some node really has, leaf first, when the
    # paths come from topology labels (core.topology_labels); () otherwise
    label_levels: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "flat", self.top == 1 and all(n.startswith("~") for n in self.names[0])
        )
        object.__setattr__(self, "label_levels", _label_levels(self.names))

    @property
    def top(self) -> int:
        return len(self.up) - 1

    @property
    def blocks(self) -> bool:
        """A block topology (paths from ``hal.core.topology.block_paths``): the leaves are
        base blocks and the levels above their aggregations."""
        return self.top >= 1 and BLOCK_ROOT in self.names[self.top - 1]

    @property
    def n_leaves(self) -> int:
        return len(self.up[0])

    @classmethod
    def from_nodes(cls, nodes: Sequence[Node]) -> TreeIndex:
        leaf_ids: dict[tuple[str, ...], int] = {}
        leaf_of = np.empty(len(nodes), dtype=np.intp)
        for row, node in enumerate(nodes):
            path = node.topology or ("~" + node.name,)
            found = leaf_ids.get(path)
            if found is None:
                found = leaf_ids[path] = len(leaf_ids)
            leaf_of[row] = found
        leaves = list(leaf_ids)  # in id order
        depth = max((len(p) for p in leaves), default=1)
        up: list[IntArray] = []
        names: list[tuple[str, ...]] = []
        for k in range(depth):
            ids: dict[tuple[str, ...], int] = {}
            level = np.empty(len(leaves), dtype=np.intp)
            for i, path in enumerate(leaves):
                key = path[: max(len(path) - k, 1)]
                found = ids.get(key)
                if found is None:
                    found = ids[key] = len(ids)
                level[i] = found
            up.append(level)
            names.append(tuple(key[-1] for key in ids))
        up.append(np.zeros(len(leaves), dtype=np.intp))
        names.append(("(core)",))
        return cls(leaf_of, tuple(up), tuple(names))

    def domain_counts(self, rows: IntArray, level: int) -> IntArray:
        """How many of ``rows`` each level-``level`` domain holds."""
        per_leaf = np.bincount(self.leaf_of[rows], minlength=self.n_leaves)
        up = self.up[level]
        return np.bincount(up, weights=per_leaf, minlength=int(up.max()) + 1).astype(np.intp)


def _label_levels(names: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """``TreeIndex.label_levels`` from the domain names per level.

    A node without any label (a leaf ``~NAME`` of its own, e.g. an agent started without
    ``--topology-label``) does not turn a label tree into an unnamed one: it is a rack
    (and zone...) of its own, so ``required=rack`` keeps its meaning."""
    racks = [n for n in names[0] if not n.startswith("~")]
    if len(names) - 1 < len(LABEL_LEVELS) or not racks:
        return ()
    if any(level_of_label(n) != "rack" for n in racks):
        return ()
    present: list[str] = []
    for k, level in enumerate(LABEL_LEVELS):
        if any(n.partition("=")[2][:1] not in ("", "~") for n in names[k]):
            present.append(level)
    return tuple(present)
