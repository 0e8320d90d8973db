"""The database goes away under a running server and comes back: requests that need it
get a 503 saying so (not a 500 with a traceback), agents keep their job reports until
they can be stored, the scheduler goes on, and nothing is lost, doubled or mirrored that
was not committed. PostgreSQL runs as a private instance of this test (never the
machine's shared one, which other work uses); SQLite is locked by another process."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import hal.db
from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until
from hal.wire.jobs import JobSubmit

OVERRIDES: dict[str, object] = {"node_timeout_seconds": 3.0, "heartbeat_interval_seconds": 0.5}


def script(body: str) -> str:
    return "#!/bin/sh\n" + body + "\n"


def _pg_bin() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, else Debian's newest version."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    for pg_ctl in reversed(versions):
        if (pg_ctl.parent / "initdb").exists():
            return pg_ctl.parent
    return None


class PrivatePostgres:
    """A PostgreSQL of its own in a temporary directory, on a free port (trust auth)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.port = free_port()
        # short: the socket path must fit in 107 bytes
        self.root = Path(tempfile.mkdtemp(prefix="hal-pg-"))
        self.data = self.root / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.root)
                pytest.skip("running as root and there is no 'postgres' user to run PostgreSQL")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/hal"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()
        import psycopg

        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE hal")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "immediate") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        """Stop it whatever state it is in, and remove its directory."""
        with contextlib.suppress(Exception):
            self.stop()
        pid_file = self.data / "postmaster.pid"
        with contextlib.suppress(Exception):
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGKILL)  # our own postmaster, if pg_ctl could not stop it
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl are not installed (apt install postgresql)")
    pg = PrivatePostgres(bin_dir)
    try:
        pg.init()
        yield pg
    finally:
        pg.close()


def _raw(server: LiveServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.token}", **kwargs.pop("headers", {})}
    return http.request(method, server.url + path, headers=headers, timeout=30, **kwargs)


def _assert_unavailable(response: httpx.Response, cause: str) -> None:
    """A 503 problem+json that says the database is away and to retry, not a 500."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "5"
    body = response.json()
    assert body["code"] == "database_unavailable"
    assert body["detail"].startswith("the database is unavailable: "), body
    assert cause in body["detail"] and "retry" in body["detail"], body


def _states(server: LiveServer, *, history: bool) -> dict[int, str]:
    with server.client() as c:
        found = c.jobs(include_finished=True, history=history)
    return {j.id: j.state for j in found}


@pytest.mark.postgres  # a private PostgreSQL, started from its programs
def test_postgres_outage_loses_nothing_and_needs_no_restart(
    tmp_path: Path, private_pg: PrivatePostgres
) -> None:
    with LiveServer(tmp_path, db_url=private_pg.url, config_overrides=OVERRIDES) as server:
        with server.agents(1, cpus=4), server.client() as c:
            # two jobs that end during the outage, one that becomes eligible during it
            running = [
                c.submit(JobSubmit(script=script("sleep 2"), workdir=str(tmp_path))).job_id
                for _ in range(2)
            ]
            later = c.submit(
                JobSubmit(script=script("true"), workdir=str(tmp_path), begin_time=time.time() + 3)
            ).job_id
            wait_until(
                lambda: all(c.job(j).state == "RUNNING" for j in running), message="jobs to run"
            )
            private_pg.stop("immediate")
            outage = time.monotonic()

            job = {"script": script("true"), "workdir": str(tmp_path)}
            _assert_unavailable(_raw(server, "POST", "/v1/jobs", json=job), "PostgreSQL")
            # a client waits the outage out (HAL_RETRY_SECONDS) and its submit then lands once
            pool = ThreadPoolExecutor(1)
            waited = pool.submit(
                lambda: server.client().submit(JobSubmit(script=script("true"), workdir="/tmp"))
            )
            _assert_unavailable(_raw(server, "GET", "/v1/jobs?history=true"), "PostgreSQL")
            unknown = {"Authorization": "Bearer hal_not_seen_before"}  # looked up in the store
            _assert_unavailable(_raw(server, "GET", "/v1/jobs", headers=unknown), "PostgreSQL")
            _assert_unavailable(_raw(server, "POST", f"/v1/jobs/{later}/hold"), "PostgreSQL")

            # past the jobs' end, the begin time and the node timeout: the finish reports
            # and the start cannot be stored, so the mirror must not show them either
            time.sleep(max(0.0, 9.0 - (time.monotonic() - outage)))
            assert {j: c.job(j).state for j in [*running, later]} == {
                running[0]: "RUNNING",
                running[1]: "RUNNING",
                later: "PENDING",
            }
            private_pg.start()

            wait_until(
                lambda: {c.job(j).state for j in [*running, later]} == {"COMPLETED"},
                timeout=20,
                message="the kept reports to be applied and the later job to run",
            )
            assert [n.state for n in c.nodes()] == ["UP"]  # not declared dead for the outage
            for j in [*running, later]:
                info = c.job(j)
                assert (info.exit_code, info.restarts) == (0, 0), info
            # the scheduler goes on: a job submitted now runs
            after = c.submit(JobSubmit(script=script("true"), workdir=str(tmp_path))).job_id
            retried = waited.result(timeout=30).job_id
            pool.shutdown()
            for j in (after, retried):
                wait_until(lambda j=j: c.job(j).state == "COMPLETED", message="new jobs to run")

        # nothing lost, doubled or mirrored wrongly: memory and the database agree
        expected = {j: "COMPLETED" for j in [*running, later, after, retried]}
        assert _states(server, history=False) == expected
        assert _states(server, history=True) == expected
        import psycopg

        dsn = f"host=127.0.0.1 port={private_pg.port} user=postgres dbname=hal"
        with psycopg.connect(dsn) as conn:
            finished = conn.execute(
                "SELECT job_id, count(*) FROM events WHERE kind = 'job.finished' GROUP BY job_id"
            ).fetchall()
            started = conn.execute(
                "SELECT job_id, count(*) FROM events WHERE kind = 'job.started' GROUP BY job_id"
            ).fetchall()
        assert dict(finished) == {j: 1 for j in expected}
        assert dict(started) == {j: 1 for j in expected}


def test_sqlite_locked_by_another_process_is_a_503_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hal.db, "SQLITE_BUSY_TIMEOUT_S", 1.0)  # fail fast, for the test
    with LiveServer(tmp_path, config_overrides=OVERRIDES) as server:
        with server.agents(1, cpus=2), server.client() as c:
            first = c.submit(JobSubmit(script=script("sleep 1"), workdir=str(tmp_path))).job_id
            wait_until(lambda: c.job(first).state == "RUNNING", message="the job to run")
            other = sqlite3.connect(tmp_path / "hal.db", isolation_level=None)
            try:
                other.execute("BEGIN EXCLUSIVE")  # e.g. a backup tool holding the file
                job = {"script": script("true"), "workdir": str(tmp_path)}
                _assert_unavailable(_raw(server, "POST", "/v1/jobs", json=job), "locked")
                time.sleep(3)  # the job ends; its report cannot be stored yet
                assert c.job(first).state == "RUNNING"
            finally:
                other.execute("ROLLBACK")
                other.close()
            wait_until(lambda: c.job(first).state == "COMPLETED", message="the kept report")
            again = c.submit(JobSubmit(script=script("true"), workdir=str(tmp_path))).job_id
            wait_until(lambda: c.job(again).state == "COMPLETED", message="a new job to run")
        expected = {first: "COMPLETED", again: "COMPLETED"}
        assert _states(server, history=False) == expected
        assert _states(server, history=True) == expected
