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
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hal.core.node import Node
from hal.core.topology import BLOCK_ROOT

IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class TreeIndex:
    leaf_of: IntArray  # per node row: its leaf's id
    # up[k][leaf] = the id of the leaf's level-k domain; up[0] is the identity, up[top]
    # all zeros (the core)
    up: tuple[IntArray, ...]
    names: tuple[tuple[str, ...], ...]  # names[k][id]: the domain's switch name

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
