"""A cache node's own ``GET /metrics`` (``hal cache node --metrics-listen HOST:PORT``).

The HAL server already publishes every node's read counters as of its last heartbeat
(``hal_cache_*``, with a ``[data]`` table); this is the node's own view, up to date at the
scrape and there without a HAL server (a cache tree run on its own):

======================================  =======  ==========================================
``hal_cache_hits_total``                counter  ``instance``, ``tier``
``hal_cache_misses_total``              counter  ``instance``, ``tier``, ``result`` (pulled,
                                                 not_found)
``hal_cache_bytes_served_total``        counter  ``instance``, ``tier``
``hal_cache_bytes_moved_total``         counter  ``instance``, ``tier``, ``source`` (parent,
                                                 peer)
``hal_cache_evictions_total``           counter  ``instance``, ``tier``
``hal_cache_node_expirations_total``    counter  ``instance``: keys dropped at their TTL
``hal_cache_node_keys``                 gauge    ``instance``
``hal_cache_node_memory_bytes``         gauge    ``instance``, ``state`` (used, max; max 0:
                                                 no maxmemory)
``hal_cache_node_clients``              gauge    ``instance``: connected clients
``hal_cache_node_events_buffered``      gauge    ``instance``: events not yet delivered to
                                                 the control plane
``hal_cache_node_control_plane_up``     gauge    ``instance``: 0 while the control plane is
                                                 unreachable
``process_*``                                    the node process (prometheus-client)
======================================  =======  ==========================================

Read on the node's event loop (``hal.observe.listener``), so a scrape sees whole batches.
Counters count from the node's start (``CONFIG RESETSTAT`` zeroes the read counters).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hal.observe.cachemetrics import cache_node_metrics

if TYPE_CHECKING:
    from hal.cache.node import CacheNode


class NodeCollector(Collector):
    def __init__(self, node: CacheNode) -> None:
        self.node = node

    def describe(self) -> Iterable[Metric]:
        return []  # collected at scrape time only

    def collect(self) -> Iterable[Metric]:
        node = self.node
        st, store = node.stats, node.store
        row = {
            "instance": node.id,
            "tier": node.settings.tier or "",
            "hits": st.hits,
            "misses": st.misses,
            "misses_not_found": st.not_found,
            "bytes_served": st.bytes_served,
            "bytes_moved": {"parent": st.bytes_parent, "peer": st.bytes_peer},
            "evictions": store.evicted_total,
        }
        yield from cache_node_metrics([row])
        key = [node.id]
        expired = CounterMetricFamily(
            "hal_cache_node_expirations",
            "Keys the node dropped at their TTL.",
            labels=["instance"],
        )
        expired.add_metric(key, store.expired_total)
        yield expired
        gauges = (
            ("hal_cache_node_keys", "Keys the node holds.", len(store)),
            ("hal_cache_node_clients", "Connected clients.", node.clients),
            (
                "hal_cache_node_events_buffered",
                "Events not yet delivered to the cache control plane.",
                len(node.reporter.buffer),
            ),
            (
                "hal_cache_node_control_plane_up",
                "1 while the cache control plane answers, 0 while it is unreachable.",
                0 if node.reporter.down else 1,
            ),
        )
        for name, text, value in gauges:
            gauge = GaugeMetricFamily(name, text, labels=["instance"])
            gauge.add_metric(key, value)
            yield gauge
        memory = GaugeMetricFamily(
            "hal_cache_node_memory_bytes",
            "Value bytes held (used) and the maxmemory limit (max; 0: none).",
            labels=["instance", "state"],
        )
        memory.add_metric([node.id, "used"], store.used)
        memory.add_metric([node.id, "max"], store.maxmemory)
        yield memory


def node_registry(node: CacheNode) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(NodeCollector(node))
    prometheus_client.ProcessCollector(registry=registry)
    return registry
