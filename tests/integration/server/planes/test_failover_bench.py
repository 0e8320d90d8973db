"""``hal bench failover`` end to end on PostgreSQL at a small size: three real servers, a
burst of batch submissions, the leader killed twice. It checks what the bench exists to
show — every acknowledged job in the database once, one takeover per kill — never how
fast: the figures are in docs/benchmarks.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.live
def test_every_acknowledged_job_survives_two_kills_once(pg_url: str) -> None:
    # (pg_url: skipped where PostgreSQL is not reachable; the bench makes its own database)
    bench = ["bench", "failover", "--jobs", "600", "--batch", "50", "--json"]
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
