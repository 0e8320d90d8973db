"""The instance registry and the cache tree it implies.

Each instance names its parent; the parent pointers form a forest (several independent trees
may coexist). Distance is the number of tree edges between two instances. Per-edge latency,
bandwidth and cost describe the link from a child to its parent; they are reported as
proximity but never change ordering, which always follows tree distance (the behaviour sheet
says so: clients rely on "nearest" meaning fewest hops).

A parent may register after its children, and a deregistered parent leaves its children as
roots of their own trees, so every walk up the tree stops at the first unregistered id and
guards against cycles (two instances naming each other as parent).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

TIERS = ("root", "branch", "leaf")
STATUSES = ("active", "inactive", "unverified")


@dataclass(frozen=True, slots=True)
class LinkMetrics:
    """The link between a child and its parent (or a path's totals)."""

    latency_ms: float = 1.0
    bandwidth_mbps: float = 10_000.0
    cost: float = 1.0


@dataclass(slots=True)
class Instance:
    """A registered cache instance. Mutable: heartbeats update it in place."""

    id: str
    address: str
    tier: str
    region: str | None = None
    parent_id: str | None = None
    max_size: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    registered_at: float = 0.0
    last_heartbeat: float | None = None
    hit_rate: float | None = None
    # a HAL node's read counters from its last heartbeat (``hal.cache.nodestats``); kept in
    # memory only: after a restart the next heartbeat brings them back
    hal_stats: dict[str, Any] | None = None
    healthy: bool = True
    # False after a control-plane restart until the instance proves it is alive again
    verified: bool = True

    def link(self, default: LinkMetrics) -> LinkMetrics:
        """The link to the parent: metadata ``linkLatencyMs``/``linkBandwidthMbps``/``linkCost``
        override the control plane's defaults per edge."""
        m = self.metadata
        return LinkMetrics(
            latency_ms=_number(m.get("linkLatencyMs"), default.latency_ms),
            bandwidth_mbps=_number(m.get("linkBandwidthMbps"), default.bandwidth_mbps),
            cost=_number(m.get("linkCost"), default.cost),
        )


def _number(value: object, default: float) -> float:
    # metadata is free-form: anything but a finite non-negative number means the default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return default
    try:
        number = float(value)
    except OverflowError:
        return default
    return number if math.isfinite(number) else default


class Registry:
    """Registered instances plus memoised ancestor chains (rebuilt when the registry changes)."""

    def __init__(
        self, default_link: LinkMetrics | None = None, local_bandwidth: float = 100_000.0
    ) -> None:
        self.instances: dict[str, Instance] = {}
        self.default_link = default_link or LinkMetrics()
        # bandwidth reported for an instance reading from itself (no network in between)
        self.local_bandwidth = local_bandwidth
        self._chains: dict[str, tuple[str, ...]] = {}
        self._children: dict[str, list[str]] | None = None

    # -- changes -------------------------------------------------------------------------

    def put(self, inst: Instance) -> None:
        self.instances[inst.id] = inst
        self._invalidate()

    def remove(self, instance_id: str) -> Instance | None:
        inst = self.instances.pop(instance_id, None)
        self._invalidate()
        return inst

    def _invalidate(self) -> None:
        self._chains.clear()
        self._children = None

    # -- tree walks ----------------------------------------------------------------------

    def chain(self, instance_id: str) -> tuple[str, ...]:
        """``instance_id`` followed by its registered ancestors, nearest first."""
        cached = self._chains.get(instance_id)
        if cached is not None:
            return cached
        out: list[str] = []
        seen: set[str] = set()
        cur: str | None = instance_id
        while cur is not None and cur in self.instances and cur not in seen:
            seen.add(cur)
            out.append(cur)
            cur = self.instances[cur].parent_id
        chain = tuple(out)
        self._chains[instance_id] = chain
        return chain

    def root_of(self, instance_id: str) -> str | None:
        chain = self.chain(instance_id)
        return chain[-1] if chain else None

    def children(self, instance_id: str) -> list[str]:
        if self._children is None:
            kids: dict[str, list[str]] = {}
            for inst in self.instances.values():
                pid = inst.parent_id
                if pid is not None and pid in self.instances and pid != inst.id:
                    kids.setdefault(pid, []).append(inst.id)
            for ids in kids.values():
                ids.sort()
            self._children = kids
        return self._children.get(instance_id, [])

    def path(self, src: str, dst: str) -> list[str] | None:
        """Instances from ``src`` to ``dst`` inclusive over the tree; None if disconnected."""
        up = self.chain(src)
        down = self.chain(dst)
        if not up or not down:
            return None
        pos = {iid: i for i, iid in enumerate(up)}
        for j, iid in enumerate(down):
            if iid in pos:
                return list(up[: pos[iid] + 1]) + list(reversed(down[:j]))
        return None

    def distances_from(self, src: str) -> dict[str, int]:
        """Hop counts from ``src`` to its ancestors (``src`` itself is 0)."""
        return {iid: i for i, iid in enumerate(self.chain(src))}

    def distance(self, src_chain: dict[str, int], dst: str) -> int | None:
        """Tree distance from the instance whose ``distances_from`` is ``src_chain``."""
        for j, iid in enumerate(self.chain(dst)):
            hops = src_chain.get(iid)
            if hops is not None:
                return hops + j
        return None

    def path_metrics(self, hops: list[str]) -> LinkMetrics:
        """Latency and cost add up along the path; bandwidth is the narrowest link."""
        if len(hops) <= 1:
            return LinkMetrics(0.0, self.local_bandwidth, 0.0)
        latency = cost = 0.0
        bandwidth = self.local_bandwidth
        for a, b in itertools.pairwise(hops):
            # the edge belongs to whichever end is the child
            child = a if self.instances[a].parent_id == b else b
            link = self.instances[child].link(self.default_link)
            latency += link.latency_ms
            cost += link.cost
            bandwidth = min(bandwidth, link.bandwidth_mbps)
        return LinkMetrics(latency, bandwidth, cost)

    def proximity(self, src: str, dst: str) -> LinkMetrics | None:
        hops = self.path(src, dst)
        return None if hops is None else self.path_metrics(hops)
