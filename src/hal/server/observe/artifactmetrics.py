"""The ``hal_artifact_*`` series: what the artifact registry holds (versions, names and
the bytes of their content in the database, aliases running a canary) and, since the
server started, the versions published, the downloads and bytes served to agents and to
users, and the aliases rolled back. Read from
``hal.state.artifacts.Registry`` at each scrape."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hal.state.artifacts import Registry

TO = ("agent", "user", "cache")


def artifact_metrics(registry: Registry | None) -> Iterable[Metric]:
    if registry is None:
        return
    versions = registry.index.values()
    for name, text, value in (
        ("versions", "Artifact versions published.", len(versions)),
        ("names", "Artifact names with a version.", len({a.name for a in versions})),
        (
            "canaries",
            "Artifact aliases with a canary running.",
            sum(1 for a in registry.aliases.by_key.values() if a.canary),
        ),
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
    rollbacks = CounterMetricFamily(
        "hal_artifact_rollbacks",
        "Artifact aliases rolled back since the server started: a failing canary "
        "(automatic) or hal artifact rollback (by_hand).",
        labels=["how"],
    )
    for how in ("automatic", "by_hand"):
        rollbacks.add_metric([how], registry.aliases.rollbacks[how])
    yield rollbacks
    for name, text, counts in (
        (
            "downloads",
            "Artifact downloads since the server started, to agents (a node's copy), users or "
            "a cache tree's root (docs/admin/cache.md).",
            registry.downloads,
        ),
        (
            "served_bytes",
            "Bytes of artifact content sent since the server started, to agents, users or a "
            "cache tree's root.",
            registry.served_bytes,
        ),
    ):
        counter = CounterMetricFamily(f"hal_artifact_{name}", text, labels=["to"])
        for to in TO:
            counter.add_metric([to], counts[to])
        yield counter
