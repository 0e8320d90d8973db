"""``hal bench failover`` end to end on PostgreSQL at a small size: three real servers, a
burst of batch submissions, every fifth job run on emulated nodes, the leader killed
twice, on a fair-share history of 300 finished runs. It checks what the bench exists to
show — every acknowledged job in the database once, one takeover per kill with the new
leader's account of its steps — never how fast: the figures are in docs/benchmarks-scale.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.live
def test_every_acknowledged_job_survives_two_kills_once(pg_url: str) -> None:
    # (pg_url: skipped where PostgreSQL is not reachable; the bench makes its own database)
    bench = ["bench", "failover", "--jobs", "600", "--batch", "50", "--nodes", "10"]
    bench += ["--history", "300", "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", *bench],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert (report["acknowledged"], report["lost"], report["duplicated"]) == (600, 0, 0)
    assert len(report["takeover_s"]) == report["kills"] == 2
    assert report["running_at_end"] > 0  # the hour-long jobs, on the emulated nodes
    for steps in report["takeover_steps"]:
        assert steps is not None
        assert {"granted_to_lead", "load_jobs", "cluster", "priority", "traffic"} <= set(steps)
        assert 0 <= steps["jobs_read_ahead"] <= steps["jobs"] <= 600
        # the fair share's history: the 300 runs written before, and the bench's own ended
        assert 300 <= steps["runs"] <= 900
        assert 0 <= steps["runs_read_ahead"] <= steps["runs"]
