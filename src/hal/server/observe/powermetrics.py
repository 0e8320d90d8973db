"""The ``hal_power_nodes`` series: the owned nodes in each power phase (``[power]``,
``hal.core.power``), read from the nodes' records at each scrape; nothing without
``[power]``."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from hal.core.power import power_counts
from hal.state.cluster import Cluster


def power_metrics(cluster: Cluster) -> Iterable[Metric]:
    if not cluster.config.power.enabled:
        return
    nodes = GaugeMetricFamily(
        "hal_power_nodes",
        "Owned nodes by power phase (power_down: requested, jobs still on it; "
        "powering_down, powered_down, powering_up).",
        labels=["state"],
    )
    for phase, count in power_counts(cluster.nodes.values()).items():
        nodes.add_metric([phase.value.lower()], count)
    yield nodes
