"""Failover between `hal server` processes on one PostgreSQL database (docs/admin/
failover.md): a standby answers at once, sends clients to the leader and applies no
write; it leads within seconds of the leader's kill -9; a leader that was stopped (or
cut off) and comes back is fenced — it writes nothing and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from hal.server.users import ensure_user
from hal.state.server_lock import ADVISORY_KEY
from hal.state.store import SqlStateStore
from hal.testing import http
from hal.testing.live import free_port, wait_until

pytestmark = pytest.mark.live  # starts `hal server` processes


class Server:
    """One `hal server` process on the test's database, its output in a file."""

    def __init__(self, db: str, work: Path, name: str, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / f"{name}.log"
        args = ["server", "--db", db, "--data-dir", str(work / name), "--port", str(self.port)]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hal.cli.main", *args, *extra], stdout=out, stderr=out
            )

    def ha(self) -> dict[str, object] | None:
        """``GET /v1/ha``, or None while it does not answer."""
        try:
            return dict(http.get(self.url + "/v1/ha", timeout=1).json())
        except httpx.HTTPError:
            return None

    def wait_role(self, role: str, within: float = 45) -> dict[str, object]:
        def there() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            found = self.ha()
            return found is not None and found["role"] == role

        wait_until(there, within, message=f"{self.url} to be {role}")
        found = self.ha()
        assert found is not None
        return found

    def end(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def servers(pg_url: str, tmp_path: Path) -> Iterator[list[Server]]:
    """What the test started, killed at its end."""
    started: list[Server] = []
    yield started
    for server in started:
        if server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGCONT)  # (a test may leave one stopped)
        server.end()


def pair(db: str, work: Path, servers: list[Server]) -> tuple[Server, Server]:
    """Two servers started at once on ``db`` (a start costs seconds): the leader, then
    the standby."""
    servers += [Server(db, work, "a"), Server(db, work, "b")]

    def settled() -> bool:
        for server in servers:
            assert server.proc.poll() is None, server.log.read_text()
        return sorted(str((s.ha() or {}).get("role")) for s in servers) == ["leader", "standby"]

    wait_until(settled, 60, message="one leader and one standby")
    first, second = servers
    return (first, second) if (first.ha() or {})["role"] == "leader" else (second, first)


def admin_token(db: str) -> dict[str, str]:
    store = SqlStateStore(db)
    try:
        token = ensure_user(store, "alice", admin=True, now=time.time())
    finally:
        store.close()
    assert token is not None
    return {"Authorization": f"Bearer {token}"}


def job(name: str) -> dict[str, object]:
    return {"script": "#!/bin/sh\ntrue\n", "name": name, "hold": True}


def job_names(db: str) -> list[str]:
    with psycopg.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM jobs ORDER BY id")]


def test_a_standby_leads_within_10_s_of_the_leaders_kill_9_with_every_job_once(
    pg_url: str, tmp_path: Path, servers: list[Server]
) -> None:
    """Two head nodes on one database. The standby answers at once: its role, the
    leader's address, a 307 to the leader for a read and for a write, which it never
    applies. The leader is killed with SIGKILL after acknowledging jobs: the standby
    leads within 10 s, and every acknowledged job is there exactly once."""
    auth = admin_token(pg_url)
    leader, standby = pair(pg_url, tmp_path, servers)
    seen = standby.wait_role("standby")
    assert seen["leader_url"] == leader.url
    assert seen["epoch"] == 1

    read = http.get(standby.url + "/v1/jobs?state=pending", headers=auth, timeout=5)
    assert read.status_code == 307
    assert read.headers["location"] == leader.url + "/v1/jobs?state=pending"
    assert read.headers["x-hal-leader"] == leader.url
    assert read.headers["x-hal-role"] == "standby"
    write = http.post(standby.url + "/v1/jobs", json=job("to-the-standby"), headers=auth, timeout=5)
    assert write.status_code == 307
    assert write.json()["error"] == "standby"
    assert http.get(standby.url + "/healthz", timeout=5).json()["role"] == "standby"

    acked: list[int] = []
    for batch in range(3):
        body = {"jobs": [job(f"burst-{batch}-{i}") for i in range(100)]}
        done = http.post(leader.url + "/v1/jobs/batch", json=body, headers=auth, timeout=30)
        assert done.status_code == 201, done.text
        assert done.headers["x-hal-role"] == "leader"
        acked += [r["job_id"] for r in done.json()["results"]]

    killed = time.monotonic()
    os.kill(leader.proc.pid, signal.SIGKILL)
    now = standby.wait_role("leader", within=30)
    takeover = time.monotonic() - killed
    print(f"takeover after kill -9: {takeover:.2f} s")
    assert takeover <= 10
    assert now["epoch"] == 2
    assert now["leader_url"] == standby.url

    listed = http.get(standby.url + "/v1/jobs", headers=auth, timeout=10)
    assert listed.status_code == 200
    ids = sorted(j["id"] for j in listed.json()["jobs"])
    assert ids == sorted(acked)  # all there, once each
    names = job_names(pg_url)
    assert len(names) == len(set(names)) == 300
    assert "to-the-standby" not in names
    after = http.post(standby.url + "/v1/jobs", json=job("after"), headers=auth, timeout=10)
    assert after.status_code == 201, after.text


def test_a_leader_stopped_and_resumed_after_a_takeover_writes_nothing_and_exits(
    pg_url: str, tmp_path: Path, servers: list[Server]
) -> None:
    """The leader is frozen (SIGSTOP: a stalled host, a paused VM); its session and lock
    live on, but its lease runs out and the standby takes over. A submission reaches the
    frozen leader meanwhile. Resumed, the old leader applies none of it: it finds
    another server leading, says so and exits non-zero."""
    auth = admin_token(pg_url)
    old, standby = pair(pg_url, tmp_path, servers)
    first = http.post(old.url + "/v1/jobs", json=job("before"), headers=auth, timeout=10)
    assert first.status_code == 201, first.text  # (its token is cached there now)

    os.kill(old.proc.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    answers: list[int | str] = []

    def submit_to_the_frozen_one() -> None:
        try:
            late = http.post(old.url + "/v1/jobs", json=job("late"), headers=auth, timeout=60)
            answers.append(late.status_code)
        except httpx.HTTPError as err:
            answers.append(type(err).__name__)

    sender = threading.Thread(target=submit_to_the_frozen_one)
    sender.start()
    standby.wait_role("leader", within=30)
    print(f"takeover after SIGSTOP: {time.monotonic() - stopped:.2f} s")
    with psycopg.connect(pg_url) as conn:
        epoch = conn.execute("SELECT epoch FROM server_leader").fetchone()
    assert epoch == (2,)

    os.kill(old.proc.pid, signal.SIGCONT)
    code = old.proc.wait(30)
    sender.join(60)
    assert code == 5, old.log.read_text()
    assert "another HAL server took the lead" in old.log.read_text()
    assert answers and answers[0] not in (200, 201), answers
    assert job_names(pg_url) == ["before"]  # nothing of the old leader's landed
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT epoch FROM server_leader").fetchone() == (2,)


def test_a_standby_with_no_leader_answering_says_retry_then_leads(
    pg_url: str, tmp_path: Path, servers: list[Server]
) -> None:
    """Another process holds the database's lock but no leader has recorded itself (a
    server still taking the lead): a standby says retry in a second (503), `--no-standby`
    refuses to start, and once the lock is let go the standby leads, on a database it
    migrates itself."""
    with psycopg.connect(pg_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (ADVISORY_KEY,))
        refused = Server(pg_url, tmp_path, "refused", "--no-standby")
        standby = Server(pg_url, tmp_path, "b")
        servers.append(standby)
        seen = standby.wait_role("standby")
        assert refused.proc.wait(60) == 5
        assert "another HAL server" in refused.log.read_text()
        assert seen["leader_url"] is None and seen["epoch"] is None
        retry = http.post(standby.url + "/v1/jobs", json=job("x"), timeout=5)
        assert retry.status_code == 503
        assert retry.headers["retry-after"] == "1"
        assert retry.headers["x-hal-role"] == "standby"
        assert "location" not in retry.headers
    standby.wait_role("leader", within=20)
    assert job_names(pg_url) == []
