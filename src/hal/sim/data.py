"""The data plane in the simulator: a cache tree with contents, and what reading costs.

``CacheModel`` is the HAL cache (docs/admin/cache.md) reduced to what placement changes: a tree
of instances with link metrics and a capacity each, the keys every instance holds
(least recently used evicted first), and which leaf each compute node reads through. A
job that starts reads its ``--data`` inputs on each of its nodes: a key its leaf holds is
a hit; otherwise it comes from the nearest ancestor holding it (the origin storage above
the root if none), at the path's latency and bandwidth, and — as the real nodes'
pull-through does — every instance on the way down keeps a copy. The job runs that much
longer (it reads before it computes), and the moved bytes are counted.

At every pass the scheduler sees ``view()``: the same ``hal.core.data.DataView`` the
server builds from the cache control plane, so the ``datalocality`` plugin decides here
exactly as it would live.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hal.core.data import DEFAULT_ORIGIN, CacheTree, DataView, Link


@dataclass(frozen=True, slots=True)
class Read:
    """What one job's start read: bytes its leaves held, bytes moved to them (of which
    from the origin), and the slowest node's transfer time (the job waits for it)."""

    local_bytes: int = 0
    moved_bytes: int = 0
    origin_bytes: int = 0
    seconds: float = 0.0


@dataclass
class CacheModel:
    tree: CacheTree
    capacity: Mapping[str, int]  # instance → bytes it may hold
    node_leaf: Mapping[str, str]  # compute node → the leaf instance it reads through
    sizes: Mapping[str, int]  # key → size (every key exists at the origin)
    origin: Link = DEFAULT_ORIGIN
    contents: dict[str, OrderedDict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for instance in self.tree.parent:
            self.contents.setdefault(instance, OrderedDict())

    def view(self) -> DataView:
        holders: dict[str, dict[str, int]] = {}
        for instance, keys in self.contents.items():
            for key, size in keys.items():
                holders.setdefault(key, {})[instance] = size
        return DataView(self.tree, holders, self.node_leaf, origin=self.origin)

    def read(self, keys: Sequence[str], nodes: Sequence[str]) -> Read:
        """Read ``keys`` on each of ``nodes`` (in order), filling the caches on the way."""
        local = moved = origin = 0
        slowest = 0.0
        for node in nodes:
            leaf = self.node_leaf.get(node)
            seconds = 0.0
            for key in keys:
                size = self.sizes[key]
                if leaf is None:
                    moved += size
                    origin += size
                    seconds += self.origin.seconds(size)
                    continue
                chain = self.tree.chain(leaf)
                holder = next((i for i in chain if key in self.contents[i]), None)
                if holder == leaf:
                    local += size
                    self.contents[leaf].move_to_end(key)
                    continue
                moved += size
                if holder is None:
                    origin += size
                    path = self.tree.to_root(leaf).then(self.origin)
                    below = chain
                else:
                    self.contents[holder].move_to_end(key)
                    path = self.tree.path(leaf, holder) or self.origin
                    below = chain[: chain.index(holder)]
                seconds += path.seconds(size)
                for instance in below:
                    self._store(instance, key, size)
            slowest = max(slowest, seconds)
        return Read(local, moved, origin, slowest)

    def _store(self, instance: str, key: str, size: int) -> None:
        held = self.contents[instance]
        limit = self.capacity.get(instance, 0)
        if size > limit:
            return  # larger than the whole cache: passed through, not kept
        held[key] = size
        held.move_to_end(key)
        used = sum(held.values())
        while used > limit:
            _, dropped = held.popitem(last=False)
            used -= dropped
