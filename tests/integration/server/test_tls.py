"""TLS, live: ``hal server`` as a process serving HTTPS with certificates from ``hal certs``
(real handshakes on loopback), the CLI and ``hal agent`` as processes.

A certificate signed by a CA the client does not trust, one for another host, and an
expired one are each refused with a line that says what to do; an agent that trusts the
site CA joins and runs a job; with mutual TLS an agent without a certificate, or with
another node's, is refused; ``/metrics`` of the server and of an agent ask for their token.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from hal.client import HalClient
from hal.host.certs import init_ca, issue
from hal.testing import http
from hal.testing.live import free_port, stop_process, wait_until

HAL = (sys.executable, "-m", "hal.cli.main")
START = ("--host", "127.0.0.1", "--init-admin", "admin")


@dataclass
class Pki:
    dir: Path
    other: Path  # another CA's folder

    def pair(self, name: str) -> list[str]:
        return [
            "--tls-cert",
            str(self.dir / f"{name}.pem"),
            "--tls-key",
            str(self.dir / f"{name}.key"),
        ]

    @property
    def ca(self) -> str:
        return str(self.dir / "ca.pem")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The site CA with a server certificate for localhost, one for another host, an
    expired one, and client certificates for node1 and node2; and a second CA."""
    root = tmp_path_factory.mktemp("pki")
    site, other = root / "site", root / "other"
    init_ca(site)
    init_ca(other)
    issue(site, "localhost", dns=["localhost"], ips=["127.0.0.1"])
    issue(site, "elsewhere", dns=["elsewhere.example"])
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3)
    issue(site, "expired", dns=["localhost"], ips=["127.0.0.1"], days=1, not_before=past)
    issue(site, "node1", client=True)
    issue(site, "node2", client=True)
    return Pki(site, other)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    data: Path

    def cli(self, *args: str, ca: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HAL_URL": self.url, "HAL_TOKEN": self.token}
        env.pop("HAL_CA_FILE", None)
        if ca:
            env["HAL_CA_FILE"] = ca
        return subprocess.run(
            [*HAL, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    def agent(self, name: str, *extra: str, token: str | None = None) -> subprocess.Popen[bytes]:
        env = {**os.environ, "HAL_TOKEN": token or self.token}
        env.pop("HAL_CA_FILE", None)
        log = open(self.data / f"agent-{name}.log", "ab")  # noqa: SIM115 - owned by the process
        return subprocess.Popen(
            [
                *HAL,
                "agent",
                "--server",
                self.url,
                "--name",
                name,
                "--cpus",
                "1",
                "--memory",
                "1G",
                "--state-dir",
                str(self.data / "agents" / name),
                "--unknown-users-as-agent",
                *extra,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self, name: str) -> str:
        return (self.data / f"agent-{name}.log").read_text(errors="replace")


def _serve(
    tmp: Path, *args: str, host: str = "localhost", env: dict[str, str] | None = None
) -> Iterator[Server]:
    port = free_port()
    data = tmp / f"server-{port}"
    data.mkdir()
    out = data / "server.log"
    with out.open("w") as log:
        proc = subprocess.Popen(
            [*HAL, "server", "--data-dir", str(data), "--port", str(port), *START, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    try:
        wait_until(
            lambda: "control plane on https://" in out.read_text() or proc.poll() is not None,
            message="the server to start",
        )
        assert proc.poll() is None, out.read_text()
        wait_until(lambda: _listening(port), message="the server to listen")
        token = re.search(r"token \(shown once\): (\S+)", out.read_text())
        assert token is not None
        yield Server(proc, f"https://{host}:{port}", token.group(1), data)
    finally:
        stop_process(proc)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def server(tmp_path: Path, pki: Pki) -> Iterator[Server]:
    yield from _serve(tmp_path, *pki.pair("localhost"))


def test_a_client_trusts_the_site_ca_only_when_told(server: Server, pki: Pki) -> None:
    """Without HAL_CA_FILE (the system's CAs only) and with another CA's certificate the
    command fails saying what to set; with the site CA it answers, and so does `hal htc`."""
    for ca in (None, str(pki.other / "ca.pem")):
        done = server.cli("sinfo", ca=ca)
        assert done.returncode != 0
        assert "not signed by a CA this client trusts" in done.stderr, done.stderr
        assert "HAL_CA_FILE" in done.stderr
    done = server.cli("sinfo", ca=pki.ca)
    assert done.returncode == 0, done.stderr
    assert "debug*" in done.stdout
    # the HTC client too (it used to trust certifi's CAs alone, never HAL_CA_FILE)
    done = server.cli("htc", "sessions", ca=pki.ca)
    assert done.returncode == 0, done.stderr


def test_a_certificate_for_another_host_is_refused(tmp_path: Path, pki: Pki) -> None:
    for srv in _serve(tmp_path, *pki.pair("elsewhere")):
        done = srv.cli("sinfo", ca=pki.ca)
        assert done.returncode != 0
        assert "is not for 'localhost'" in done.stderr, done.stderr
        assert "hal certs issue" in done.stderr


def test_an_expired_certificate_is_refused(tmp_path: Path, pki: Pki) -> None:
    for srv in _serve(tmp_path, *pki.pair("expired")):
        done = srv.cli("sinfo", ca=pki.ca)
        assert done.returncode != 0
        assert "has expired" in done.stderr, done.stderr


def test_a_plain_http_client_of_a_tls_server_is_told_to_use_https(server: Server, pki: Pki) -> None:
    plain = Server(server.proc, server.url.replace("https:", "http:"), server.token, server.data)
    done = plain.cli("sinfo", ca=pki.ca)
    assert done.returncode != 0
    assert "use https://" in done.stderr, done.stderr


def test_an_agent_joins_over_tls_and_runs_a_job(
    server: Server, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = server.agent("node1", "--ca-file", pki.ca)
    try:
        monkeypatch.setenv("HAL_CA_FILE", pki.ca)
        with HalClient(server.url, server.token) as client:
            wait_until(
                lambda: [n.state for n in client.nodes()] == ["UP"],
                message="node1 to join over TLS",
            )
            out = tmp_path / "out.txt"
            done = server.cli(
                "sbatch", "--parsable", "-o", str(out), "--wrap", "echo over-tls", ca=pki.ca
            )
            assert done.returncode == 0, done.stderr
            job = int(done.stdout.strip())
            wait_until(lambda: client.job(job).state == "COMPLETED", message="the job to end")
        assert out.read_text().strip() == "over-tls"
    finally:
        stop_process(agent)


def test_an_agent_that_does_not_trust_the_server_says_so(server: Server, pki: Pki) -> None:
    agent = server.agent("node1")  # no --ca-file: it retries, as for a server away
    try:
        wait_until(
            lambda: "not signed by a CA this client trusts" in server.log("node1"),
            message="the agent to log why it cannot reach the server",
        )
        assert agent.poll() is None
    finally:
        stop_process(agent)


@pytest.fixture
def mtls(tmp_path: Path, pki: Pki) -> Iterator[Server]:
    yield from _serve(tmp_path, *pki.pair("localhost"), "--client-ca", pki.ca)


def test_mutual_tls_refuses_an_agent_without_its_nodes_certificate(mtls: Server, pki: Pki) -> None:
    """Without a certificate, and with node2's serving node1, the agent stops (exit 3,
    as for a refused token) saying why; with node1's it joins. Users need none."""
    bare = mtls.agent("node1", "--ca-file", pki.ca)
    assert bare.wait(60) == 3
    assert "asks agents for a TLS client certificate" in mtls.log("node1")
    wrong = mtls.agent("node1", "--ca-file", pki.ca, *pki.pair("node2"))
    assert wrong.wait(60) == 3
    assert "certificate is for node2, not node 'node1'" in mtls.log("node1")
    right = mtls.agent("node1", "--ca-file", pki.ca, *pki.pair("node1"))
    try:
        wait_until(
            lambda: (
                mtls.cli("sinfo", "-h", "-N", "-o", "%N %t", ca=pki.ca).stdout.split()
                == ["node1", "idle"]
            ),
            message="node1 to join with its certificate",
        )
        assert right.poll() is None
    finally:
        stop_process(right)


def test_the_servers_metrics_ask_for_the_token(tmp_path: Path, pki: Pki) -> None:
    token = tmp_path / "metrics-token"
    token.write_text("scrape-me\n")
    for srv in _serve(tmp_path, *pki.pair("localhost"), "--metrics-token-file", str(token)):
        with httpx.Client(
            base_url=srv.url, verify=ssl.create_default_context(cafile=pki.ca), timeout=10
        ) as session:
            refused = session.get("/metrics")
            assert refused.status_code == 401
            assert "metrics token" in refused.json()["detail"]
            assert (
                session.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
            )
            ok = session.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
            assert ok.status_code == 200
            assert "hal_" in ok.text


def test_an_agents_metrics_over_tls_ask_for_the_token(
    server: Server, pki: Pki, tmp_path: Path
) -> None:
    token = tmp_path / "metrics-token"
    token.write_text("node-scrape")
    port = free_port()
    agent = server.agent(
        "node1",
        "--ca-file",
        pki.ca,
        "--metrics-listen",
        f"127.0.0.1:{port}",
        "--metrics-tls-cert",
        str(pki.dir / "localhost.pem"),
        "--metrics-tls-key",
        str(pki.dir / "localhost.key"),
        "--metrics-token-file",
        str(token),
    )
    url = f"https://localhost:{port}/metrics"
    try:
        with httpx.Client(verify=ssl.create_default_context(cafile=pki.ca), timeout=10) as session:

            def answers() -> bool:
                try:
                    return session.get(url).status_code == 401
                except httpx.TransportError:
                    return False

            wait_until(answers, message="the agent's metrics listener")
            assert "missing or wrong token" in session.get(url).text
            ok = session.get(url, headers={"Authorization": "Bearer node-scrape"})
            assert ok.status_code == 200
            assert "hal_agent" in ok.text
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            http.get(url, verify=ssl.create_default_context(cafile=pki.other / "ca.pem"))
    finally:
        stop_process(agent)


def test_the_embedded_cache_control_plane_asks_for_the_data_planes_token(
    tmp_path: Path, pki: Pki
) -> None:
    """``hal server --cache-control-plane`` with HAL_CACHE_TOKEN: /cache over the server's
    TLS answers only with that token; HAL's own /v1 keeps its users' tokens."""
    cache_env = {"HAL_CACHE_TOKEN": "data-secret"}
    args = (*pki.pair("localhost"), "--cache-control-plane")
    for srv in _serve(tmp_path, *args, env=cache_env):
        trust = ssl.create_default_context(cafile=pki.ca)
        with httpx.Client(base_url=srv.url, verify=trust, timeout=10) as session:
            refused = session.get("/cache/v1/instances")
            assert refused.status_code == 401
            assert "HAL_CACHE_TOKEN" in refused.json()["message"]
            ok = session.get("/cache/v1/instances", headers={"Authorization": "Bearer data-secret"})
            assert ok.status_code == 200
            assert ok.json()["instances"] == []
            wrong = session.get("/v1/nodes", headers={"Authorization": "Bearer data-secret"})
            assert wrong.status_code == 401


@pytest.mark.parametrize("insecure", [False, True])
def test_plain_http_beyond_loopback_is_warned_about(tmp_path: Path, insecure: bool) -> None:
    """Without TLS on every address the server starts (clusters set up before TLS keep
    working) but says what crosses the network in the clear, unless --insecure-http."""
    port = free_port()
    out = tmp_path / "server.log"
    where = ["--host", "0.0.0.0", *(["--insecure-http"] if insecure else [])]
    with out.open("w") as log:
        proc = subprocess.Popen(
            [*HAL, "server", "--data-dir", str(tmp_path), "--port", str(port), *where],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        wait_until(
            lambda: "control plane on http://" in out.read_text() or proc.poll() is not None,
            message="the server to start",
        )
        assert proc.poll() is None, out.read_text()
        warned = "warning: plain HTTP on 0.0.0.0" in out.read_text()
        assert warned is not insecure, out.read_text()
    finally:
        stop_process(proc)


def _served_serial(port: int, ca: str) -> int:
    ctx = ssl.create_default_context(cafile=ca)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    return int(str(cert["serialNumber"]), 16)


def test_sighup_serves_a_renewed_certificate(tmp_path: Path, pki: Pki) -> None:
    """The files overwritten with a new pair and SIGHUP: new handshakes get it; a broken
    pair under SIGHUP is logged and the one served until then stays."""
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "server.pem", live / "server.key"
    cert.write_bytes((pki.dir / "localhost.pem").read_bytes())
    key.write_bytes((pki.dir / "localhost.key").read_bytes())
    for srv in _serve(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key)):
        _renew_under_sighup(srv, cert, key, pki)


def _renew_under_sighup(srv: Server, cert: Path, key: Path, pki: Pki) -> None:
    port = int(srv.url.rsplit(":", 1)[1])
    first = _served_serial(port, pki.ca)
    new_cert, new_key = issue(pki.dir, "renewed", dns=["localhost"], ips=["127.0.0.1"])
    cert.write_bytes(new_cert.read_bytes())
    key.write_bytes(new_key.read_bytes())
    srv.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: _served_serial(port, pki.ca) != first, message="the new certificate")
    renewed = _served_serial(port, pki.ca)
    key.write_bytes((pki.dir / "node1.key").read_bytes())  # a key of another pair
    srv.proc.send_signal(signal.SIGHUP)
    log = srv.data / "server.log"
    wait_until(lambda: "kept the TLS certificate" in log.read_text(), message="the refusal")
    assert _served_serial(port, pki.ca) == renewed
    assert srv.cli("sinfo", ca=pki.ca).returncode == 0
