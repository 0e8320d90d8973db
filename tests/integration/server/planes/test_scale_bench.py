"""``hal bench scale`` at a tiny size, end to end: a real server on PostgreSQL, emulated
nodes in two processes, a queue behind a down partition opened for the window. It checks
that the report is whole and its counts are the run's, never how fast anything was: the
figures and the goals are in docs/benchmarks-scale.md. Slow: CI and HAL_SLOW=1 only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

NODES, JOBS = 20, 300
BENCH = ["bench", "scale", "--nodes", str(NODES), "--jobs", str(JOBS), "--cpus", "4"]
BENCH += ["--runtime", "2", "--idle", "2", "--measure", "5", "--samples", "2"]


@pytest.mark.slow
@pytest.mark.live
def test_the_scale_bench_reports_a_whole_run(pg_url: str) -> None:
    # (pg_url: skipped where PostgreSQL is not reachable; the bench makes its own database)
    run = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", *BENCH, "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["nodes"] == NODES and report["queued_jobs"] == JOBS
    assert report["emulator_processes"] == 2  # the nodes' and the probes'
    assert report["cpu_model"]
    # every job submitted (and each probe) is in sacct; the list saw the queue
    assert report["sacct_rows"] >= JOBS + 1
    assert 0 < report["rest_list_jobs"] <= JOBS + 1
    assert report["starts_per_s"] > 0 and report["server_rss_mib"] > 0
    assert report["database_mib"] > 0  # (heartbeats: too few in 2 s to read a CPU tick)
    # the emulators registered their nodes and ran the jobs: their CPU is counted
    assert report["emulator_register_cpu_ms"] > 0 and report["emulator_cpu_share"] > 0
    assert report["emulator_cpu_ms_per_start"] > 0
    # (an emulator gone in the window would make it negative: its CPU then counts 0)
    assert isinstance(report["emulator_heartbeat_cpu_ms"], float | int)
    assert report["emulator_heartbeat_cpu_ms"] >= 0
    # a cycle is its pass and the forecast slice after it: neither outlasts the longest
    assert report["max_pass_s"] <= report["max_cycle_s"]
    assert report["passes"] >= 1
    assert (
        report["passes_over_2s"] == 0
        if report["max_pass_s"] <= 2.048
        else 1 <= report["passes_over_2s"] <= report["passes"]
    )
    assert report["max_forecast_slice_s"] <= report["max_cycle_s"]
    # what the longest pass was made of: its own time, parts within it
    longest = report["max_pass_breakdown"]
    assert longest["pass_s"] == pytest.approx(report["max_pass_s"], abs=0.002)
    assert longest["wait_s"] + longest["cpu_s"] <= longest["pass_s"] + 0.002
    assert longest["pending"] >= longest["placed"] and longest["opened_s"] >= 0
    # (this size never reaches max_job_starts: test_backfill_turn counts the turns)
    assert {"passes_capped", "passes_capped_backfilled", "backfill_cycles"} <= report.keys()
    # the loop's lag: its p99, read from the histogram's buckets over the window, lies
    # within the bucket of the longest (buckets ×2 from 1 ms)
    lag_max, lag_p99 = report["event_loop_lag_max_s"], report["event_loop_lag_p99_s"]
    assert 0 <= lag_p99 <= 2 * lag_max + 0.002
    for key in ("squeue", "rest_list", "submit_to_start"):
        assert 0 < report[f"{key}_p50_s"] <= report[f"{key}_p99_s"]
