"""``hal bench harmonic --live`` at a tiny size, end to end: a real control plane and 4
agents, a service and 2 clients per round that talk TCP, plugin off and on. It checks the
report's shape and that its bytes were measured (the agents' counters through the
control plane's ``hal_harmonic_bytes_total``), never how fast anything was: the figures
and the goal are in docs/benchmarks.md. Slow: CI and HAL_SLOW=1 only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CLIENTS, MiB = 2, 1 << 20
BENCH = ("bench", "harmonic", "--live", "--live-clients", str(CLIENTS), "--pass-repeats", "0")


@pytest.mark.slow
@pytest.mark.live
def test_the_live_harmonic_bench_reports_measured_bytes_and_waits_for_both_modes() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", *BENCH, "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert "sim" not in report and "pass_overhead_pct" not in report  # --live alone
    live = report["live"]
    assert live["cpu_model"]
    assert set(live["cross_leaf_bytes"]) == set(live["mean_wait_s"]) == {"on", "off"}
    for mode in ("on", "off"):
        run_of = live["runs"][mode]
        assert set(run_of["bytes_by_distance"]) <= {"node", "leaf", "switch", "site"}
        assert sum(run_of["bytes_by_distance"].values()) == run_of["bytes_counted"]
        # each client's 4 MiB and their echo, counted by the side that sent them
        assert run_of["bytes_exchanged"] == 2 * CLIENTS * 4 * MiB
        assert run_of["bytes_counted"] > 0
        assert live["mean_wait_s"][mode] >= 0
        assert len(run_of["round2_nodes"]) == CLIENTS
    assert live["runs"]["off"]["weight"] == 0 and live["runs"]["on"]["weight"] > 0
    # best fit alone sends the clients to the fuller leaf, away from the service
    assert live["cross_leaf_bytes"]["off"] > 0
