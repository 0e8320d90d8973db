"""A small ``GET /metrics`` listener on an asyncio loop, for processes that have no HTTP
server of their own (node agents, cache nodes).

Everything is read on the process's event loop, so a scrape never sees its state
mid-step. Off unless an address is given: several such processes may share a host
(``hal up``, tests) and a fixed default port would collide.
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

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


async def start_metrics_server(listen: str, registry: CollectorRegistry) -> asyncio.Server:
    """Serve ``GET /metrics`` on ``listen`` until the returned server is closed."""
    host, port = parse_listen(listen)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path = _request_line(head)
            if method in ("GET", "HEAD") and path == "/metrics":
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
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port, limit=MAX_REQUEST_BYTES)


def _request_line(head: bytes) -> tuple[str, str]:
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(parts) < 2:
        return "", ""
    return parts[0], parts[1].split("?", 1)[0]
