"""``hal bench soak`` at a small size and for one minute: three servers, three emulators,
every kind of chaos once or twice (the database's sessions cut rather than PostgreSQL
restarted: the machine's PostgreSQL is shared). It checks what the soak exists to show —
its invariants hold, one takeover per kill — never how fast."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.live
def test_a_one_minute_soak_keeps_its_invariants(pg_url: str) -> None:
    # (pg_url: skipped where PostgreSQL is not reachable; the bench makes its own database)
    soak = ["bench", "soak", "--minutes", "1", "--nodes", "12", "--emulators", "3"]
    run = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", *soak, "--no-agent", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["invariants"]["ok"], report["invariants"]
    assert report["acknowledged"] > 0 and report["lost"] == report["duplicated"] == 0
    assert len(report["takeover_s"]) == 2
    events = [e["event"] for e in report["chaos"]]
    assert events.count("nodes_dropped") == 3 and "database_restarted" in events
