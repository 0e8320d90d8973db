"""A token change whose COMMIT outcome is unknown (PostgreSQL lost at the commit) must
not leave the old token answered from the server's token cache: if the change landed,
the token is refused from the next request on, as after a change that answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from hal.api.server import HalServer
from hal.testing import http
from hal.testing.live import LiveServer


def call(live: LiveServer, method: str, path: str, token: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return http.request(method, live.url + path, headers=headers, timeout=10)


@pytest.mark.parametrize(
    "change", ["DELETE /v1/users/erin", "POST /v1/users/erin/token"], ids=["delete", "new-token"]
)
def test_a_token_change_of_unknown_outcome_is_not_answered_from_cache(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    with LiveServer(tmp_path, db_url=pg_url) as live:
        token = live.add_users("erin")["erin"]
        assert call(live, "GET", "/v1/users/me", token).status_code == 200  # now cached
        assert isinstance(live.server, HalServer)
        dialect = live.server.cluster.store.engine.dialect
        real = dialect.do_commit

        def lands_unanswered(dbapi_connection: Any) -> None:
            real(dbapi_connection)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

        method, path = change.split()
        with monkeypatch.context() as patch:
            patch.setattr(dialect, "do_commit", lands_unanswered)
            r = call(live, method, path, live.token)
        assert (r.status_code, r.json()["code"]) == (503, "commit_outcome_unknown")
        assert call(live, "GET", "/v1/users/me", token).status_code == 401
