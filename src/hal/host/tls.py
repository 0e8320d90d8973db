"""TLS for HAL's HTTP: the contexts its servers and clients use, and what a refused
certificate means to the person who has to fix it.

Clients (the CLI, agents, cache nodes) trust the system's CA store and, with
``--ca-file`` or ``HAL_CA_FILE``, the site's CA (``hal certs init`` makes one). An agent
may also present its own certificate (mutual TLS): ``HAL_TLS_CERT`` / ``HAL_TLS_KEY``.
"""

from __future__ import annotations

import os
import ssl
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

CA_ENV = "HAL_CA_FILE"
CERT_ENV = "HAL_TLS_CERT"
KEY_ENV = "HAL_TLS_KEY"

CA_HINT = (
    "pass --ca-file or set HAL_CA_FILE to the site CA's certificate (`hal certs init` made ca.pem)"
)


class TlsSetupError(ValueError):
    """A certificate, key or CA file that cannot be used; the message says which."""


def ca_file(explicit: str | None = None) -> str | None:
    return explicit or os.environ.get(CA_ENV, "").strip() or None


def client_context(
    ca: str | None = None, cert: str | None = None, key: str | None = None
) -> ssl.SSLContext:
    """Verify servers against the system store plus ``ca`` (default ``HAL_CA_FILE``);
    present ``cert``/``key`` (default ``HAL_TLS_CERT``/``HAL_TLS_KEY``) when given."""
    ctx = ssl.create_default_context()
    load_site(ctx, ca, cert, key)
    return ctx


def load_site(
    ctx: ssl.SSLContext, ca: str | None = None, cert: str | None = None, key: str | None = None
) -> None:
    """Load the site's TLS files into the client context ``ctx``: the CA to trust ``ca``
    (default ``HAL_CA_FILE``) and the pair to present ``cert``/``key`` (default
    ``HAL_TLS_CERT``/``HAL_TLS_KEY``); a file that cannot be used raises
    ``TlsSetupError``."""
    path = ca_file(ca)
    if path:
        try:
            ctx.load_verify_locations(cafile=path)
        except (OSError, ssl.SSLError) as err:
            raise TlsSetupError(
                f"cannot use {path} as the CA to trust ({_reason(err)}); give the PEM "
                "certificate of the CA that signed the server's (`hal certs init` made ca.pem)"
            ) from None
    cert = cert or os.environ.get(CERT_ENV, "").strip() or None
    key = key or os.environ.get(KEY_ENV, "").strip() or None
    if cert:
        load_pair(ctx, cert, key)


class DeferredClientContext(ssl.SSLContext):
    """A client context that verifies servers as ``client_context()``'s does (the system
    store, HAL_CA_FILE, hostname checked; HAL_TLS_CERT/HAL_TLS_KEY presented) but reads
    the system store at its first handshake, not when made: about 20 ms of CPU that a
    client given plain-HTTP addresses (an agent, a cache node) pays only if a standby's
    redirect or a learned address (``X-HAL-Servers``) takes it to https. The site's own
    files are loaded when it is made (``load_site``), so a bad one is reported at once."""

    def __new__(cls) -> DeferredClientContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)

    def __init__(self) -> None:
        super().__init__()
        self._store_lock = threading.Lock()  # a sync client may connect from threads
        self._store_loaded = False
        if sys.version_info >= (3, 13):  # what create_default_context() sets there
            self.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT

    def _load_store(self) -> None:
        with self._store_lock:
            if not self._store_loaded:
                self.load_default_certs(ssl.Purpose.SERVER_AUTH)
                self._store_loaded = True

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self._load_store()
        return super().wrap_socket(*args, **kwargs)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self._load_store()
        return super().wrap_bio(*args, **kwargs)


def server_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """A server's context: ``cert``/``key``; with ``client_ca`` it asks clients for a
    certificate signed by that CA (those without one still connect: tokens decide)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_pair(ctx, cert, key)
    if client_ca:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as err:
            raise TlsSetupError(
                f"cannot use {client_ca} as the CA of client certificates ({_reason(err)})"
            ) from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def load_pair(ctx: ssl.SSLContext, cert: str, key: str | None) -> None:
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise TlsSetupError(
            f"cannot use the certificate {cert} with the key {key or cert} ({_reason(err)}); "
            "give PEM files of one pair (`hal certs issue NAME` writes NAME.pem and NAME.key)"
        ) from None


def check_pair(cert: str, key: str) -> None:
    """Raise ``TlsSetupError`` now for a pair a server could not use."""
    load_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert, key)


def explain(err: BaseException, host: str) -> str | None:
    """What a failed TLS handshake with ``host`` means and what to do; None when ``err``
    is no TLS failure."""
    found: BaseException | None = err
    while found is not None and not isinstance(found, ssl.SSLError):
        found = found.__cause__ or found.__context__
    if found is None:
        return None
    if isinstance(found, ssl.SSLCertVerificationError):
        code = found.verify_code
        if code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            return (
                f"the certificate of {host} has expired; issue it a new one (`hal certs issue`) "
                "and send the server SIGHUP (or restart it) to serve it"
            )
        if code == 9:  # X509_V_ERR_CERT_NOT_YET_VALID
            return f"the certificate of {host} is not valid yet; check the clocks of both machines"
        if code == 62 or "hostname" in (found.verify_message or ""):
            return (
                f"the certificate of the server is not for {host!r} ({found.verify_message}); "
                "reach it by a name its certificate holds, or issue one that holds this "
                "name (`hal certs issue NAME --dns HOST --ip ADDR`)"
            )
        return (
            f"the certificate of {host} is not signed by a CA this client trusts "
            f"({found.verify_message}): {CA_HINT}"
        )
    reason = getattr(found, "reason", None) or str(found)
    if reason == "WRONG_VERSION_NUMBER":
        return f"{host} does not speak TLS there: use http:// for it, or start it with TLS"
    if "CERTIFICATE_REQUIRED" in reason or "BAD_CERTIFICATE" in reason:
        return (
            f"{host} asks for this client's certificate: set HAL_TLS_CERT and HAL_TLS_KEY "
            f"(`hal certs issue NODE --client`) ({reason})"
        )
    return f"TLS with {host} failed ({reason})"


def peer_names(peercert: Mapping[str, Any] | None) -> set[str]:
    """The names a verified peer certificate (``SSLSocket.getpeercert()``) proves: its
    common name and DNS names."""
    if not peercert:
        return set()
    names: set[str] = set()
    for rdn in peercert.get("subject", ()):
        for attr, value in rdn:
            if attr == "commonName":
                names.add(value)
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "DNS":
            names.add(value)
    return names


def _reason(err: OSError | ssl.SSLError) -> str:
    if isinstance(err, ssl.SSLError):
        return err.reason or str(err)
    return err.strerror or str(err)


class ServerTls:
    """What a server serves TLS with: its certificate and key, and for mutual TLS the
    CA that signs its clients' certificates."""

    __slots__ = ("cert", "client_ca", "key")

    def __init__(self, cert: str, key: str, client_ca: str | None = None) -> None:
        self.cert = cert
        self.key = key
        self.client_ca = client_ca

    def context(self) -> ssl.SSLContext:
        return server_context(self.cert, self.key, self.client_ca)

    def reload(self, ctx: ssl.SSLContext) -> None:
        """Load the certificate and key files into the serving ``ctx`` again (a renewed
        certificate): new handshakes get them, open connections keep theirs. A pair that
        cannot be used raises ``TlsSetupError`` and ``ctx`` keeps the old one."""
        check_pair(self.cert, self.key)  # on a scratch context: a bad pair leaves ctx whole
        load_pair(ctx, self.cert, self.key)


def verify_for(url: str) -> ssl.SSLContext:
    """httpx's ``verify`` for a client given ``url`` (of several, an https one if any):
    for https, ``client_context()``; for plain HTTP a ``DeferredClientContext``, which
    verifies the same way should the client be sent to https (a leader's redirect, an
    address learned from ``X-HAL-Servers``) but reads the system store only then. Not
    httpx's default (``True``): that loads certifi's CAs when the client is made (about
    20 ms of CPU each agent's start would pay) and not HAL_CA_FILE."""
    if url.startswith("https:"):
        return client_context()
    ctx = DeferredClientContext()
    load_site(ctx)
    return ctx


def verify_for_servers(urls: Sequence[str]) -> ssl.SSLContext:
    """``verify_for`` a client given several servers: an https one if any."""
    return verify_for(max(urls, key=lambda url: url.startswith("https:")))
