"""The ``hal_cache_*`` read counters of HAL cache nodes, as Prometheus metric families.

One shape, two publishers: the HAL server (every node, as of its last heartbeat to the
cache control plane) and a cache node's own listener (``hal cache node
--metrics-listen``: that node, as of the scrape). Imports prometheus-client only, so a
cache node process does not load the server's planes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric


def cache_node_metrics(caches: Iterable[Mapping[str, Any]]) -> Iterable[Metric]:
    """Each cache node's reads, one row per node in the shape
    ``hal.server.data_view.cache_stats_from_instances`` gives them. Labels: ``instance`` (the cache
    instance id; as bounded as the node label) and ``tier``. A node's restart starts its
    counters from 0 again, which Prometheus' ``rate()`` reads as a counter reset."""
    labels = ["instance", "tier"]
    hits = CounterMetricFamily(
        "hal_cache_hits", "Reads a cache node answered from its own copy.", labels=labels
    )
    misses = CounterMetricFamily(
        "hal_cache_misses",
        "Reads a cache node did not hold, by result (pulled: a copy came from upstream; "
        "not_found: nil).",
        labels=[*labels, "result"],
    )
    served = CounterMetricFamily(
        "hal_cache_bytes_served",
        "Value bytes a cache node sent to clients and to other cache nodes.",
        labels=labels,
    )
    moved = CounterMetricFamily(
        "hal_cache_bytes_moved",
        "Value bytes a cache node pulled in on misses, by source (parent chain or peer).",
        labels=[*labels, "source"],
    )
    evictions = CounterMetricFamily(
        "hal_cache_evictions",
        "Keys a cache node dropped for memory (maxmemory policy).",
        labels=labels,
    )
    for c in caches:
        key = [c["instance"], c["tier"]]
        hits.add_metric(key, c["hits"])
        lost = c["misses_not_found"]
        misses.add_metric([*key, "pulled"], max(0, c["misses"] - lost))
        misses.add_metric([*key, "not_found"], lost)
        served.add_metric(key, c["bytes_served"])
        for source, n in sorted(c["bytes_moved"].items()):
            moved.add_metric([*key, source], n)
        evictions.add_metric(key, c["evictions"])
    yield from (hits, misses, served, moved, evictions)
