"""``POST /v1/users/{name}/token`` against a real server: a new token for a user who lost
theirs; the old one is refused from the next request on, even though the server had it
cached."""

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


def call(server: LiveServer, method: str, path: str, token: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return http.request(method, server.url + path, headers=headers, timeout=10)


def test_a_new_token_works_and_the_old_one_is_refused_at_once(server: LiveServer) -> None:
    old = server.add_users("alice")["alice"]
    assert call(server, "GET", "/v1/users/me", old).json()["name"] == "alice"  # now cached
    r = call(server, "POST", "/v1/users/alice/token", server.token)
    assert r.status_code == 200
    body = r.json()
    assert body["name"] == "alice" and body["admin"] is False
    assert body["token"].startswith("hal_") and body["token"] != old
    assert call(server, "GET", "/v1/users/me", old).status_code == 401
    assert call(server, "GET", "/v1/users/me", body["token"]).json()["name"] == "alice"


def test_an_admin_keeps_being_an_admin_with_the_new_token(server: LiveServer) -> None:
    with server.client() as admin:
        old = admin.add_user("ops", admin=True).token
    new = call(server, "POST", "/v1/users/ops/token", old).json()
    assert new["admin"] is True
    assert call(server, "GET", "/v1/users", new["token"]).status_code == 200
    assert call(server, "GET", "/v1/users", old).status_code == 401


def test_only_an_admin_may_issue_tokens(server: LiveServer) -> None:
    bob = server.add_users("bob")["bob"]
    r = call(server, "POST", "/v1/users/bob/token", bob)
    assert r.status_code == 403 and "not an administrator" in r.text
    assert call(server, "GET", "/v1/users/me", bob).status_code == 200  # unchanged


def test_an_unknown_user_is_not_found_and_names_the_list(server: LiveServer) -> None:
    r = call(server, "POST", "/v1/users/nobody/token", server.token)
    assert r.status_code == 404 and "no user nobody (`hal user list` lists users" in r.text


def test_the_route_is_in_the_openapi_document(server: LiveServer) -> None:
    # the document is built at the first ask, which takes seconds on a loaded machine
    paths = http.get(server.url + "/openapi.json", timeout=120).json()["paths"]
    assert "post" in paths["/v1/users/{name}/token"]
