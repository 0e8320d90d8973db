"""``hal_data_*``: the data service's pre-staging counts, bytes staged and view age on
``/metrics`` — absent without a ``[data]`` table, accepted by promtool with one."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hal.core.clock import VirtualClock
from hal.server.observe.metrics import HalMetrics
from hal.state.cluster import Cluster

STATS: dict[str, Any] = {
    "prestage": {"staged": 3, "partial": 1, "failed": 0, "no_cache": 2},
    "bytes_staged": 5_000_000,
    "view_age_seconds": 1.5,
    "stale": False,
    "caches": [
        {"instance": "leaf-a", "tier": "leaf", "status": "active", "hits": 9, "misses": 4,
         "misses_not_found": 1, "hit_ratio": 0.6923, "bytes_served": 900,
         "pulls": {"parent": 2, "peer": 1}, "bytes_moved": {"parent": 2000, "peer": 500},
         "evictions": 3, "expirations": 0},
        {"instance": "root", "tier": "root", "status": "active", "hits": 2, "misses": 0,
         "misses_not_found": 0, "hit_ratio": 1.0, "bytes_served": 2000,
         "pulls": {"parent": 0, "peer": 0}, "bytes_moved": {"parent": 0, "peer": 0},
         "evictions": 0, "expirations": 0},
    ],
}  # fmt: skip


def exported(m: HalMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_no_data_series_without_a_data_plane(cluster: Cluster, clock: VirtualClock) -> None:
    names = {name for name, _ in exported(HalMetrics(cluster, clock))}
    assert not [n for n in names if n.startswith("hal_data_")]


def test_the_data_service_counters_are_exported(cluster: Cluster, clock: VirtualClock) -> None:
    m = HalMetrics(cluster, clock)
    m.data_stats = lambda: STATS
    got = exported(m)
    assert got[("hal_data_prestage_total", (("result", "staged"),))] == 3
    assert got[("hal_data_prestage_total", (("result", "no_cache"),))] == 2
    assert got[("hal_data_bytes_staged_total", ())] == 5_000_000
    assert got[("hal_data_view_age_seconds", ())] == 1.5


def test_each_cache_nodes_hits_misses_and_bytes_moved_are_exported(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = HalMetrics(cluster, clock)
    m.data_stats = lambda: STATS
    got = exported(m)
    leaf = (("instance", "leaf-a"), ("tier", "leaf"))

    def lab(**more: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({"instance": "leaf-a", "tier": "leaf", **more}.items()))

    assert got[("hal_cache_hits_total", leaf)] == 9
    assert got[("hal_cache_misses_total", lab(result="not_found"))] == 1
    assert got[("hal_cache_misses_total", lab(result="pulled"))] == 3
    assert got[("hal_cache_bytes_moved_total", lab(source="parent"))] == 2000
    assert got[("hal_cache_bytes_moved_total", lab(source="peer"))] == 500
    assert got[("hal_cache_bytes_served_total", leaf)] == 900
    assert got[("hal_cache_evictions_total", leaf)] == 3
    assert got[("hal_cache_hits_total", (("instance", "root"), ("tier", "root")))] == 2


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package 'prometheus')")  # fmt: skip
def test_the_exposition_with_data_metrics_passes_promtool(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = HalMetrics(cluster, clock)
    m.data_stats = lambda: STATS
    done = subprocess.run(["promtool", "check", "metrics"], input=generate_latest(m.registry),
                          capture_output=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
