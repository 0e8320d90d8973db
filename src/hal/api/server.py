"""``HalServer``: the control plane (``hal.server.ControlPlane``) served over HTTP: its REST
app, the dashboard and metrics routes, the embedded cache control plane, and uvicorn.

server = HalServer(config, "sqlite:////var/lib/hal/hal.db")
await server.serve("127.0.0.1", 8470, stop)     # or mount server.app elsewhere
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, cast

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hal.api import errors
from hal.api.app import create_app
from hal.api.role_gate import install as install_role_gate
from hal.api.routes_observe import install as install_observe
from hal.cache.app import CacheControlPlane
from hal.cache.auth import cache_token
from hal.config.model import HalConfig
from hal.core.clock import Clock
from hal.core.errors import Conflict, InvalidRequest
from hal.host.tls import ServerTls, TlsSetupError, peer_names
from hal.observe.listener import TOKEN_ENV as METRICS_TOKEN_ENV
from hal.observe.logging import uvicorn_log_config
from hal.server.control_plane import ControlPlane, cache_db_url

log = logging.getLogger(__name__)

CACHE_PREFIX = "/cache"  # where --cache-control-plane mounts the cache control plane


class HalServer(ControlPlane):
    def __init__(
        self,
        config: HalConfig,
        db_url: str,
        clock: Clock | None = None,
        *,
        data_dir: str | Path | None = None,
        cache_plane: bool = False,
        config_path: str | Path | None = None,
    ) -> None:
        super().__init__(config, db_url, clock, data_dir=data_dir, config_path=config_path)
        # a standby comes up at once and leads later (``ControlPlane.begin``)
        self.app = create_app(self.ctx, on_start=self.begin, on_stop=self.stop)
        # --cache-control-plane: the cache contract's API under /cache, in this process
        self.cache_plane: CacheControlPlane | None = None
        if cache_plane:
            self.cache_plane = CacheControlPlane(
                cache_db_url(db_url, self.data_dir), token=cache_token()
            )
            # the cache app types its ASGI arguments as dict, Starlette as MutableMapping
            self.app.mount(CACHE_PREFIX, cast(ASGIApp, self.cache_plane.app))
        install_observe(self.app, self.observe)
        install_role_gate(self.app, self.leadership)  # outermost: every answer has a role
        # /metrics asks for this token when set (`hal server --metrics-token-file`)
        self.app.state.metrics_token = os.environ.get(METRICS_TOKEN_ENV, "").strip() or None
        self._uvicorn: uvicorn.Server | None = None  # while ``serve`` runs
        self.on_fenced = self._stop_serving

    def _reload_tls(self, tls: ServerTls | None) -> None:
        """SIGHUP: serve the certificate files as they are now (renewed in place)."""
        server = self._uvicorn
        if tls is None or server is None or server.config.ssl is None:
            return
        try:
            tls.reload(server.config.ssl)
        except TlsSetupError as err:
            log.error("SIGHUP: kept the TLS certificate served until now: %s", err)
        else:
            log.info("SIGHUP: serving the TLS certificate %s as it is now", tls.cert)

    def _stop_serving(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True

    async def start(self) -> None:
        await super().start()
        if self.cache_plane is not None:
            await self.cache_plane.start()

    async def stop(self) -> None:
        if self.cache_plane is not None and self.leadership.role == "leader":
            await self.cache_plane.stop()
        await super().stop()

    async def serve(
        self,
        host: str,
        port: int,
        stop: asyncio.Event | None = None,
        *,
        sock: socket.socket | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        """Serve HTTP until ``stop`` is set (or the process gets SIGINT/SIGTERM), on
        ``sock`` when given (bound by ``listen_socket``), else on ``host``:``port``;
        HTTPS with ``tls`` (with its ``client_ca``, agents must present a certificate
        for their node: mutual TLS)."""
        sockets = [sock if sock is not None else listen_socket(host, port)]
        self.url = own_url(host, port, https=tls is not None)
        if not self.leadership.url:  # (``--advertise-url`` sets it before ``claim``)
            self.leadership.url = self.url
        config = uvicorn.Config(
            self.app,
            host=host,
            port=port,
            log_level="warning",
            log_config=uvicorn_log_config(),
            access_log=False,
            timeout_graceful_shutdown=5,
            lifespan="on",
            **_tls_options(tls),
        )
        self.app.state.agent_mtls = tls is not None and tls.client_ca is not None
        loop = asyncio.get_running_loop()

        def release() -> None:  # from uvicorn's signal handler
            def start() -> None:
                self._releasing = loop.create_task(self.release_waiters())

            loop.call_soon_threadsafe(start)

        if stop is None:
            # `hal server`: SIGHUP re-reads the configuration, as slurmctld's, and the TLS
            # certificate (`hal up` and embedders own their signals: there it means stop)
            def hangup() -> None:
                self._reload_tls(tls)
                self._reconfigure_on_hangup()

            loop.add_signal_handler(signal.SIGHUP, hangup)
            self._uvicorn = _Server(config, release)
            try:
                await self._uvicorn.serve(sockets)
            finally:
                loop.remove_signal_handler(signal.SIGHUP)
            return
        server = self._uvicorn = _EmbeddedServer(config, release)
        serving = asyncio.create_task(server.serve(sockets))
        stopped = asyncio.create_task(stop.wait())
        # (serving ends by itself when the server is fenced)
        await asyncio.wait((serving, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        await self.release_waiters()
        server.should_exit = True
        await serving


def own_url(host: str, port: int, *, https: bool = False) -> str:
    """The URL agents reach this server at: ``host``, or this machine's name where
    the server listens on every address."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    scheme = "https" if https else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _tls_options(tls: ServerTls | None) -> dict[str, Any]:
    """uvicorn's protocol and TLS settings for ``tls``; with a client CA, a protocol that
    hands the names a client's certificate proves to the app (``hal.api.deps``)."""
    if tls is None:
        return {"http": _HalProtocol}
    options: dict[str, Any] = {
        "ssl_certfile": tls.cert,
        "ssl_keyfile": tls.key,
        "http": _HalProtocol,
    }
    if tls.client_ca:
        options |= {
            "ssl_ca_certs": tls.client_ca,
            "ssl_cert_reqs": ssl.CERT_OPTIONAL,  # users have tokens, not certificates
            "http": _CertifiedProtocol,
        }
    return options


# What a request uvicorn's parser refuses is told (httptools: a request line or header
# that is not HTTP/1.1, or a URL past the 65,535 bytes its URL parser can index)
UNREADABLE = (
    "the server could not read this request as HTTP/1.1: a malformed request line or "
    "header, or a URL longer than 65,535 bytes (send long lists in a request body)"
)


class _HalProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, but a request its parser refuses gets a problem+json
    400 that says what to do, as every other refusal, not uvicorn's text/plain "Invalid
    HTTP request received." (a 120 kB query string got that)."""

    def send_400_response(self, msg: str) -> None:
        body = bytes(errors.problem(400, "invalid_request", UNREADABLE).body)
        content = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/problem+json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


class _CertifiedProtocol(_HalProtocol):
    """``_HalProtocol``, adding to each request's scope the names the client's verified
    certificate proves: ``extensions["tls"]["client_names"]``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._client_names = sorted(peer_names(transport.get_extra_info("peercert")))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = {"tls": {"client_names": self._client_names}}


def listen_socket(host: str, port: int) -> socket.socket:
    """The control plane's listening socket, bound before anything else starts: a port
    that another process holds is one clear error here, not uvicorn's traceback once the
    server has started (nor, for ``hal up``, "HAL is up" from that other process's
    ``/healthz`` and agents sent to it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: TIME_WAIT
        sock.bind((host, port))
    except socket.gaierror as err:
        sock.close()
        raise InvalidRequest(
            f"--host {host!r} is not an address of this machine ({err.strerror})", field="host"
        ) from None
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise Conflict(
                f"port {port} on {host} is already in use by another process (another "
                "`hal up` or `hal server`?); stop it, or choose another port with --port",
                field="port",
            ) from None
        raise InvalidRequest(
            f"cannot listen on {host}:{port}: {err.strerror}", field="host"
        ) from None
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, telling HAL when a signal asks it to stop (``release``)."""

    def __init__(self, config: uvicorn.Config, release: Callable[[], None]) -> None:
        super().__init__(config)
        self._release = release

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._release()
        super().handle_exit(sig, frame)


class _EmbeddedServer(_Server):
    """A uvicorn server that leaves signals to its owner (``hal up`` stops it via ``stop``)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
