"""``Levels``: how near two nodes are, as the domains they share, one row of ids per level.

Level 0 is the node itself; then the node's multi-node NVLink domain (when some node has
one); then the switch tree's levels from the leaf up (or the rack/zone/region/site label
tree), as ``hal.scheduler.plugins.topology.tree.TreeIndex`` reads them from the nodes'
topology paths. Two nodes *share* level ``k`` when their ids there are equal; the more
levels they share, the fewer switches their traffic crosses. The core above the top
switches joins everything and tells nothing, so it is not a level; nor is a level that
groups the nodes exactly as the one below it (each node its own leaf: no tree) or puts
every node in one domain (an unnamed zone every node shares).

A node without an NVLink domain is one of its own at that level (it shares it with
itself only), so on a cluster where some nodes have domains the level still orders the
others correctly: same node first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import eq

import numpy as np
import numpy.typing as npt

from hal.core.node import Node
from hal.scheduler.plugins.topology.tree import TreeIndex

IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Levels:
    domains: IntArray  # (levels, nodes): domains[k, row] = the row's id at level k
    sizes: tuple[int, ...]  # per level: how many ids (bincount's minlength)
    names: tuple[str, ...]  # per level, for people: "node", "leaf switch", "rack"...
    # the same, for ``reach``: each row's NVLink domain (None: no level for it), each
    # row's leaf, and per switch level kept the leaves' domain ids there (sizes apart)
    nvlink: IntArray | None
    leaf_of: IntArray
    switches: tuple[tuple[IntArray, int], ...]
    by_row: tuple[tuple[int, ...], ...] = field(init=False)  # each row's ids, in Python

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_row", tuple(map(tuple, self.domains.T.tolist())))

    @property
    def count(self) -> int:
        return len(self.sizes)

    @classmethod
    def of(cls, nodes: Sequence[Node], tree: TreeIndex) -> Levels:
        n = len(nodes)
        rows: list[IntArray] = [np.arange(n, dtype=np.intp)]
        names: list[str] = ["node"]
        sizes: list[int] = [n]
        nvlink: IntArray | None = None
        if any(node.nvlink_domain for node in nodes):
            ids: dict[str, int] = {}
            nvlink = np.empty(n, dtype=np.intp)
            for row, node in enumerate(nodes):
                key = node.nvlink_domain or f"~{row}"  # none: a domain of its own
                nvlink[row] = ids.setdefault(key, len(ids))
            rows.append(nvlink)
            names.append("NVLink domain")
            sizes.append(len(ids))
        labels = tree.label_levels
        switches: list[tuple[IntArray, int]] = []
        for k in range(tree.top):  # (up[top] is the core)
            level = tree.up[k][tree.leaf_of]
            size = int(level.max()) + 1 if n else 0
            # a tree level nests in the one below it: as many ids means the same groups
            if size <= 1 or (size == sizes[-1] and _nested(level, rows[-1])):
                continue
            rows.append(level.astype(np.intp, copy=False))
            sizes.append(size)
            switches.append((tree.up[k], size))
            if labels and k < 4:
                names.append(("rack", "zone", "region", "site")[k])
            else:
                names.append("leaf switch" if k == 0 else f"level-{k} switch")
        return cls(
            np.vstack(rows), tuple(sizes), tuple(names), nvlink, tree.leaf_of, tuple(switches)
        )

    def reach(self, rows: IntArray, weights: FloatArray) -> FloatArray:
        """For every node, the sum over ``rows`` of weight × levels shared with it.
        Switch levels are summed per leaf (a few dozen leaves, not all the nodes) and
        spread to the nodes once: about four passes over the nodes in all."""
        # (with weights, bincount gives float64: astype copies nothing)
        out = np.bincount(rows, weights=weights, minlength=self.sizes[0]).astype(
            np.float64, copy=False
        )
        if self.nvlink is not None:
            ids = self.nvlink
            out += np.bincount(ids[rows], weights=weights, minlength=self.sizes[1])[ids]
        if self.switches:
            leaves = self.leaf_of[rows]
            per_leaf = np.zeros(len(self.switches[0][0]))
            for up, size in self.switches:
                per_leaf += np.bincount(up[leaves], weights=weights, minlength=size)[up]
            out += per_leaf[self.leaf_of]
        return out

    def kept(
        self, pair: tuple[int, int], rows: Sequence[int], weights: Sequence[float]
    ) -> tuple[float, int, int]:
        """For a job on ``pair[0]`` rather than ``pair[1]``, with peers on ``rows``
        (``weights``: bytes per second to each): the weight whose path is shorter on
        the first, and the levels each shares with the heaviest peer row. In Python:
        a note is made for one job at a time, with a few peer rows."""
        at, other = self.by_row[pair[0]], self.by_row[pair[1]]
        kept = 0.0
        heaviest = -1.0
        near = (0, 0)
        for row, weight in zip(rows, weights, strict=True):
            there = self.by_row[row]
            here = sum(map(eq, at, there))
            instead = sum(map(eq, other, there))
            if here > instead:
                kept += weight
            if weight > heaviest:
                heaviest, near = weight, (here, instead)
        return kept, near[0], near[1]

    def shared(self, row: int, rows: Sequence[int]) -> list[int]:
        """How many levels ``row`` shares with each of ``rows``."""
        at = self.by_row[row]
        return [sum(map(eq, at, self.by_row[r])) for r in rows]

    def meeting(self, shared: int) -> str:
        """Where traffic between two nodes sharing ``shared`` levels turns round."""
        if shared <= 0:
            return "only at the core"
        name = self.names[self.count - shared]
        return "within one node" if name == "node" else f"within one {name}"


def _nested(upper: IntArray, lower: IntArray) -> bool:
    """Whether ``upper`` groups the rows exactly as ``lower`` (same partition)."""
    pairs = np.unique(np.stack((lower, upper)), axis=1)
    return len(pairs[0]) == len(np.unique(lower))
