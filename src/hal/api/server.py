"""``HalServer``: store + cluster mirror + scheduler service + REST app, and their lifecycle.

server = HalServer(config, "sqlite:////var/lib/hal/hal.db")
await server.serve("127.0.0.1", 8470, stop)     # or mount server.app elsewhere
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from hal.api.app import create_app
from hal.api.auth import TokenCache, new_token, token_hash
from hal.api.context import ServerContext
from hal.config.model import HalConfig
from hal.core.clock import Clock, SystemClock
from hal.observe.logging import uvicorn_log_config
from hal.observe.plane import ObservePlane
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.service import SchedulerService
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore

log = logging.getLogger("hal.server")
HOUSEKEEPING_S = 1.0


def sqlite_url(data_dir: str | Path) -> str:
    path = Path(data_dir).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / 'hal.db'}"


class HalServer:
    def __init__(self, config: HalConfig, db_url: str, clock: Clock | None = None) -> None:
        self.config = config
        self.store = SqlStateStore(db_url)
        self.cluster = Cluster(self.store, config, clock or SystemClock())
        # An explicit [scheduler] profile is taken as written; the default one gains the
        # topology plugin when the config has a [topology].
        self.scheduler = build_scheduler(
            config.scheduler_profile or default_profile(topology=config.topology)
        )
        self.observe = ObservePlane(config, self.cluster, self.cluster.clock)
        self.service = SchedulerService(
            self.cluster,
            self.observe.decide(self.scheduler),
            interval_s=config.scheduler_interval_seconds,
        )
        self.observe.attach(self.service)
        self.ctx = ServerContext(
            config=config,
            cluster=self.cluster,
            tokens=TokenCache(self.store),
            service=self.service,
            scheduler=self.scheduler,
        )
        self.app = create_app(self.ctx, on_start=self.start, on_stop=self.stop)
        self.observe.install(self.app)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._stop = asyncio.Event()
        await self.cluster.load()
        await self.observe.start()
        self._tasks = [
            asyncio.create_task(self.service.run(self._stop), name="hal-scheduler"),
            asyncio.create_task(self._housekeeping(), name="hal-housekeeping"),
        ]
        log.info("control plane started", extra={"revision": self.cluster.revision})

    async def stop(self) -> None:
        self._stop.set()
        self.cluster.changed.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.observe.stop()
        await self.cluster.close()

    async def _housekeeping(self) -> None:
        ticks = 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), HOUSEKEEPING_S)
            try:
                await agents.check_nodes(self.cluster)
                ticks += 1
                if ticks % 30 == 0:
                    self.cluster.prune()
            except Exception:
                log.exception("housekeeping failed")

    async def serve(self, host: str, port: int, stop: asyncio.Event | None = None) -> None:
        """Serve HTTP until ``stop`` is set (or the process gets SIGINT/SIGTERM)."""
        config = uvicorn.Config(
            self.app,
            host=host,
            port=port,
            log_level="warning",
            log_config=uvicorn_log_config(),
            access_log=False,
            timeout_graceful_shutdown=5,
            lifespan="on",
        )
        server = uvicorn.Server(config) if stop is None else _EmbeddedServer(config)
        if stop is None:
            await server.serve()
            return
        serving = asyncio.create_task(server.serve())
        await stop.wait()
        server.should_exit = True
        await serving


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its owner (``hal up`` stops it via ``stop``)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def ensure_user(store: SqlStateStore, name: str, *, admin: bool, now: float) -> str | None:
    """Create ``name`` with a fresh token if absent; return the token (None if it existed)."""
    store.migrate()
    if name in {n for n, _ in store.users()}:
        return None
    token = new_token()
    with store.transaction() as tx:
        tx.add_user(name, token_hash(token), admin, now)
    return token


def reset_token(store: SqlStateStore, name: str, *, admin: bool) -> str:
    token = new_token()
    with store.transaction() as tx:
        tx.set_user_token(name, token_hash(token), admin)
    return token
