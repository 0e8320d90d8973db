"""The contract the control plane implements ships inside the package
(``hal/cache/spec``), unmodified, and the control plane serves it at ``/openapi.yaml``."""

from __future__ import annotations

import hashlib
import re

import httpx
import yaml
from cacheapi import Api

from hal.cache.app import CONTRACT, ROUTES


def _get(api: Api, path: str, method: str = "GET") -> httpx.Response:
    return api.loop.run_until_complete(api.client.request(method, path))


def test_the_control_plane_serves_the_contract_the_package_ships(api: Api) -> None:
    resp = _get(api, "/openapi.yaml")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/yaml"
    assert resp.content == CONTRACT.read_bytes()
    assert int(resp.headers["content-length"]) == len(resp.content)


def test_the_contract_is_read_only(api: Api) -> None:
    resp = _get(api, "/openapi.yaml", "POST")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "GET"
    assert resp.json()["code"] == "method_not_allowed"


def test_an_unknown_path_names_where_the_api_and_its_contract_are(api: Api) -> None:
    resp = api.get("/instances")
    assert resp.status_code == 404
    assert resp.json()["message"] == (
        "no such resource: /instances (the API lives under /v1, its contract at /openapi.yaml)"
    )


def test_the_shipped_contract_is_the_upstream_file() -> None:
    """Byte for byte the upstream contract: its SHA-256 is the one NOTICE.md records."""
    notice = (CONTRACT.parent / "NOTICE.md").read_text()
    recorded = re.search(r"SHA-256 of our copy \| `([0-9a-f]{64})`", notice)
    assert recorded is not None
    assert hashlib.sha256(CONTRACT.read_bytes()).hexdigest() == recorded.group(1)


def test_every_operation_of_the_contract_is_routed_and_nothing_else() -> None:
    spec = yaml.safe_load(CONTRACT.read_text())
    documented = {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method in operations
        if method in ("get", "post", "put", "delete", "patch")
    }
    routed = {(method, "/" + "/".join(pattern)) for method, pattern, _ in ROUTES}
    assert routed - documented == {("GET", "/openapi.yaml")}
    assert documented <= routed
