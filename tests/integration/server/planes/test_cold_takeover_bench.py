"""``hal bench cold-takeover`` end to end on PostgreSQL: two real servers, the leader
killed twice. It checks that each round ended with the standby leading and that its time
is at least the restart delay it waited (the standby was just refused when the leader
died), never how fast it was: the figure is in docs/benchmarks-scale.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.live
def test_the_standby_leads_after_each_kill(pg_url: str) -> None:
    # (pg_url: skipped where PostgreSQL is not reachable; the bench makes its own database)
    bench = ["bench", "cold-takeover", "--rounds", "2", "--restart", "0.5", "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", *bench],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["rounds"] == 2 and len(report["takeover_s"]) == 2
    assert all(t >= 0.5 for t in report["takeover_s"]), report
    assert report["cpu"]
