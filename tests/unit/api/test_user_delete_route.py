"""``DELETE /v1/users/{name}`` against a real server: the user's token is refused from the
next request on, even though the server had it cached; their jobs are kept; an
administrator cannot delete themself; only administrators delete."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from hal.testing import http
from hal.testing.live import LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("srv")) as live:
        yield live


def call(server: LiveServer, method: str, path: str, token: str, **kw: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return http.request(method, server.url + path, headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def test_a_deleted_users_token_is_refused_and_their_jobs_kept(server: LiveServer) -> None:
    token = server.add_users("carol")["carol"]
    job = call(
        server, "POST", "/v1/jobs", token, json={"script": "#!/bin/sh\ntrue\n", "hold": True}
    )
    assert job.status_code == 201
    job_id = job.json()["job_id"]
    assert call(server, "GET", "/v1/users/me", token).status_code == 200  # now cached
    r = call(server, "DELETE", "/v1/users/carol", server.token)
    carol = {"name": "carol", "admin": False, "agent": False, "nodes": ""}
    assert (r.status_code, r.json()) == (200, carol)
    assert call(server, "GET", "/v1/users/me", token).status_code == 401
    users = call(server, "GET", "/v1/users", server.token).json()["users"]
    assert "carol" not in {u["name"] for u in users}
    kept = call(server, "GET", f"/v1/jobs/{job_id}", server.token).json()
    assert (kept["user"], kept["state"]) == ("carol", "PENDING")


def test_deleting_yourself_an_unknown_user_or_as_a_user_is_refused(server: LiveServer) -> None:
    r = call(server, "DELETE", "/v1/users/admin", server.token)
    assert r.status_code == 409 and "another administrator" in r.json()["detail"]
    r = call(server, "DELETE", "/v1/users/nobody", server.token)
    assert r.status_code == 404 and "hal user list" in r.json()["detail"]
    dave = server.add_users("dave")["dave"]
    assert call(server, "DELETE", "/v1/users/dave", dave).status_code == 403
    assert call(server, "GET", "/v1/users/me", dave).status_code == 200
