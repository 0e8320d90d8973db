"""``hal certs init|issue`` and ``hal.host.tls``: the files made (keys 0600, what each
certificate holds), the mistakes refused with what to do, and real TLS handshakes on
loopback (a thread serving with the certificates made) explained as a user reads them."""

from __future__ import annotations

import datetime
import socket
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hal.core.errors import Conflict, InvalidRequest
from hal.host.certs import init_ca, issue
from hal.host.tls import (
    DeferredClientContext,
    TlsSetupError,
    client_context,
    explain,
    peer_names,
    server_context,
    verify_for,
    verify_for_servers,
)

HAL = (sys.executable, "-m", "hal.cli.main")
SERVER_NAMES = ("--dns", "head.example", "--ip", "10.0.0.1")


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_init_and_issue_through_the_cli(tmp_path: Path) -> None:
    folder = tmp_path / "pki"
    done = subprocess.run(
        [*HAL, "certs", "init", "--dir", str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "HAL_CA_FILE" in done.stdout
    done = subprocess.run(
        [*HAL, "certs", "issue", "head", "--dir", str(folder), *SERVER_NAMES],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for key in ("ca.key", "head.key"):
        assert stat.S_IMODE((folder / key).stat().st_mode) == 0o600
    cert = _load(folder / "head.pem")
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert alt.get_values_for_type(x509.DNSName) == ["head.example"]
    assert [str(a) for a in alt.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    again = subprocess.run(
        [*HAL, "certs", "init", "--dir", str(folder)], capture_output=True, text=True, check=False
    )
    assert again.returncode != 0
    assert "already holds a CA" in again.stderr


def test_a_client_certificate_proves_the_node_name(tmp_path: Path) -> None:
    init_ca(tmp_path)
    cert_path, _ = issue(tmp_path, "node7", client=True)
    cert = _load(cert_path)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "node7"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_mistakes_are_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="hal certs init"):
        issue(tmp_path, "head")  # no CA there
    init_ca(tmp_path)
    with pytest.raises(Conflict, match="already holds a CA"):
        init_ca(tmp_path)
    with pytest.raises(InvalidRequest, match="not an IP address"):
        issue(tmp_path, "head", ips=["head.example"])
    with pytest.raises(InvalidRequest, match="plain name"):
        issue(tmp_path, "../head")
    with pytest.raises(TlsSetupError, match=r"cannot use .* as the CA"):
        client_context(str(tmp_path / "missing.pem"))
    with pytest.raises(TlsSetupError, match="hal certs issue NAME"):
        server_context(str(tmp_path / "ca.pem"), str(tmp_path / "nothing.key"))


@contextmanager
def _tls_server(
    cert: Path, key: Path, client_ca: Path | None = None
) -> Iterator[tuple[int, list[set[str]]]]:
    """A thread accepting TLS connections on loopback with ``cert``; yields its port and
    the names each client's certificate proved (``peer_names``), as they come."""
    ctx = server_context(str(cert), str(key), str(client_ca) if client_ca else None)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    names: list[set[str]] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    names.append(peer_names(tls.getpeercert()))
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port, names
    finally:
        listener.close()
        thread.join(5)


def _handshake(port: int, host: str, ca: Path | None, **pair: str) -> str | None:
    """None when the handshake succeeds, else ``explain``'s line."""
    ctx = client_context(str(ca) if ca else None, **pair)
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.recv(2)
    except OSError as err:
        why = explain(err, host)
        assert why is not None, err
        return why
    return None


def test_handshakes_are_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAL_CA_FILE", raising=False)
    site, other = tmp_path / "site", tmp_path / "other"
    init_ca(site)
    init_ca(other)
    issue(site, "localhost", dns=["localhost"], ips=["127.0.0.1"])
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10)
    issue(site, "old", dns=["localhost"], days=2, not_before=past)
    with _tls_server(site / "localhost.pem", site / "localhost.key") as (port, _):
        assert _handshake(port, "localhost", site / "ca.pem") is None
        assert "not signed by a CA this client trusts" in str(_handshake(port, "localhost", None))
        assert "HAL_CA_FILE" in str(_handshake(port, "localhost", other / "ca.pem"))
        assert "is not for 'other.example'" in str(
            _handshake(port, "other.example", site / "ca.pem")
        )
    with _tls_server(site / "old.pem", site / "old.key") as (port, _):
        assert "has expired" in str(_handshake(port, "localhost", site / "ca.pem"))


def test_a_client_certificate_names_its_node(tmp_path: Path) -> None:
    init_ca(tmp_path)
    issue(tmp_path, "localhost", dns=["localhost"])
    issue(tmp_path, "node3", client=True)
    with _tls_server(
        tmp_path / "localhost.pem", tmp_path / "localhost.key", tmp_path / "ca.pem"
    ) as (port, names):
        assert _handshake(port, "localhost", tmp_path / "ca.pem") is None  # optional
        pair = {"cert": str(tmp_path / "node3.pem"), "key": str(tmp_path / "node3.key")}
        assert _handshake(port, "localhost", tmp_path / "ca.pem", **pair) is None
        assert names == [set(), {"node3"}]


def test_peer_names_reads_common_and_dns_names() -> None:
    cert = {
        "subject": ((("commonName", "node1"),),),
        "subjectAltName": (("DNS", "node1.example"), ("IP Address", "10.0.0.1")),
    }
    assert peer_names(cert) == {"node1", "node1.example"}
    assert peer_names(None) == set()


def test_a_plain_http_client_reads_the_system_store_only_if_it_goes_to_https(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent given http:// addresses starts without reading the system's CA store
    (its cost is the start's), yet trusts the site CA at once and checks the host name."""
    init_ca(tmp_path)
    issue(tmp_path, "localhost", dns=["localhost"])
    monkeypatch.setenv("HAL_CA_FILE", str(tmp_path / "ca.pem"))
    ctx = verify_for("http://head:8470")
    assert isinstance(ctx, DeferredClientContext)
    assert ctx.cert_store_stats()["x509_ca"] == 1  # the site CA only
    assert (ctx.verify_mode, ctx.check_hostname) == (ssl.CERT_REQUIRED, True)
    with (
        _tls_server(tmp_path / "localhost.pem", tmp_path / "localhost.key") as (port, _),
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.recv(2) == b"ok"
    # now it trusts what client_context() does: the system store and the site CA
    assert ctx.cert_store_stats() == client_context().cert_store_stats()
    monkeypatch.setenv("HAL_CA_FILE", str(tmp_path / "missing.pem"))
    with pytest.raises(TlsSetupError, match=r"cannot use .* as the CA"):
        verify_for("http://head:8470")  # a bad site file is reported when the client is made


def test_a_client_of_several_servers_reads_the_store_at_once_if_any_is_https() -> None:
    """Plain HTTP everywhere: the store waits for a handshake. One https address among
    them: the client's context has it from the start, as ``client_context()``'s."""
    deferred = verify_for_servers(["http://a:8470", "http://b:8470"])
    assert isinstance(deferred, DeferredClientContext)
    assert deferred.cert_store_stats()["x509_ca"] == 0
    for urls in (["http://a:8470", "https://b:8470"], ["https://a:8470", "http://b:8470"]):
        ctx = verify_for_servers(urls)
        assert not isinstance(ctx, DeferredClientContext), urls
        assert ctx.cert_store_stats() == client_context().cert_store_stats()
