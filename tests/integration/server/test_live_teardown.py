"""A test's cluster (``LiveServer``) takes its agents' fork servers and jobs down with it:
an agent that stops leaves them running on purpose (a restarted agent re-adopts them),
which left every test's still-running jobs on the machine after the suite."""

from __future__ import annotations

import secrets
from pathlib import Path

import psutil

from hal.testing.live import LiveServer, wait_until


def _running(marker: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if marker in " ".join(p.info["cmdline"] or ())
    ]


def test_a_stopped_live_server_leaves_no_job_running(tmp_path: Path) -> None:
    seconds = f"{300 + secrets.randbelow(600)}.{secrets.randbelow(10**6)}"  # this test's own
    with LiveServer(tmp_path) as live, live.agents(1):
        done = live.cli("sbatch", "--wrap", f"sleep {seconds}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: bool(_running(f"sleep {seconds}")), message="the job to start")
    assert _running(f"sleep {seconds}") == []
