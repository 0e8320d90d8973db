"""A small ``GET /metrics`` listener on an asyncio loop, for processes that have no HTTP
server of their own (node agents, cache nodes).

Everything is read on the process's event loop, so a scrape never sees its state
mid-step. Off unless an address is given: several such processes may share a host
(``hal up``, tests) and a fixed default port would collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

REQUEST_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 16 * 1024


def parse_listen(text: str) -> tuple[str | None, int]:
    """``PORT``, ``:PORT``, ``HOST:PORT`` or ``[V6]:PORT`` → (host, port); no host (None)
    means every interface: Prometheus scrapes nodes from elsewhere."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = "", text.strip()
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"metrics listen address {text!r}: use PORT or HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"metrics listen address {text!r}: port out of range")
    return host.strip("[]") or None, number


TOKEN_ENV = "HAL_METRICS_TOKEN"
CERT_ENV = "HAL_METRICS_TLS_CERT"
KEY_ENV = "HAL_METRICS_TLS_KEY"


def metrics_security(cert: str | None, key: str | None, token_file: str | None) -> None:
    """A process's ``--metrics-tls-cert``/``--metrics-tls-key``/``--metrics-token-file``,
    checked now and handed to ``start_metrics_server`` through its environment."""
    from hal.core.errors import InvalidRequest
    from hal.host.tls import TlsSetupError, check_pair

    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not text"
            raise InvalidRequest(
                f"cannot read --metrics-token-file {token_file} ({reason})",
                field="metrics_token_file",
            ) from None
        if not token:
            raise InvalidRequest(f"--metrics-token-file {token_file} is empty")
        os.environ[TOKEN_ENV] = token
    if bool(cert) != bool(key):
        raise InvalidRequest(
            "/metrics over TLS needs both --metrics-tls-cert and --metrics-tls-key",
            field="metrics_tls_cert",
        )
    if cert and key:
        try:
            check_pair(cert, key)
        except TlsSetupError as err:
            raise InvalidRequest(str(err), field="metrics_tls_cert") from None
        os.environ[CERT_ENV], os.environ[KEY_ENV] = cert, key


def _tls_context() -> ssl.SSLContext | None:
    cert, key = os.environ.get(CERT_ENV, ""), os.environ.get(KEY_ENV, "")
    if not (cert and key):
        return None
    from hal.host.tls import server_context

    return server_context(cert, key)


async def start_metrics_server(listen: str, registry: CollectorRegistry) -> asyncio.Server:
    """Serve ``GET /metrics`` on ``listen`` until the returned server is closed; over
    TLS with HAL_METRICS_TLS_CERT/KEY, asking for HAL_METRICS_TOKEN when set."""
    # here, not at import: `hal agent` reads ``parse_listen`` and serves no metrics
    # unless asked to, and prometheus-client costs it ~20 ms of CPU at every start
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    host, port = parse_listen(listen)
    token = os.environ.get(TOKEN_ENV, "").strip() or None

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path = _request_line(head)
            if token is not None and not _authorized(head, token):
                body, status, kind = (
                    b"missing or wrong token: send Authorization: Bearer <the metrics token> "
                    b"(Prometheus: authorization.credentials_file)\n",
                    "401 Unauthorized",
                    "text/plain",
                )
            elif method in ("GET", "HEAD") and path == "/metrics":
                body, status, kind = generate_latest(registry), "200 OK", CONTENT_TYPE_LATEST
            else:
                body, status, kind = b"not found: try /metrics\n", "404 Not Found", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode("latin-1")
                + (body if method != "HEAD" else b"")
            )
            await writer.drain()
        except (
            TimeoutError,
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            pass  # a client that went away or sent junk: nothing to answer
        except ssl.SSLError:
            pass  # a client that does not trust us, or speaks plain HTTP
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(
        handle, host, port, limit=MAX_REQUEST_BYTES, ssl=_tls_context()
    )


def _authorized(head: bytes, token: str) -> bool:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            scheme, _, given = value.strip().decode("latin-1").partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)
    return False


def _request_line(head: bytes) -> tuple[str, str]:
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(parts) < 2:
        return "", ""
    return parts[0], parts[1].split("?", 1)[0]
