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
from hal.observe.metrics import HalMetrics
from hal.state.cluster import Cluster

STATS: dict[str, Any] = {
    "prestage": {"staged": 3, "partial": 1, "failed": 0, "no_cache": 2},
    "bytes_staged": 5_000_000,
    "view_age_seconds": 1.5,
    "stale": False,
}


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
