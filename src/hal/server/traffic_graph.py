"""``DecayedGraph``: bytes exchanged between pairs of things (running jobs, workload
identities), exponentially decayed, with a bounded number of edges.

Each edge is undirected (both directions together) and holds three numbers:

- ``decayed_bytes``: every byte measured on it, each weighted ``2 ** -(age / half_life)``,
  as of ``at``;
- ``at``: when that sum was last brought up to date (its last bytes);
- ``since``: when its first bytes were measured (the start of their interval).

Its rate at ``now`` is the decayed bytes over the decayed time it has been watched::

    rate = decayed_bytes * 2 ** -((now - at) / H) / window(now - since)
    window(t) = H / ln 2 * (1 - 2 ** -(t / H))

An edge watched for much longer than the half-life ``H`` gives the plain exponentially
weighted mean of its bytes per second (``window`` tends to ``H / ln 2``); a young one
gives its mean since it began (``window(t)`` is about ``t``), rather than a value pulled
down by the time before it existed. An edge that goes quiet fades by half each ``H``,
a little faster while its window still grows.

Bounds: at most ``max_peers`` edges per endpoint and ``max_nodes`` endpoints with edges.
A new edge at an endpoint that has ``max_peers`` takes the place of its weakest one if
it is stronger, else it is not kept. Past ``max_nodes`` endpoints, the weakest (the
least total rate over its edges) are dropped, down to 90 % of the bound at once, so the
sort is paid once per tenth of the bound. An edge whose decayed bytes fall under one
byte is forgotten (``prune``).

``changes()`` hands over the edges written and dropped since the last call, for a store
that keeps only what changed (``hal.server.traffic``); ``restore`` takes them back.
Not thread-safe: the server touches it from its event loop only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", int, str)  # a job id, or a workload identity
LN2 = math.log(2.0)
LEAST_BYTES = 1.0  # an edge decayed under this is forgotten
SHRINK_TO = 0.9  # past max_nodes, drop down to this share of it


@dataclass(slots=True)
class Edge:
    decayed_bytes: float
    at: float
    since: float

    def rate(self, now: float, half_life_s: float) -> float:
        """Bytes per second at ``now`` (see the module's docstring)."""
        watched = max(now - self.since, 1e-3)
        window = half_life_s / LN2 * -math.expm1(-LN2 * watched / half_life_s)
        return self.bytes_at(now, half_life_s) / window

    def bytes_at(self, now: float, half_life_s: float) -> float:
        return self.decayed_bytes * math.exp(-LN2 * max(now - self.at, 0.0) / half_life_s)


def pair(a: K, b: K) -> tuple[K, K]:
    """An undirected edge's key: its ends in a fixed order."""
    return (a, b) if a <= b else (b, a)


class DecayedGraph(Generic[K]):
    def __init__(
        self, half_life_s: float, max_peers: int, max_nodes: int, *, track_changes: bool = True
    ) -> None:
        self.half_life_s = half_life_s
        self.max_peers = max_peers
        self.max_nodes = max_nodes
        self.track_changes = track_changes  # False: ``changes()`` stays empty (not stored)
        self._peers: dict[K, dict[K, Edge]] = {}  # both directions share one Edge
        self._written: set[tuple[K, K]] = set()
        self._dropped: set[tuple[K, K]] = set()
        # counts the edges made and dropped: the same number, the same edges (a view
        # built from the graph needs building again only when it moves; rates aside)
        self.shape = 0
        self.refused = 0  # new edges not kept: their ends had stronger ones (bounds)
        self.evicted = 0  # edges dropped to make room (bounds)

    def configure(self, half_life_s: float, max_peers: int, max_nodes: int) -> None:
        """New settings (``scontrol reconfigure``): lower bounds apply at the next
        ``prune``; edges' stored sums stay right under a new half-life."""
        self.half_life_s, self.max_peers, self.max_nodes = half_life_s, max_peers, max_nodes

    # -- reading -------------------------------------------------------------------------
    def __len__(self) -> int:
        """The endpoints with at least one edge."""
        return len(self._peers)

    def __contains__(self, node: object) -> bool:
        return node in self._peers

    def edge_count(self) -> int:
        return sum(len(p) + (n in p) for n, p in self._peers.items()) // 2

    def edge(self, a: K, b: K) -> Edge | None:
        return self._peers.get(a, {}).get(b)

    def peers(self, node: K, now: float) -> dict[K, float]:
        """Bytes per second from ``node`` to each of its peers at ``now``."""
        h = self.half_life_s
        return {p: e.rate(now, h) for p, e in self._peers.get(node, {}).items()}

    def edges(self) -> Iterator[tuple[K, K, Edge]]:
        """Every edge once, its ends in ``pair``'s order."""
        for a, peers in self._peers.items():
            for b, edge in peers.items():
                if pair(a, b) == (a, b):
                    yield a, b, edge

    def nodes(self) -> Iterable[K]:
        return self._peers.keys()

    def adjacency(self) -> list[tuple[K, list[tuple[K, Edge]]]]:
        """Every endpoint with its peers' edges, copied (for ``rates`` in another
        thread: the lists do not change under it; an edge updated meanwhile is read
        before or after, either way close to right)."""
        return [(a, list(peers.items())) for a, peers in self._peers.items()]

    # -- writing -------------------------------------------------------------------------
    def add(self, a: K, b: K, nbytes: float, now: float, interval_s: float) -> bool:
        """``nbytes`` between ``a`` and ``b``, measured over the ``interval_s`` before
        ``now``. False when the bounds keep the new edge out."""
        edge = self.edge(a, b)
        h = self.half_life_s
        if edge is None:
            edge = Edge(float(nbytes), now, now - max(interval_s, 1e-3))
            if not self._room(a, b, edge.rate(now, h), now):
                self.refused += 1
                return False
            self._peers.setdefault(a, {})[b] = edge
            self._peers.setdefault(b, {})[a] = edge
            self._dropped.discard(pair(a, b))
            self.shape += 1
        else:
            edge.decayed_bytes = edge.bytes_at(now, h) + nbytes
            edge.at = max(edge.at, now)
        if self.track_changes:
            self._written.add(pair(a, b))
        return True

    def put(self, a: K, b: K, edge: Edge) -> None:
        """An edge as stored (a restart): no bounds checked, not marked written."""
        self._peers.setdefault(a, {})[b] = edge
        self._peers.setdefault(b, {})[a] = edge
        self.shape += 1

    def forget(self, node: K) -> None:
        """Drop ``node`` and its edges (a job that ended)."""
        for peer in list(self._peers.get(node, {})):
            self._drop(node, peer)

    def prune(self, now: float) -> None:
        """Forget edges decayed under ``LEAST_BYTES``; enforce the bounds (lowered ones
        too, after a reconfigure)."""
        h = self.half_life_s
        faded = [(a, b) for a, b, e in self.edges() if e.bytes_at(now, h) < LEAST_BYTES]
        for a, b in faded:
            self._drop(a, b)
        for node in list(self._peers):
            peers = self._peers.get(node, {})
            while len(peers) > self.max_peers:
                weakest = min(peers, key=lambda p: peers[p].rate(now, h))
                self._drop(node, weakest)
                self.evicted += 1
        if len(self._peers) > self.max_nodes:
            self._shrink(now, self.max_nodes)

    # -- the store's side ----------------------------------------------------------------
    def changes(self) -> tuple[list[tuple[K, K, float, float, float]], list[tuple[K, K]]]:
        """The edges written, as (a, b, decayed bytes, at, since) now, and the pairs
        dropped since the last call."""
        written = []
        peers = self._peers
        for a, b in self._written:
            edge = peers[a][b]  # (a dropped edge leaves ``_written``)
            written.append((a, b, edge.decayed_bytes, edge.at, edge.since))
        dropped = sorted(self._dropped)
        self._written, self._dropped = set(), set()
        return written, dropped

    def restore(self, written: Iterable[tuple[K, K]], dropped: Iterable[tuple[K, K]]) -> None:
        """``changes()`` that could not be stored: handed over again next time (an edge
        written since keeps its newer state; one added again since is not dropped)."""
        self._written.update(k for k in written if self.edge(*k) is not None)
        self._dropped.update(k for k in dropped if self.edge(*k) is None)

    # -- bounds --------------------------------------------------------------------------
    def _room(self, a: K, b: K, rate: float, now: float) -> bool:
        """Make room for a new edge of ``rate`` between ``a`` and ``b``: drop the weaker
        ends' weakest edges, or say it does not get in."""
        h = self.half_life_s
        victims: list[tuple[K, K]] = []
        for node in {a, b}:
            peers = self._peers.get(node, {})
            if len(peers) >= self.max_peers:
                weakest = min(peers, key=lambda p: peers[p].rate(now, h))
                if peers[weakest].rate(now, h) >= rate:
                    return False
                victims.append((node, weakest))
        for node, peer in victims:
            self._drop(node, peer)
            self.evicted += 1
        new = (a not in self._peers) + (b not in self._peers and b != a)
        if new and len(self._peers) + new > self.max_nodes:
            self._shrink(now, int(self.max_nodes * SHRINK_TO) - new, keep=(a, b))
        return True

    def _shrink(self, now: float, target: int, keep: tuple[K, ...] = ()) -> None:
        """Drop the weakest endpoints (least total rate) until ``target`` are left."""
        h = self.half_life_s
        strength = {
            n: sum(e.rate(now, h) for e in peers.values()) for n, peers in self._peers.items()
        }
        for node in sorted(strength, key=strength.__getitem__):
            if len(self._peers) <= max(target, 0):
                break
            if node in keep or node not in self._peers:
                continue
            self.evicted += len(self._peers[node])
            self.forget(node)

    def _drop(self, a: K, b: K) -> None:
        self.shape += 1
        for x, y in ((a, b), (b, a)):
            peers = self._peers.get(x)
            if peers is not None:
                peers.pop(y, None)
                if not peers:
                    del self._peers[x]
        key = pair(a, b)
        self._written.discard(key)
        if self.track_changes:
            self._dropped.add(key)


def rates(
    adjacency: list[tuple[K, list[tuple[K, Edge]]]], now: float, half_life_s: float
) -> dict[K, dict[K, float]]:
    """Bytes per second at ``now`` from each endpoint to each of its peers, both ways
    (``Edge.rate``, inlined: the view of the whole graph is made of this)."""
    k = LN2 / half_life_s
    window = half_life_s / LN2
    exp, expm1 = math.exp, math.expm1
    found: dict[K, dict[K, float]] = {a: {} for a, _ in adjacency}
    for a, peers in adjacency:
        mine = found[a]
        for b, e in peers:
            if b in mine:
                continue
            left = e.decayed_bytes * exp(-k * max(now - e.at, 0.0))
            rate = left / (window * -expm1(-k * max(now - e.since, 1e-3)))
            mine[b] = rate
            found[b][a] = rate
    return found
