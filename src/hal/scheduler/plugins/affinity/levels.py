"""``Levels``: each node row's domain at a rule's level, as integer arrays over the rows.

Two rows are *within* a level when they have the same id there. The levels:

* ``node``: every row its own domain;
* ``nvlink``: the node's multi-node NVLink domain (``Node.nvlink_domain``); a node
  without one is a domain of its own;
* the topology's levels, read as the ``topology`` plugin reads them from the nodes'
  paths (``TreeIndex``): ``leaf``/``switch`` and ``levelK`` of a switch tree, the
  configured level names, ``block`` and its aggregations, or the label levels (rack,
  zone, region, site) some node carries. A node without a path is a leaf of its own.

Built per node list, each level once, on the first rule that asks for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hal.core.gpu_islands import NVLINK
from hal.core.job_rules import NODE
from hal.core.node import Node
from hal.core.topology import BLOCK, LEAF, level_index
from hal.core.topology_labels import LABEL_LEVELS
from hal.scheduler.plugins.topology.tree import IntArray, TreeIndex


class Levels:
    def __init__(self, nodes: Sequence[Node], level_names: tuple[str, ...] = ()) -> None:
        self.nodes = nodes
        self.level_names = level_names
        self._index: TreeIndex | None = None
        self._domains: dict[str, IntArray | None] = {}

    def domains(self, level: str) -> IntArray | None:
        """Per row, the id of its domain at ``level`` (ids from 0); None when the
        cluster has no such level."""
        if level not in self._domains:
            self._domains[level] = self._build(level)
        return self._domains[level]

    def known(self) -> list[str]:
        """The level names a rule may use here, lowest first (for error messages)."""
        index = self._tree()
        names = [NODE, NVLINK]
        if index.flat:
            return names
        if index.label_levels:
            return [NODE, *index.label_levels, NVLINK]
        leaf = BLOCK if index.blocks else LEAF
        names += list(self.level_names[: index.top])
        names += [leaf if k == 0 else f"level{k}" for k in range(len(names) - 2, index.top)]
        return names

    def _tree(self) -> TreeIndex:
        if self._index is None:
            self._index = TreeIndex.from_nodes(self.nodes)
        return self._index

    def _build(self, level: str) -> IntArray | None:
        count = len(self.nodes)
        if level == NODE:
            return np.arange(count, dtype=np.intp)
        if level == NVLINK:
            names = [n.nvlink_domain for n in self.nodes]
            ids = {d: i for i, d in enumerate(sorted(set(names) - {""}))}
            own = len(ids)  # a node without a domain: one of its own, after the others
            return np.array(
                [ids[d] if d else own + row for row, d in enumerate(names)], dtype=np.intp
            )
        index = self._tree()
        k = self._tree_level(level, index)
        if k is None:
            return None
        return index.up[k][index.leaf_of]

    def _tree_level(self, name: str, index: TreeIndex) -> int | None:
        """The tree level ``name`` stands for, as the ``topology`` plugin resolves it."""
        if index.flat:
            return None
        if index.blocks and name == BLOCK and name not in self.level_names:
            return 0
        labels = index.label_levels
        if labels and name not in self.level_names:
            return LABEL_LEVELS.index(name) if name in labels else None
        level = level_index(name, self.level_names, index.top)
        # a configured name above this tree's top: the whole tree is one such domain
        return None if level is None else min(level, index.top)
