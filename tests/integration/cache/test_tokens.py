"""The data plane's token (``HAL_CACHE_TOKEN`` / ``--token-file``): a real cache control
plane given one refuses requests without it (401, saying what to set), a cache node given
the same token registers and serves, a node without it is never registered; over TLS
(``--tls-cert``) a node that trusts the site CA (``--ca-file``) joins as well."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
from cachetree import ControlPlane, Node, Proc, registered, tails, wait_for

from hal.host.certs import init_ca, issue

TOKEN = "data-plane-secret"


def _token_file(tmp_path: Path) -> Path:
    path = tmp_path / "cache-token"
    path.write_text(TOKEN + "\n")
    return path


def test_the_control_plane_refuses_requests_without_its_token(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path, None, "--token-file", str(_token_file(tmp_path)))
    cp.http.headers["Authorization"] = f"Bearer {TOKEN}"
    cp.start()
    try:
        with httpx.Client(base_url=cp.url, timeout=5) as bare:
            missing = bare.get("/instances")
            assert missing.status_code == 401
            assert missing.json()["code"] == "unauthenticated"
            assert "HAL_CACHE_TOKEN" in missing.json()["message"]
            wrong = bare.get("/instances", headers={"Authorization": "Bearer guess"})
            assert wrong.status_code == 401
            assert "wrong token" in wrong.json()["message"]
        assert cp.http.get("/instances").status_code == 200
    finally:
        cp.stop()


def test_a_node_with_the_token_registers_and_one_without_never_does(tmp_path: Path) -> None:
    token = _token_file(tmp_path)
    cp = ControlPlane(tmp_path, None, "--token-file", str(token))
    cp.http.headers["Authorization"] = f"Bearer {TOKEN}"
    good = Node(tmp_path / "good", cp, "good", None, "root", "--token-file", str(token))
    bad = Node(tmp_path / "bad", cp, "bad", None, "root")
    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    cp.start()
    try:
        good.start()
        Proc.start(bad)  # no wait for a ping: unregistered, it may not answer
        wait_for(lambda: registered(cp, ["good"]), 30, "the node with the token")
        good.client().set("k", "v")
        assert good.client().get("k") == b"v"
        wait_for(
            lambda: (
                "401" in bad.log.read_text(errors="replace")
                or (bad.proc is not None and bad.proc.poll() is not None)
            ),
            30,
            "the node without the token to be refused",
        )
        assert not registered(cp, ["bad"]), tails([cp, good, bad])
    finally:
        for proc in (bad, good, cp):
            proc.stop()


def test_a_node_joins_a_control_plane_over_tls(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    init_ca(pki)
    issue(pki, "localhost", dns=["localhost"], ips=["127.0.0.1"])
    cp = ControlPlane(
        tmp_path,
        None,
        "--tls-cert",
        str(pki / "localhost.pem"),
        "--tls-key",
        str(pki / "localhost.key"),
    )
    cp.url = cp.url.replace("http:", "https:")
    cp.http = httpx.Client(
        base_url=cp.url, timeout=5, verify=ssl.create_default_context(cafile=pki / "ca.pem")
    )
    node = Node(tmp_path, cp, "n1", None, "root", "--ca-file", str(pki / "ca.pem"))
    cp.start()
    try:
        node.start()
        wait_for(lambda: registered(cp, ["n1"]), 30, "the node over TLS")
        with httpx.Client(timeout=5) as untrusting:  # the system's CAs only
            try:
                untrusting.get(cp.url + "/instances")
            except httpx.ConnectError as err:
                assert "CERTIFICATE_VERIFY_FAILED" in str(err)
            else:
                raise AssertionError("a client without the site CA was answered")
    finally:
        node.stop()
        cp.stop()
