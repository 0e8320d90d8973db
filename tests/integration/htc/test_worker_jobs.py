"""How many worker jobs a session uses, and where they run: short leases, tasks that
kill their process, ``max_workers``, a missing ``workdir``. A real control plane,
agents and broker; jobs are counted through the REST API as a user would."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hal import htc
from hal.htc import HtcClient
from hal.htc import client as client_module
from hal.htc.client import default_pythonpath
from hal.htc.examples import EXECUTABLE
from hal.testing.live import LiveServer

ALIVE = ("PENDING", "RUNNING", "COMPLETING")


def jobs_ever(server: LiveServer, session_id: str) -> int:
    with server.client() as c:
        return len(c.jobs(names=[f"htc-{session_id}"], history=True))


@contextmanager
def most_jobs_at_once(server: LiveServer, session_id: str) -> Iterator[list[int]]:
    """Samples the session's live worker jobs while the block runs; yields a list that
    holds the most seen at once when the block ends."""
    most = [0]
    stop = threading.Event()

    def sample() -> None:
        with server.client() as c:
            while not stop.is_set():
                alive = [j for j in c.jobs(names=[f"htc-{session_id}"]) if j.state in ALIVE]
                most[0] = max(most[0], len(alive))
                stop.wait(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield most
    finally:
        stop.set()
        thread.join(30)


SLOW_TO_LOAD = """
import time
time.sleep(0.5)  # a service that takes a while to load: each start costs 0.5 s at least


def sleep_ms(ms):
    time.sleep(ms / 1000)
    return ms
"""


def test_a_short_lease_recycles_few_jobs_and_never_holds_more_than_max_workers(
    hc: HtcClient, server: LiveServer, tmp_path: Path
) -> None:
    """A 1 s lease: every worker job ended after a second and a replacement was launched
    as it began to drain: 28 jobs for 3,000 tasks of 10 ms on 2 workers, up to 4 of them
    at once with ``max_workers=2``. A worker now serves ten times its start-up (here at
    least 0.5 s) before it is recycled, and its replacement waits for its job's end."""
    (tmp_path / "slowload.py").write_text(SLOW_TO_LOAD)
    path = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{default_pythonpath()}"}
    s = hc.open_session("slowload:sleep_ms", max_workers=2, worker_lease=1, environment=path)
    with s, most_jobs_at_once(server, s.id) as most:
        started = time.monotonic()
        assert list(s.map([10] * 2000)) == [10] * 2000
        elapsed = time.monotonic() - started
    assert most[0] <= 2
    # each of the 2 workers recycled at most once per 5 s served (it was once a second)
    assert jobs_ever(server, s.id) <= 2 + 2 * int(elapsed / 5), elapsed


def test_tasks_that_kill_their_process_cost_no_worker_job(
    hc: HtcClient, server: LiveServer
) -> None:
    """Each task ``os._exit``s its worker: it was failed as poison after killing 3 worker
    jobs (16 jobs for 4 such tasks on 2 workers). The job starts a new process instead;
    the error says how the last one ended."""
    with hc.open_session("hal.htc.examples:crash_on", max_workers=1) as s:
        calls = [(x, x) for x in range(3)] + [(x, -1) for x in range(3, 10)]
        out = list(s.map(calls, star=True, return_exceptions=True))
    assert out[3:] == list(range(3, 10))
    for poison in out[:3]:
        assert isinstance(poison, htc.PoisonTask)
        assert "running alone on 3 workers that died" in str(poison)
        assert "exited with status 13)" in str(poison)
    assert hc.session(s.id).worker_deaths >= 9
    assert jobs_ever(server, s.id) == 1


def test_a_request_that_kills_the_executable_costs_no_worker_job(
    hc: HtcClient, server: LiveServer
) -> None:
    with hc.open_session(EXECUTABLE, max_workers=1, max_worker_deaths=2) as s:
        out = list(s.map([b"a", b"crash", b"b"], return_exceptions=True))
    assert out[0::2] == [b"A", b"B"] and isinstance(out[1], htc.PoisonTask)
    assert "exited with status 7 while running a task" in str(out[1])
    assert jobs_ever(server, s.id) == 1


def test_a_workdir_missing_on_the_nodes_fails_the_session_saying_so(
    hc: HtcClient, server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client on a host that has the directory passes its own check (here: none); the
    workers' node lacks it. Their jobs ran in /tmp, and the service with them, without a
    word; each worker now fails to start, and the third fails the session."""
    monkeypatch.setattr(client_module, "check_workdir", lambda path: None)
    s = hc.open_session("os:getcwd", max_workers=1, workdir="/nonexistent/htc")
    with s, pytest.raises(htc.SessionEnded, match="FAILED") as err:
        s.submit().result(60)
    assert "the session's workdir /nonexistent/htc cannot be entered on " in err.value.reason
    assert "No such file or directory; create it there" in err.value.reason
