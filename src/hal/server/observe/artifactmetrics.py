"""The ``hal_artifact_*`` series: what the artifact registry holds (versions, names and
the bytes of their content in the database) and, since the server started, the versions
published and the downloads and bytes served to agents and to users. Read from
``hal.state.artifacts.Registry`` at each scrape."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hal.state.artifacts import Registry

TO = ("agent", "user")


def artifact_metrics(registry: Registry | None) -> Iterable[Metric]:
    if registry is None:
        return
    versions = registry.index.values()
    for name, text, value in (
        ("versions", "Artifact versions published.", len(versions)),
        ("names", "Artifact names with a version.", len({a.name for a in versions})),
        (
            "stored_bytes",
            "Bytes of artifact content in the state store (each content once).",
            registry.stored_bytes(),
        ),
    ):
        gauge = GaugeMetricFamily(f"hal_artifact_{name}", text)
        gauge.add_metric([], value)
        yield gauge
    published = CounterMetricFamily(
        "hal_artifact_published", "Artifact versions published since the server started."
    )
    published.add_metric([], registry.published)
    yield published
    for name, text, counts in (
        (
            "downloads",
            "Artifact downloads since the server started, to agents (a node's copy) or users.",
            registry.downloads,
        ),
        (
            "served_bytes",
            "Bytes of artifact content sent since the server started, to agents or users.",
            registry.served_bytes,
        ),
    ):
        counter = CounterMetricFamily(f"hal_artifact_{name}", text, labels=["to"])
        for to in TO:
            counter.add_metric([to], counts[to])
        yield counter
