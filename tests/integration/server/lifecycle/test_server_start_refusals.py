"""What `hal server` refuses to start on, each said in one line. A second control plane
on a database that one already serves: two would each run a scheduler over their own
mirror, start jobs on the same nodes and write their stale view of a job over the other's
(hal.state.server_lock). A database a newer release wrote."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from hal.api.server import HalServer
from hal.config.model import HalConfig
from hal.core.errors import Conflict
from hal.state.server_lock import ADVISORY_KEY, ServerLock
from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until


def hal_server(data: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hal.cli.main",
        "server",
        "--data-dir",
        str(data),
        "--port",
        str(port),
    ]


def refused_server(data: Path) -> subprocess.CompletedProcess[str]:
    """`hal server` on ``data`` run to its end (a refusal exits at once), output kept."""
    return subprocess.run(
        hal_server(data, free_port()), check=False, capture_output=True, text=True, timeout=60
    )


def serve(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        hal_server(data, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, "the server exited"
        try:
            return http.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 30, message="the server to start")
    return proc, url


def test_a_second_hal_server_on_the_same_sqlite_file_exits_naming_the_first(
    tmp_path: Path,
) -> None:
    """An operator starts `hal server` again on the same data directory (a second
    terminal, a unit file and a manual start): the second exits at once with one line
    naming the first's pid, and the first keeps serving. Once the first is killed (even
    SIGKILL), a server starts there again."""
    first, url = serve(tmp_path)
    try:
        second = refused_server(tmp_path)
        assert second.returncode == 5, second.stderr
        assert f"another HAL server (pid {first.pid} on " in second.stderr
        assert "Traceback" not in second.stderr
        assert http.get(url + "/healthz", timeout=5).status_code == 200
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    again, _ = serve(tmp_path)  # healthy: it took the lock the killed one held
    again.terminate()
    again.wait(30)


def test_a_second_server_on_the_same_postgresql_database_is_refused(
    pg_url: str, tmp_path: Path
) -> None:
    """Two control planes pointed at one PostgreSQL database (two hosts, one --db): the
    second refuses to start while the first runs, and starts once the first stopped."""
    second = HalServer(HalConfig(), pg_url, data_dir=tmp_path / "second")
    refused = pytest.raises(Conflict, match=r"another HAL server .* is using this PostgreSQL")
    with LiveServer(tmp_path / "first", db_url=pg_url), refused:
        asyncio.run(second.start())
    ServerLock.take(second.store).release()  # the first let go when it stopped
    second.store.close()


def test_a_lock_file_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    """The database's directory refuses the lock file (read-only, not the server's user's;
    here a directory stands in its way): `hal server` exits 6 with one line saying what
    to fix, not a traceback."""
    (tmp_path / "hal.db.lock").mkdir()
    done = refused_server(tmp_path)
    assert done.returncode == 6, done.stderr
    assert f"the server cannot create {tmp_path / 'hal.db.lock'} (" in done.stderr
    assert "write access to the database's directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_database_written_by_a_newer_release_is_one_line(tmp_path: Path) -> None:
    """An operator rolls HAL back a release: the database's schema is newer than this
    HAL knows. `hal server` says so in one line and exits 5 (it was uvicorn's start-up
    traceback, exit 3), and writes nothing."""
    from sqlalchemy import text

    from hal.state.migrations import STEPS
    from hal.state.store import SqlStateStore

    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    newer = len(STEPS) + 1
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE hal_meta SET value = {newer} WHERE key = 'schema_version'"))
    done = refused_server(tmp_path)
    assert done.returncode == 5, done.stderr
    assert f"the database schema is version {newer}, newer than this HAL's " in done.stderr
    assert "Traceback" not in done.stderr
    with store.engine.connect() as conn:
        version = conn.execute(text("SELECT value FROM hal_meta WHERE key = 'schema_version'"))
        assert version.scalar_one() == newer
    store.close()


def _lock_holder(conn: psycopg.Connection[tuple[int]]) -> int | None:
    """The backend pid holding the server lock on ``conn``'s database, or None."""
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s "
        "AND objid = %s AND database = (SELECT oid FROM pg_database "
        "WHERE datname = current_database())",
        (ADVISORY_KEY >> 32, ADVISORY_KEY & 0xFFFFFFFF),
    ).fetchone()
    return None if row is None else int(row[0])


def test_a_server_whose_postgresql_session_ends_takes_its_lock_again(
    pg_url: str, tmp_path: Path
) -> None:
    """The lock's session ends under the running server (an outage, a terminated
    backend): within a housekeeping tick the server holds the lock again on a new
    session, so a second server is still refused (it used to start beside it)."""
    second = HalServer(HalConfig(), pg_url, data_dir=tmp_path / "second")
    with (
        LiveServer(tmp_path / "first", db_url=pg_url),
        psycopg.connect(pg_url, autocommit=True) as conn,
    ):
        first = _lock_holder(conn)
        assert first is not None
        conn.execute("SELECT pg_terminate_backend(%s)", (first,))
        wait_until(lambda: _lock_holder(conn) not in (None, first), message="the lock again")
        with pytest.raises(Conflict, match="another HAL server"):
            asyncio.run(second.start())
    second.store.close()


def test_a_server_whose_lock_was_taken_while_it_was_cut_off_stops(
    pg_url: str, tmp_path: Path
) -> None:
    """While the server's session is gone, another process takes the lock (a second
    server started during the outage): the first, whose mirror may now be stale, stops
    serving and says why, instead of running a second scheduler on the database."""
    live = LiveServer(tmp_path / "first", db_url=pg_url)
    live.start()
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:

            def take() -> bool:
                """End the holder's session, then take the lock as soon as it is free
                (the server may take it back first: then end its new session too)."""
                holder = _lock_holder(conn)
                if holder is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", (holder,))
                got = conn.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_KEY,))
                return bool(got.fetchone()[0])  # type: ignore[index]

            wait_until(take, message="the test to take the lock")

            def stopped() -> bool:
                try:
                    http.get(live.url + "/healthz", timeout=1)
                    return False
                except httpx.HTTPError:
                    return True

            wait_until(stopped, message="the fenced server to stop")
            assert isinstance(live.server, HalServer)
            assert "another HAL server" in live.server.fenced
            assert "this server stops" in live.server.fenced
    finally:
        live.stop()
