"""The ``hal_harmonic_*`` series: the bytes running jobs exchanged by how far apart their
nodes are, and the size of the traffic graph (``hal.server.traffic``). Read from
``HarmonicStats`` at each scrape; since the server started."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# how far apart two nodes are: the same node, under one leaf switch (or rack), across
# leaves, across sites (``hal.server.traffic.distance``)
DISTANCES = ("node", "leaf", "switch", "site")
# why a measured connection made no edge: several jobs claimed its far end; no job did
# in time (a peer outside HAL, or not measured); the index or the waiting list was full
UNMATCHED = ("ambiguous", "unresolved", "overflow")


@dataclass(frozen=True, slots=True)
class HarmonicStats:
    bytes_by_distance: Mapping[str, int] = field(default_factory=dict)
    unmatched: Mapping[str, int] = field(default_factory=dict)
    identities: int = 0
    identity_edges: int = 0
    job_edges: int = 0


def harmonic_metrics(stats: HarmonicStats | None) -> Iterable[Metric]:
    if stats is None:
        return
    moved = CounterMetricFamily(
        "hal_harmonic_bytes",
        "Bytes sent between running jobs, by the distance between their nodes (node: the "
        "same node, leaf: one leaf switch or rack, switch: across leaves, site: across sites).",
        labels=["distance"],
    )
    for distance in DISTANCES:
        moved.add_metric([distance], stats.bytes_by_distance.get(distance, 0))
    yield moved
    unmatched = CounterMetricFamily(
        "hal_harmonic_flows_unmatched",
        "Measured connections that made no edge: ambiguous (several jobs claimed the far "
        "end), unresolved (none did: a peer outside HAL), overflow (bounds reached).",
        labels=["reason"],
    )
    for reason in UNMATCHED:
        unmatched.add_metric([reason], stats.unmatched.get(reason, 0))
    yield unmatched
    edges = GaugeMetricFamily(
        "hal_harmonic_edges",
        "Edges of the traffic graph: between workload identities, and between running jobs.",
        labels=["graph"],
    )
    edges.add_metric(["identity"], stats.identity_edges)
    edges.add_metric(["job"], stats.job_edges)
    yield edges
    identities = GaugeMetricFamily(
        "hal_harmonic_identities", "Workload identities with at least one edge in the graph."
    )
    identities.add_metric([], stats.identities)
    yield identities
