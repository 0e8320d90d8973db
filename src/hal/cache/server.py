"""Run the cache control plane as its own process (``hal cache control-plane``)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import uvicorn

from hal.cache.app import CacheControlPlane
from hal.cache.directory import DirectorySettings
from hal.host.tls import ServerTls

log = logging.getLogger("hal.cache.server")


def default_db_url() -> str:
    path = Path("~/.local/share/hal").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / 'cache.db'}"


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--listen {listen!r} must be HOST:PORT, e.g. 127.0.0.1:8480")
    return host.strip("[]"), int(port)


async def serve(
    listen: str,
    db_url: str | None,
    settings: DirectorySettings,
    *,
    token: str | None = None,
    tls: ServerTls | None = None,
) -> None:
    host, port = split_listen(listen)
    plane = CacheControlPlane(db_url or default_db_url(), settings, token=token)
    ssl_options: dict[str, Any] = (
        {} if tls is None else {"ssl_certfile": tls.cert, "ssl_keyfile": tls.key}
    )
    config = uvicorn.Config(
        plane.app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        interface="asgi3",
        # many nodes keep connections open; a short keep-alive would make them reconnect
        timeout_keep_alive=30,
        **ssl_options,
    )
    log.info("cache control plane listening", extra={"host": host, "port": port})
    await uvicorn.Server(config).serve()


def run(
    listen: str,
    db_url: str | None,
    settings: DirectorySettings,
    *,
    token: str | None = None,
    tls: ServerTls | None = None,
) -> int:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        pass
    asyncio.run(serve(listen, db_url, settings, token=token, tls=tls))
    return 0
