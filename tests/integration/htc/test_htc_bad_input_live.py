"""Bad input to the ``/v1/htc`` routes and ``hal htc``, against a real control plane on
PostgreSQL (where a NUL character fails a query: a 500 before these checks)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from hal.htc import HtcClient
from hal.testing.live import LiveServer

pytestmark = pytest.mark.postgres
PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as err:
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 ({err.__class__.__name__})")
    name = "hal_test_" + secrets.token_hex(4)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    try:
        with LiveServer(tmp_path_factory.mktemp("hal"), db_url=url) as live:
            yield live
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def call(server: LiveServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        return http.request(method, path, **kwargs)


GOOD = {"service": {"target": "hal.htc.examples:square"}, "workdir": "/tmp"}


@pytest.mark.parametrize(
    ("over", "field", "before"),
    [
        ({"service": {"target": ""}}, "service.target", "201, then FAILED after 3 workers"),
        ({"name": "a\x00b"}, "name", "201, and no htc_sessions row (insert failed)"),
        ({"task_timeout_seconds": 1e10}, "task_timeout_seconds", "every task OverflowError"),
        ({"memory_per_worker_bytes": 2**70}, "memory_per_worker_bytes", "500 (msgpack)"),
        ({"environment": {"A=B": "1"}}, "environment", "201, then FAILED"),
        ({"partition": "nope"}, "partition", "201, then FAILED"),
    ],
)
def test_options_no_worker_could_run_are_refused_when_the_session_opens(
    pg_server: LiveServer, over: dict[str, Any], field: str, before: str
) -> None:
    r = call(pg_server, "POST", "/v1/htc/sessions", json=GOOD | over)
    assert r.status_code == 400, (before, r.text)
    body = r.json()
    assert body["code"] == "invalid_request" and body["field"] == field
    assert body["detail"].startswith(f"{field}: ")


@pytest.mark.parametrize("session_id", ["a\x00b", "s\x00", "x" * 5000])
def test_a_malformed_session_id_is_not_found_on_every_route(
    pg_server: LiveServer, session_id: str
) -> None:
    """``GET /v1/htc/sessions/a%00b`` was a 500 on PostgreSQL."""
    quoted = "/v1/htc/sessions/" + quote(session_id, safe="")
    for method, path in [
        ("GET", quoted),
        ("POST", quoted + "/attach"),
        ("DELETE", quoted),
    ]:
        r = call(pg_server, method, path)
        assert r.status_code == 404, (method, r.text)
        assert "ids look like s0123456789ab" in r.json()["detail"]
        assert len(r.json()["detail"]) < 200  # the id is not echoed back in full


def test_cancelling_an_ended_session_is_a_conflict_that_names_its_state(
    pg_server: LiveServer,
) -> None:
    """A second cancel (or a cancel of a DONE session) answered 200 and ``hal htc cancel``
    printed "session ... DONE" with exit 0, as if it had cancelled something."""
    with HtcClient(pg_server.url, pg_server.token) as hc:
        s = hc.open_session("hal.htc.examples:square", workdir="/tmp", python=sys.executable)
        s.disconnect()
        assert hc.cancel(s.id).state == "CANCELLED"
    r = call(pg_server, "DELETE", f"/v1/htc/sessions/{s.id}")
    assert r.status_code == 409
    assert r.json()["detail"] == f"session {s.id} already ended CANCELLED; nothing to cancel"
    done = pg_server.cli("htc", "cancel", s.id)
    assert done.returncode != 0
    assert f"session {s.id} already ended CANCELLED" in done.stderr
    assert "Traceback" not in done.stderr
    for typed in ("nope\x01", "a?b", "../jobs"):  # an httpx traceback, a 404, another route
        missing = pg_server.cli("htc", "show", typed)
        assert missing.returncode != 0 and "Traceback" not in missing.stderr
        assert missing.stderr.startswith("hal: ") and "hal htc sessions" in missing.stderr


def test_a_session_with_a_good_name_is_still_recorded(
    pg_server: LiveServer, tmp_path: Path
) -> None:
    r = call(pg_server, "POST", "/v1/htc/sessions", json=GOOD | {"name": "fine"})
    assert r.status_code == 201
    session_id = r.json()["session"]
    assert call(pg_server, "GET", f"/v1/htc/sessions/{session_id}").json()["name"] == "fine"
    assert call(pg_server, "DELETE", f"/v1/htc/sessions/{session_id}").status_code == 200
