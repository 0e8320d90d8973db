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
    # for ``reach``: every level's ids apart (level k's moved past the ids of the levels
    # below), per row and, for the switch levels, per leaf; and how many ids in all
    _all_ids: IntArray = field(init=False)
    _leaf_ids: IntArray = field(init=False)
    _total: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_row", tuple(map(tuple, self.domains.T.tolist())))
        starts = np.cumsum((0, *self.sizes[:-1]), dtype=np.intp)
        object.__setattr__(self, "_all_ids", self.domains + starts[:, None])
        switch_starts = starts[self.count - len(self.switches) :]
        leaf_ids = [up + start for (up, _), start in zip(self.switches, switch_starts, strict=True)]
        object.__setattr__(
            self,
            "_leaf_ids",
            np.vstack(leaf_ids) if leaf_ids else np.empty((0, 0), dtype=np.intp),
        )
        object.__setattr__(self, "_total", int(sum(self.sizes)))

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
        One ``bincount`` of the rows' ids at every level at once (each level's ids
        apart), switch levels summed per leaf (a few dozen leaves, not all the nodes)
        and spread to the nodes once. Each domain's sum is taken in the order of
        ``rows`` and the levels are added in the same order as one bincount per level
        would: the same floats, bit for bit, in about half as many numpy calls."""
        sums = np.bincount(
            self._all_ids[:, rows].ravel(),
            weights=np.concatenate((weights,) * self.count),
            minlength=self._total,
        )
        n = self.sizes[0]
        out: FloatArray = sums[:n]
        if self.nvlink is not None:
            out = out + sums[n : n + self.sizes[1]][self.nvlink]
        if len(self.switches):
            per_leaf = sums[self._leaf_ids]  # (switch levels, leaves): a new array
            summed = per_leaf[0]
            for level in per_leaf[1:]:
                summed += level  # (per_leaf's own rows: the levels in order, as before)
            out = out + summed[self.leaf_of]
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
