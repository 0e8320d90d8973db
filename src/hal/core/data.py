"""Where a job's input data already is, and what moving the rest costs.

Jobs name their inputs (``--data key[,key]``): keys of the HAL cache (``hal.cache``), a
tree of Redis-protocol instances whose leaves sit next to the compute nodes. A
``DataView`` is the scheduler's picture of that cache at one moment: the tree with each
link's latency, bandwidth and cost, which instances hold which keys (and how large they
are), and which leaf instance each HAL node reads through. It answers one question,
``transfer(keys, node)``: how many bytes of those inputs the node's leaf already holds,
how many must move, and how long and how expensive moving them is.

The model follows the cache's own read path (docs/admin/cache.md): a leaf that misses pulls
from the nearest fresh copy among its ancestors (with peer sourcing, from the nearest
copy anywhere in its tree); with no reachable copy the data comes from the origin
storage behind the root. Along a path latency and cost add up and bandwidth is the
narrowest link's; moving ``b`` bytes over a path takes ``latency + 8 b / bandwidth``
seconds and costs ``cost × b / 1 GB``.

Pure: imports nothing outside the standard library; the server builds views from the
cache control plane, the simulator from its own cache model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hal.core.errors import InvalidRequest

MAX_DATA_KEYS = 64  # what one --data may list (a named dataset may stand for more)
MAX_DATASET_KEYS = 100_000
DATASET_NAME = "@"  # --data @imagenet: the keys [data.datasets] lists under that name
MAX_KEY_BYTES = 512
GB = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Link:
    """A link (or a path's totals): latency and cost add up, bandwidth is the minimum."""

    latency_ms: float = 1.0
    bandwidth_mbps: float = 10_000.0
    cost: float = 1.0

    def then(self, other: Link) -> Link:
        return Link(
            self.latency_ms + other.latency_ms,
            min(self.bandwidth_mbps, other.bandwidth_mbps),
            self.cost + other.cost,
        )

    def seconds(self, size: int) -> float:
        """Time to move ``size`` bytes over this path."""
        if size <= 0:
            return 0.0
        return self.latency_ms / 1000.0 + size * 8 / (self.bandwidth_mbps * 1e6)

    def price(self, size: int) -> float:
        return self.cost * size / GB


LOCAL = Link(0.0, float("inf"), 0.0)
# Data no cache holds is read from the storage behind the root (the cache's origin):
# a slower link above the root, the same for every node.
DEFAULT_ORIGIN = Link(latency_ms=5.0, bandwidth_mbps=1_000.0, cost=1.0)


@dataclass(frozen=True, slots=True)
class Transfer:
    """What placing a job's inputs on one node takes."""

    local_bytes: int = 0
    moved_bytes: int = 0
    seconds: float = 0.0
    cost: float = 0.0

    def plus(self, other: Transfer) -> Transfer:
        return Transfer(
            self.local_bytes + other.local_bytes,
            self.moved_bytes + other.moved_bytes,
            self.seconds + other.seconds,
            self.cost + other.cost,
        )


@dataclass(frozen=True)
class CacheTree:
    """Cache instances linked child → parent; ``uplink[i]`` is ``i``'s link to its parent."""

    parent: Mapping[str, str | None]
    uplink: Mapping[str, Link] = field(default_factory=dict)
    _chains: dict[str, tuple[str, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _roots: dict[str, Link] = field(default_factory=dict, init=False, repr=False, compare=False)

    def chain(self, instance: str) -> tuple[str, ...]:
        """``instance``, its parent, ..., its root (``()`` if unknown). A cycle in the
        parent links stops the chain where it would repeat."""
        found = self._chains.get(instance)
        if found is not None:
            return found
        out: list[str] = []
        seen: set[str] = set()
        current: str | None = instance if instance in self.parent else None
        while current is not None and current not in seen:
            out.append(current)
            seen.add(current)
            current = self.parent.get(current)
        chain = tuple(out)
        self._chains[instance] = chain
        return chain

    def path(self, src: str, dst: str) -> Link | None:
        """The metrics of the tree path between two instances; None in different trees."""
        if src == dst:
            return LOCAL if src in self.parent else None
        up = self.chain(src)
        down = self.chain(dst)
        where = {iid: i for i, iid in enumerate(up)}
        for j, iid in enumerate(down):
            i = where.get(iid)
            if i is not None:
                total = LOCAL
                for hop in (*up[:i], *down[:j]):
                    total = total.then(self.uplink.get(hop, Link()))
                return total
        return None

    def to_root(self, instance: str) -> Link:
        found = self._roots.get(instance)
        if found is None:
            chain = self.chain(instance)
            found = LOCAL if not chain else (self.path(instance, chain[-1]) or LOCAL)
            self._roots[instance] = found
        return found


@dataclass(frozen=True)
class DataView:
    """The cache as the scheduler sees it. ``holders``: key → instance → size in bytes
    (fresh copies only); ``node_cache``: HAL node → the leaf instance it reads through
    (a node without one reads everything from the origin)."""

    tree: CacheTree
    holders: Mapping[str, Mapping[str, int]]
    node_cache: Mapping[str, str]
    peer_sourcing: bool = False
    origin: Link = DEFAULT_ORIGIN

    def size(self, key: str) -> int | None:
        """The key's size as its copies report it (None: in no cache, size unknown)."""
        copies = self.holders.get(key)
        return max(copies.values()) if copies else None

    def source(self, key: str, leaf: str | None) -> tuple[str | None, Link]:
        """Where ``leaf`` would get ``key`` from: (holder, path), or (None, origin path)
        when no copy is reachable. Nearest by transfer time, ties by instance id."""
        copies = self.holders.get(key, {})
        if leaf is None or leaf not in self.tree.parent:
            return None, self.origin
        if leaf in copies:
            return leaf, LOCAL
        chain = self.tree.chain(leaf)
        size = self.size(key) or 0
        best: tuple[float, str, Link] | None = None
        for holder in sorted(copies):
            if self.peer_sourcing or holder in chain:
                path = self.tree.path(leaf, holder)
                if path is not None:
                    candidate = (path.seconds(size), holder, path)
                    if best is None or candidate[:2] < best[:2]:
                        best = candidate
        if best is not None:
            return best[1], best[2]
        return None, self.tree.to_root(leaf).then(self.origin)

    def transfer(self, keys: Iterable[str], node: str) -> Transfer:
        """What reading all of ``keys`` on ``node`` takes (keys of unknown size count 0)."""
        return self.transfer_at(keys, self.node_cache.get(node))

    def transfer_at(self, keys: Iterable[str], leaf: str | None) -> Transfer:
        """``transfer`` for a node reading through ``leaf`` (None: no cache)."""
        total = Transfer()
        for key in keys:
            size = self.size(key) or 0
            holder, path = self.source(key, leaf)
            if holder is not None and holder == leaf:
                total = total.plus(Transfer(local_bytes=size))
            else:
                total = total.plus(Transfer(0, size, path.seconds(size), path.price(size)))
        return total

    def worst_at(self, keys: Iterable[str], leaf: str | None) -> Transfer:
        """The same inputs if no cache held any of them: everything from the origin."""
        path = self.origin
        if leaf is not None and leaf in self.tree.parent:
            path = self.tree.to_root(leaf).then(self.origin)
        total = Transfer()
        for key in keys:
            size = self.size(key) or 0
            total = total.plus(Transfer(0, size, path.seconds(size), path.price(size)))
        return total


def parse_data_keys(
    text: str | Iterable[str], *, field_name: str = "data", limit: int = MAX_DATA_KEYS
) -> tuple[str, ...]:
    """``--data key[,key]`` (or a list of keys) → the keys, deduplicated in order.

    Keys are cache keys (Redis keys): any bytes but whitespace and commas here, at most
    512 bytes each and ``limit`` per job. ``@name`` names a dataset (``expand_datasets``)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    keys: dict[str, None] = {}  # ordered, deduplicated
    for raw in items:
        key = raw.strip()
        if not key:
            raise InvalidRequest(
                f"--data has an empty key in {text!r}; write --data KEY[,KEY...]",
                field=field_name,
            )
        if any(c.isspace() for c in key) or "," in key:
            raise InvalidRequest(
                f"--data key {key!r} contains whitespace or a comma; cache keys for --data "
                "must not (separate several keys with commas)",
                field=field_name,
            )
        if not key.isprintable():  # a NUL, or a lone surrogate: JSON's \ud800, argv's
            raise InvalidRequest(  # bytes that are not UTF-8 (a traceback or a 500)
                f"--data key {key[:40]!r} is not UTF-8 text (or holds a control character "
                "such as a NUL); cache keys for --data are printable UTF-8",
                field=field_name,
            )
        if len(key.encode()) > MAX_KEY_BYTES:
            raise InvalidRequest(
                f"--data key {key[:40]!r}... is longer than {MAX_KEY_BYTES} bytes",
                field=field_name,
            )
        if key == DATASET_NAME:
            raise InvalidRequest(
                "--data has '@' without a dataset name; write --data @NAME", field=field_name
            )
        keys[key] = None
    if len(keys) > limit:
        raise InvalidRequest(
            f"--data names {len(keys)} keys; at most {limit} per job (group inputs under "
            "fewer, larger keys, or name a dataset defined in [data.datasets])",
            field=field_name,
        )
    return tuple(keys)


def expand_datasets(
    keys: Iterable[str], datasets: Mapping[str, tuple[str, ...]], *, field_name: str = "data"
) -> tuple[str, ...]:
    """Replace each ``@name`` with the keys of that named dataset (``[data.datasets]`` in
    ``hal.toml``), deduplicated in order; plain keys stay."""
    out: dict[str, None] = {}
    for key in keys:
        if not key.startswith(DATASET_NAME):
            out[key] = None
            continue
        name = key[len(DATASET_NAME) :]
        found = datasets.get(name)
        if found is None:
            known = ", ".join(sorted(datasets)[:20]) or "none are defined"
            raise InvalidRequest(
                f"--data {key}: no dataset named {name!r} (known: {known}); define it under "
                "[data.datasets] in hal.toml, or give cache keys",
                field=field_name,
            )
        out.update(dict.fromkeys(found))
    return tuple(out)
