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


def test_stopping_a_server_that_stopped_by_itself_is_quiet(tmp_path: Path) -> None:
    """A server may stop on its own (fenced off its database, say) and close its event
    loop before the test's teardown asks it to stop; that teardown must not fail."""
    live = LiveServer(tmp_path)
    live.start()
    assert live._loop is not None and live._stop is not None and live._thread is not None
    live._loop.call_soon_threadsafe(live._stop.set)  # as if the server ended its serve()
    live._thread.join(20)
    assert live._loop.is_closed()
    live.stop()
