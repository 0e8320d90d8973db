"""The network topology: a tree of switches (Slurm's ``topology.conf`` for topology/tree)
and, optionally, blocks (topology/block).

A leaf switch lists its nodes (``Nodes=``); an inner switch lists its child switches
(``Switches=``). Every node hangs under exactly one leaf and carries its *path*: the
switch names from the root down to its leaf, e.g. ``("spine0", "leaf3")``. Levels are
counted from the bottom of a node's path: level 0 is its leaf switch, level 1 the switch
above it, and so on (for a balanced tree these are Slurm's switch levels). Levels may be
given names (``level_names``, bottom-up); unnamed ones are called ``leaf`` and
``level1``, ``level2``...

With blocks and no switches (a topology/block cluster), a node's path is its block's
aggregations instead (``block_paths``): ``(BLOCK_ROOT, ..., aggregated block, base
block)``, so level 0 is the base block (named ``block``) and level ``k`` the aggregation
of ``BlockSizes[k]`` nodes. With both switches and blocks, the switch tree gives the
paths (the blocks are shown but not placed on).

A ``Topology`` is validated when it is built: a switch defined twice or under two
parents, an unknown child switch, a cycle, a node under two leaves, a switch with both
nodes and switches, a node in two blocks, bad ``BlockSizes`` or a level named
``nvlink`` (reserved) each raise ``TopologyError`` naming the culprit. Which nodes exist
is not known here (agents register later); ``check_nodes`` compares with a list when one
is known.

Pure: imports only ``hal.core``; reading Slurm's ``topology.conf`` is
``hal.slurm.topology_conf``'s job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hal.core.errors import InvalidRequest
from hal.core.gpu_islands import NVLINK

LEAF = "leaf"
# The root of every node path of a block topology (blocks and no switches): the
# placement plugin recognises block mode by it. See ``block_paths``.
BLOCK_ROOT = "(blocks)"
BLOCK = "block"


class TopologyError(InvalidRequest):
    """The topology (config ``[topology]`` or a topology.conf) is invalid."""

    code = "invalid_topology"


@dataclass(frozen=True, slots=True)
class Switch:
    """A leaf switch has ``nodes``; an inner switch has child ``switches``.
    ``link_speed``: Slurm's ``LinkSpeed`` (units the site chooses; 1 by default), shown
    by ``scontrol show topology`` and not scheduled on, as in Slurm."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int = 1


@dataclass(frozen=True, slots=True)
class Block:
    """A group of nodes with fast interconnect (Slurm's topology/block)."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LabelRule:
    """Topology labels for the nodes a host list names (``[[topology.labels]]``)."""

    nodes: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]  # (level, value), e.g. (("rack", "r1"),)


@dataclass(frozen=True, slots=True)
class Topology:
    switches: tuple[Switch, ...] = ()
    blocks: tuple[Block, ...] = ()
    block_sizes: tuple[int, ...] = ()
    level_names: tuple[str, ...] = ()  # bottom-up: level_names[0] names the leaves
    # topology labels by host list (core.topology_labels); later rules win
    label_rules: tuple[LabelRule, ...] = ()
    _paths: dict[str, tuple[str, ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        self._paths.update(_validate(self))

    # -- queries ----------------------------------------------------------------------

    def paths(self) -> Mapping[str, tuple[str, ...]]:
        """Node name → switch names from the root to its leaf. Do not mutate."""
        return self._paths

    def path_of(self, node: str) -> tuple[str, ...]:
        """The node's path, or ``()`` for a node the tree does not list."""
        return self._paths.get(node, ())

    @property
    def has_tree(self) -> bool:
        """Switches or blocks are configured: they, not the labels, place jobs."""
        return bool(self.switches or self.blocks)

    def labels_of(self, node: str) -> dict[str, str]:
        """The labels ``[[topology.labels]]`` gives ``node`` (later rules win)."""
        found: dict[str, str] = {}
        for rule in self.label_rules:
            if node in rule.nodes:
                found.update(rule.labels)
        return found

    @property
    def depth(self) -> int:
        """The number of levels on the longest path (0 for no switches or blocks)."""
        return max((len(p) for p in self._paths.values()), default=0)

    @property
    def block_mode(self) -> bool:
        """Blocks and no switches: nodes' paths are their block aggregations."""
        return bool(self.blocks) and not self.switches

    def level_name(self, level: int) -> str:
        if level < len(self.level_names):
            return self.level_names[level]
        if level == 0:
            return BLOCK if self.block_mode else LEAF
        return f"level{level}"

    def level_of_name(self, name: str) -> int | None:
        """The level a name stands for (``leaf`` and ``switch`` are always level 0)."""
        return level_index(name, self.level_names, self.depth)

    def roots(self) -> tuple[Switch, ...]:
        children = {c for s in self.switches for c in s.switches}
        return tuple(s for s in self.switches if s.name not in children)

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)

    def check_nodes(self, known: Iterable[str]) -> None:
        """Raise ``TopologyError`` if the tree or a block names a node not in ``known``."""
        names = set(known)
        listed = set(self._paths) | {n for b in self.blocks for n in b.nodes}
        unknown = sorted(listed - names)
        if unknown:
            shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
            raise TopologyError(
                f"the topology names {len(unknown)} unknown node(s): {shown}; "
                "fix the node names or remove them from the topology",
                field="topology.nodes",
            )


def level_index(name: str, level_names: tuple[str, ...], depth: int) -> int | None:
    """The level ``name`` stands for: a configured name, ``leaf``/``switch`` (0) or
    ``levelK``; None when unknown (or above the tree's ``depth``)."""
    if name in level_names:
        return level_names.index(name)
    if name in (LEAF, "switch"):
        return 0
    if name.startswith("level") and name[5:].isdigit():
        k = int(name[5:])
        return k if k < max(depth, 1) else None
    return None


# -- validation ---------------------------------------------------------------------------


def _validate(topo: Topology) -> dict[str, tuple[str, ...]]:
    by_name: dict[str, Switch] = {}
    for s in topo.switches:
        if not s.name:
            raise TopologyError("a switch needs a name", field="topology.switches")
        if s.name in by_name:
            raise TopologyError(
                f"switch {s.name!r} is defined twice", field=f"topology.switches.{s.name}"
            )
        if s.nodes and s.switches:
            raise TopologyError(
                f"switch {s.name!r} has both nodes and switches; a leaf switch lists "
                "nodes, an inner switch lists switches",
                field=f"topology.switches.{s.name}",
            )
        by_name[s.name] = s
    parent: dict[str, str] = {}
    for s in topo.switches:
        for child in s.switches:
            if child not in by_name:
                raise TopologyError(
                    f"switch {s.name!r} lists unknown switch {child!r}",
                    field=f"topology.switches.{s.name}",
                )
            if child in parent:
                raise TopologyError(
                    f"switch {child!r} is under two switches ({parent[child]!r} and "
                    f"{s.name!r}); a tree gives each switch one parent",
                    field=f"topology.switches.{child}",
                )
            parent[child] = s.name
    paths: dict[str, tuple[str, ...]] = {}
    leaf_of: dict[str, str] = {}
    reached: set[str] = set()
    stack: list[tuple[str, tuple[str, ...]]] = [
        (s.name, (s.name,)) for s in reversed(topo.switches) if s.name not in parent
    ]
    while stack:
        name, path = stack.pop()
        reached.add(name)
        s = by_name[name]
        for node in s.nodes:
            if node in leaf_of:
                raise TopologyError(
                    f"node {node!r} is under two leaf switches ({leaf_of[node]!r} and "
                    f"{name!r}); list each node once",
                    field=f"topology.switches.{name}",
                )
            leaf_of[node] = name
            paths[node] = path
        stack.extend((c, (*path, c)) for c in reversed(s.switches))
    # Every switch has at most one parent, so a switch not reached from a root sits on
    # (or under) a cycle.
    lost = [s.name for s in topo.switches if s.name not in reached]
    if lost:
        raise TopologyError(
            f"switches {', '.join(lost)} form a cycle (each is under another); "
            "the switches must form a tree",
            field=f"topology.switches.{lost[0]}",
        )
    _check_blocks(topo)
    if topo.blocks and not topo.switches:
        paths = block_paths(topo.blocks, topo.block_sizes)
    seen_levels: set[str] = set()
    for name in topo.level_names:
        if not name or name in seen_levels:
            raise TopologyError(
                f"level names must be distinct and non-empty: {list(topo.level_names)}",
                field="topology.level_names",
            )
        if name == NVLINK:
            # --topology required=nvlink always means the GPUs' NVLink (islands, domains)
            raise TopologyError(
                f"level name {NVLINK!r} is reserved for NVLink (--topology "
                f"required={NVLINK}); name this switch level otherwise: "
                f"{list(topo.level_names)}",
                field="topology.level_names",
            )
        seen_levels.add(name)
    return paths


def _check_blocks(topo: Topology) -> None:
    in_block: dict[str, str] = {}
    names: set[str] = set()
    for b in topo.blocks:
        if b.name in names:
            raise TopologyError(f"block {b.name!r} is defined twice", field="topology.blocks")
        names.add(b.name)
        for node in b.nodes:
            if node in in_block:
                raise TopologyError(
                    f"node {node!r} is in two blocks ({in_block[node]!r} and {b.name!r})",
                    field="topology.blocks",
                )
            in_block[node] = b.name
    sizes = topo.block_sizes
    if sizes and not topo.blocks:
        raise TopologyError("BlockSizes given without blocks", field="topology.block_sizes")
    for prev, size in zip((0, *sizes), sizes, strict=False):
        ok = size > 0 and (prev == 0 or (size > prev and size % prev == 0 and _pow2(size // prev)))
        if not ok:
            raise TopologyError(
                f"BlockSizes {list(sizes)}: each size must be positive and a power-of-two "
                "multiple of the one before (e.g. 16,32,64)",
                field="topology.block_sizes",
            )


def effective_block_sizes(blocks: tuple[Block, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``BlockSizes`` as given, or (Slurm's default) the base block size (the largest
    block's node count) and its power-of-two multiples up to the number of blocks."""
    if sizes:
        return sizes
    base = max((len(b.nodes) for b in blocks), default=1) or 1
    out = [base]
    while len(out) < 32 and 2 ** len(out) <= len(blocks):
        out.append(base * 2 ** len(out))
    return tuple(out)


def block_paths(blocks: tuple[Block, ...], sizes: tuple[int, ...]) -> dict[str, tuple[str, ...]]:
    """Node → path of a block topology (Slurm's topology/block): ``(BLOCK_ROOT, the
    largest aggregated block, ..., the next aggregation, the base block)``. Level ``k``
    (k >= 1) aggregates ``sizes[k] // sizes[0]`` consecutive base blocks (in the order
    the blocks are listed, aligned: blocks 0-1, 2-3, ...); a trailing group may be
    short. Aggregated blocks are named ``first..last`` after their base blocks."""
    sizes = effective_block_sizes(blocks, sizes)
    names = [b.name for b in blocks]
    paths: dict[str, tuple[str, ...]] = {}
    for i, b in enumerate(blocks):
        upper: list[str] = []
        for size in reversed(sizes[1:]):
            group = max(size // sizes[0], 1)
            first = (i // group) * group
            last = min(first + group, len(names)) - 1
            upper.append(names[first] if first == last else f"{names[first]}..{names[last]}")
        path = (BLOCK_ROOT, *upper, b.name)
        for node in b.nodes:
            paths[node] = path
    return paths


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# -- synthetic trees ----------------------------------------------------------------------


def synthetic_tree(nodes: Iterable[str], leaf_size: int, levels: int, fanout: int = 0) -> Topology:
    """A balanced tree over ``nodes`` (in order): leaves of ``leaf_size`` nodes and
    ``levels`` switch levels in all (2: leaves under spines). Above the leaves each
    switch has ``fanout`` children (0: chosen so that every level, the top one included,
    narrows by about the same factor). The top level may hold several switches; the
    scheduler treats them as joined by an unnamed core. Names: ``s<level>-<index>``."""
    names = list(nodes)
    if leaf_size < 1 or levels < 1:
        raise TopologyError("a synthetic tree needs leaf >= 1 and levels >= 1", field="topology")
    leaves = [
        Switch(f"s0-{i}", nodes=tuple(names[k : k + leaf_size]))
        for i, k in enumerate(range(0, len(names), leaf_size))
    ]
    switches: list[Switch] = list(leaves)
    layer = [s.name for s in leaves]
    for level in range(1, levels):
        remaining = levels - level
        width = fanout or max(2, round(len(layer) ** (1.0 / (remaining + 1))))
        groups = [layer[k : k + width] for k in range(0, len(layer), width)]
        upper = [Switch(f"s{level}-{i}", switches=tuple(g)) for i, g in enumerate(groups)]
        switches.extend(upper)
        layer = [s.name for s in upper]
    return Topology(tuple(switches))
