"""The pure half of the server's data plane link (``hal.server.data``): the scheduler's
``DataView`` from the cache control plane's JSON answers, and which (job, node) pairs a
pass's decisions ask to pre-stage. No I/O here."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hal.cache.nodestats import SOURCES
from hal.core.data import CacheTree, DataView, Link
from hal.scheduler.framework.scheduler import PassResult

# Reservations further out than this are not staged yet: a leaf's space goes to data needed
# soon, and the next backfill pass (every bf_interval) stages them once they come closer.
PRESTAGE_HORIZON_S = 3600.0


# -- reading the control plane's answers (pure) -----------------------------------------------


def tree_from_topology(body: Mapping[str, Any]) -> CacheTree:
    """``GET /v1/topology`` → the tree: every node, and each parent-child edge's
    proximity as the child's uplink (missing metrics take ``Link``'s defaults)."""
    parent: dict[str, str | None] = {}
    for node in body.get("nodes", ()):
        if isinstance(node, Mapping) and isinstance(node.get("id"), str):
            parent[node["id"]] = None
    uplink: dict[str, Link] = {}
    default = Link()
    for edge in body.get("edges", ()):
        if not isinstance(edge, Mapping) or edge.get("relationship") != "parent-child":
            continue
        up, down = edge.get("from"), edge.get("to")
        if not isinstance(up, str) or not isinstance(down, str) or down not in parent:
            continue
        parent[down] = up
        prox = edge.get("proximity") or {}
        uplink[down] = Link(
            latency_ms=_number(prox.get("latencyMs"), default.latency_ms),
            bandwidth_mbps=_number(prox.get("bandwidthMbps"), default.bandwidth_mbps),
            cost=_number(prox.get("cost"), default.cost),
        )
    return CacheTree(parent=parent, uplink=uplink)


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


def inactive_from_topology(body: Mapping[str, Any]) -> frozenset[str]:
    """``GET /v1/topology`` → the instances the control plane calls ``inactive`` (silent
    past its window, or reporting themselves unhealthy): their copies cannot be read."""
    return frozenset(
        node["id"]
        for node in body.get("nodes", ())
        if isinstance(node, Mapping)
        and isinstance(node.get("id"), str)
        and node.get("status") == "inactive"
    )


def holders_from_locate(body: Mapping[str, Any]) -> dict[str, int]:
    """``GET /v1/content/locate/{key}`` → instance → size in bytes."""
    out: dict[str, int] = {}
    for item in body.get("instances", ()):
        if isinstance(item, Mapping) and isinstance(item.get("instanceId"), str):
            size = item.get("size")
            out[item["instanceId"]] = size if isinstance(size, int) and size >= 0 else 0
    return out


def cache_stats_from_instances(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``GET /v1/instances`` → each HAL cache node's read counters (its heartbeat's
    ``halStats``, ``hal.cache.nodestats``), by instance id; instances without them (not a
    HAL node, or no heartbeat since the control plane started) are left out."""
    out = []
    for item in body.get("instances", ()):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            continue
        raw = item.get("halStats")
        if not isinstance(raw, Mapping):
            continue
        hits, misses = _count(raw.get("hits")), _count(raw.get("misses"))
        out.append(
            {
                "instance": item["id"],
                "tier": str(item.get("tier", "")),
                "status": str(item.get("status", "")),
                "hits": hits,
                "misses": misses,
                "misses_not_found": _count(raw.get("missesNotFound")),
                "hit_ratio": round(hits / (hits + misses), 4) if hits + misses else None,
                "bytes_served": _count(raw.get("bytesServed")),
                "pulls": _by_source(raw.get("pulls")),
                "bytes_moved": _by_source(raw.get("bytesPulled")),
                "evictions": _count(raw.get("evictions")),
                "expirations": _count(raw.get("expirations")),
            }
        )
    return sorted(out, key=lambda c: c["instance"])


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _by_source(value: Any) -> dict[str, int]:
    got = value if isinstance(value, Mapping) else {}
    return {source: _count(got.get(source)) for source in SOURCES}


def node_caches(
    configured: Mapping[str, str], nodes: Iterable[str], tree: CacheTree
) -> dict[str, str]:
    """HAL node → the leaf instance it reads through: ``[data.node_cache]`` first, else
    the registered instance whose id is the node's name."""
    out = dict(configured)
    for name in nodes:
        if name not in out and name in tree.parent:
            out[name] = name
    return out


def build_view(
    tree: CacheTree,
    holders: Mapping[str, Mapping[str, int]],
    configured: Mapping[str, str],
    nodes: Iterable[str],
    *,
    peer_sourcing: bool = False,
    inactive: Container[str] = frozenset(),
) -> DataView:
    """The scheduler's ``DataView`` from what the control plane said. Copies on instances
    the topology does not know (deregistered since) or calls ``inactive`` (a dead cache
    process) are left out: nothing can read them."""
    known = tree.parent
    kept = {
        key: {
            iid: size
            for iid, size in copies.items()
            if (not known or iid in known) and iid not in inactive
        }
        for key, copies in holders.items()
    }
    return DataView(
        tree=tree,
        holders=kept,
        node_cache=node_caches(configured, nodes, tree),
        peer_sourcing=peer_sourcing,
    )


# -- what to stage after a pass (pure) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageTarget:
    """Pull ``job_id``'s inputs into ``node``'s leaf cache (``start``: the planned start
    of a reservation, None for a placement that starts now)."""

    job_id: int
    node: str
    start: float | None = None


def stage_targets(
    result: PassResult,
    now: float,
    with_inputs: Container[int] | None = None,
) -> list[StageTarget]:
    """Every (job, node) of the pass's placements, and of its backfill reservations that
    start within ``PRESTAGE_HORIZON_S`` of ``now``; only jobs in ``with_inputs`` when given (the
    pass result carries ids only: the ids of pending jobs that name inputs)."""
    out = [
        StageTarget(p.job_id, node)
        for p in result.plan.placements
        if with_inputs is None or p.job_id in with_inputs
        for node in dict.fromkeys(p.allocation.nodes)
    ]
    for job_id, (start, _end, allocation) in result.reservations.items():
        if start - now <= PRESTAGE_HORIZON_S and (with_inputs is None or job_id in with_inputs):
            out.extend(StageTarget(job_id, node, start) for node in dict.fromkeys(allocation.nodes))
    return out
