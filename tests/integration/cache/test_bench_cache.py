"""``hal bench cache --quick --json`` end to end: the benchmark the issue's targets are
measured with starts its control plane, node and redis-server, and reports every figure.

It asserts the report's shape, never its numbers (tests do not judge wall time; the
figures and their targets are in docs/benchmarks.md). Slow: CI and HAL_SLOW=1 only."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.live
@pytest.mark.skipif(
    shutil.which("redis-benchmark") is None, reason="redis-benchmark is not installed"
)
def test_the_cache_benchmark_reports_every_target_of_the_issue() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "hal.cli.cache", "bench", "cache", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["instances"] == 50
    assert report["batch_ingest"]["events_per_s"] > 0
    assert report["single_events"]["concurrent_16_per_s"] > 0
    assert report["single_events"]["sequential_per_s"] > 0
    assert 0 < report["nearest"]["p50_ms"] <= report["nearest"]["p95_ms"]
    for mode in ("no_pipeline", "pipeline_16"):
        hits = report["get_hits"][mode]
        assert hits["node_rps"] > 0 and hits["redis_server_rps"] > 0
        assert hits["ratio"] == pytest.approx(hits["node_rps"] / hits["redis_server_rps"], 0.01)
    assert set(report["targets"]) == {
        "batch_ingest_ge_5000_per_s",
        "single_events_ge_1000_per_s",
        "nearest_p95_le_5ms",
        "get_no_pipeline_ge_50pct",
        "get_pipeline_ge_50pct",
    }
