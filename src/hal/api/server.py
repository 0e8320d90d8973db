"""``HalServer``: store + cluster mirror + scheduler service + prediction service + REST
app, and their lifecycle.

server = HalServer(config, "sqlite:////var/lib/hal/hal.db")
await server.serve("127.0.0.1", 8470, stop)     # or mount server.app elsewhere

``data_dir`` holds what is not in the database (the learned predictor's model, in
``predict/learned.json``); by default the SQLite database's directory. With PostgreSQL
and no ``data_dir`` the model is not persisted: it is rebuilt from the accounting history
at every start.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import cast

import uvicorn
from starlette.types import ASGIApp

from hal.api.app import create_app
from hal.api.auth import TokenCache, new_token, token_hash
from hal.api.cloud import CloudService, cloud_providers, cloud_service
from hal.api.cloud_token import CLOUD_AGENT
from hal.api.context import ServerContext
from hal.api.data import DataAwareRunner, DataService
from hal.api.job_mail import JobMail
from hal.api.mail_program import MailProgram
from hal.api.predictions import MODEL_FILE, PredictionService
from hal.api.priority import PriorityService
from hal.api.profile import config_error, server_profile
from hal.api.reconfigure import (
    added_partitions,
    config_changes,
    empty_partitions,
    removed_partitions,
    restart_only,
)
from hal.cache.app import CacheControlPlane
from hal.cloud.provider import Provider
from hal.config.model import HalConfig, load_config
from hal.core.clock import Clock, SystemClock
from hal.core.errors import Conflict, HalError, InvalidRequest
from hal.core.tasks import cancel_tasks
from hal.observe.logging import uvicorn_log_config
from hal.observe.plane import ObservePlane
from hal.predict import CONFIGURABLE, Predictor, SharedPredictor, make_predictor
from hal.scheduler.framework import ProfileError
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import BACKFILL, build_scheduler, default_registry
from hal.scheduler.service import PacedScheduler, PassRunner, SchedulerService
from hal.state import agents, preempt, reservations, step_signal
from hal.state.cluster import Cluster
from hal.state.config_change import take_config
from hal.state.retention import RecordPurge
from hal.state.server_lock import ServerLock
from hal.state.store import SqlStateStore
from hal.wire.nodes import Reconfigured, kept_warning

log = logging.getLogger("hal.server")
HOUSEKEEPING_S = 1.0


def sqlite_url(data_dir: str | Path) -> str:
    path = Path(data_dir).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / 'hal.db'}"


def sqlite_dir(db_url: str) -> Path | None:
    """The directory of a SQLite database file (None for PostgreSQL or in-memory)."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database).parent


def predictor_name(profile: Mapping[str, object], config: HalConfig) -> str:
    """The predictor the server trains and plans with: the backfill plugin's own
    ``predictor`` argument when the profile gives a valid one (the more specific
    setting), else ``[scheduler] predictor``. An invalid argument is left for the
    plugin's factory to refuse, naming the field."""
    all_args = profile.get("plugin_args")
    args = all_args.get(BACKFILL) if isinstance(all_args, Mapping) else None
    named = args.get("predictor") if isinstance(args, Mapping) else None
    return named if isinstance(named, str) and named in CONFIGURABLE else config.scheduler_predictor


def server_scheduler(
    config: HalConfig, profile: Mapping[str, object], predictor: Predictor
) -> Scheduler:
    """The scheduler for ``config`` with ``profile`` (``server_profile``), planning with
    the server's ``predictor``: at start and at every reconfigure. Raises
    ``ProfileError`` naming the field for a profile it cannot build."""
    return build_scheduler(
        profile,
        default_registry(
            predictor=predictor,
            policy=config.priority,
            preemption_policy=config.preemption,
            partitions=config.partition_objects(),
            licenses=config.licenses,
        ),
    )


CACHE_PREFIX = "/cache"  # where --cache-control-plane mounts the cache control plane


def cache_db_url(db_url: str, data_dir: Path | None) -> str:
    """The embedded cache control plane's database: a ``cache.db`` beside SQLite state
    (two writers on one SQLite file would lock each other out), else HAL's own database
    (its tables are ``cache_*``)."""
    if db_url.startswith("sqlite") and data_dir is not None:
        return f"sqlite:///{data_dir / 'cache.db'}"
    return db_url


class HalServer:
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
        self.config = config
        # the file ``scontrol reconfigure`` re-reads (``reconfigure``): the one this
        # config came from, or where it would have (then absent: the defaults again)
        self.config_path = Path(config_path) if config_path is not None else None
        self._config_was_read = self.config_path is not None and self.config_path.exists()
        self._reconfiguring = asyncio.Lock()
        self.store = SqlStateStore(db_url)
        self.cluster = Cluster(self.store, config, clock or SystemClock())
        self.data_dir = Path(data_dir).expanduser() if data_dir else sqlite_dir(db_url)
        # the default profile for this config, tuned or replaced by [scheduler]
        profile = server_profile(config)
        data = config.data
        self.predictor = SharedPredictor(make_predictor(predictor_name(profile, config)))
        self.scheduler = server_scheduler(config, profile, self.predictor)
        self.predictions = PredictionService(
            self.cluster,
            self.predictor,
            model_path=self.data_dir / MODEL_FILE if self.data_dir else None,
        )
        self.priority = PriorityService(self.cluster, config.priority)
        self.observe = ObservePlane(
            config,
            self.cluster,
            self.cluster.clock,
            predicted_at_start=self.predictions.start_prediction,
        )
        self.predictions.on_finished = self.observe.metrics.observe_prediction
        self.predictions.on_run_finished = self.observe.anomalies.run_finished
        self.observe.metrics.declare_predictor(self.predictor.name)
        # [data]: the data plane's view goes into each pass's snapshot (DataAwareRunner)
        self.data = DataService(data, self.cluster) if data is not None else None
        self.paced = PacedScheduler(
            self.scheduler, time_plugins_every_s=self.observe.plugin_timing_every_s
        )
        runner: PassRunner = self.paced
        if self.data is not None:
            runner = DataAwareRunner(runner, self.data)
        self.service = SchedulerService(
            self.cluster,
            self.observe.decide(runner),
            forecast=runner.forecast,
            interval_s=config.scheduler_interval_seconds,
        )
        self.observe.attach(self.service)
        # [accounting]: old events and finished jobs deleted in the background
        self.purge: RecordPurge | None = None
        if config.accounting.purges:
            self.purge = RecordPurge(self.cluster, config.accounting)
            self.purge.on_purged = self.observe.metrics.observe_purge
        # job mail (--mail-type): [mail] prog, run off the hot paths (docs/mail.md)
        self.mail = JobMail(
            self.cluster,
            MailProgram(
                config.mail, lambda result: self.observe.metrics.job_mail.labels(result).inc()
            ),
            self.cluster.clock,
        )
        self.ctx = ServerContext(
            config=config,
            cluster=self.cluster,
            tokens=TokenCache(self.store),
            service=self.service,
            scheduler=self.scheduler,
            predictions=self.predictions,
            data=self.data,
            reconfigure=self.reconfigure,
        )
        if self.data is not None:
            self.observe.metrics.data_stats = self.data.status
        self.observe.metrics.artifacts = self.ctx.artifacts
        self.app = create_app(self.ctx, on_start=self.start, on_stop=self.stop)
        self.app.state.priority = self.priority  # /v1/priority, /v1/shares, explain
        self.app.state.data_dir = self.data_dir  # scontrol show config's StateSaveLocation
        # --cache-control-plane: the cache contract's API under /cache, in this process
        self.cache_plane: CacheControlPlane | None = None
        if cache_plane:
            self.cache_plane = CacheControlPlane(cache_db_url(db_url, self.data_dir))
            # the cache app types its ASGI arguments as dict, Starlette as MutableMapping
            self.app.mount(CACHE_PREFIX, cast(ASGIApp, self.cache_plane.app))
        self.observe.install(self.app)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._releasing: asyncio.Task[None] | None = None  # held: a task only weakly held
        self._server_lock: ServerLock | None = None
        self._uvicorn: uvicorn.Server | None = None  # while ``serve`` runs
        # SIGHUP reconfigures, one task each (held: a task is only weakly held); they
        # wait their turn on ``_reconfiguring`` and are cancelled at stop
        self._hangups: set[asyncio.Task[None]] = set()
        # [cloud]: each group's provider (its settings checked now), and the autoscaler
        # over them, made at start (it needs the URL ``serve`` listens on)
        self.cloud_providers = cloud_providers(config.cloud, config.cluster_name, self.data_dir)
        self.cloud: CloudService | None = None
        self.url = ""
        # why this server stopped itself: another took the database's lock (PostgreSQL)
        # while its session was gone (``_keep_claim``); "" while it has not
        self.fenced = ""

    def claim(self) -> None:
        """Take the database's server lock (``hal.state.server_lock``), if not yet held: a
        second server on this database is refused (``Conflict``) before it reads anything.
        The CLI calls this before serving, so the refusal is one line; ``start`` calls it
        for everyone else."""
        if self._server_lock is None:
            self._server_lock = ServerLock.take(self.store)

    def unclaim(self) -> None:
        """Let go of the server lock (``stop`` does, after the last write; the CLI too
        when the server never started)."""
        if self._server_lock is not None:
            self._server_lock.release()
            self._server_lock = None

    async def start(self) -> None:
        self._stop = asyncio.Event()
        await asyncio.to_thread(self.claim)
        await self.cluster.load()
        await self.ctx.artifacts.load()
        await self.ctx.steps.restore()  # the steps that ran on while it was away
        await self.predictions.start()
        await self.priority.start()
        await self.observe.start()
        self.mail.seed(self.cluster.jobs.values())
        if self.cache_plane is not None:
            await self.cache_plane.start()
        if self.data is not None:
            await self.data.start()
        self._tasks = [
            asyncio.create_task(self.priority.run(self._stop), name="hal-priority"),
            asyncio.create_task(self.service.run(self._stop), name="hal-scheduler"),
            asyncio.create_task(self._housekeeping(), name="hal-housekeeping"),
            asyncio.create_task(self.mail.run(self._stop), name="hal-mail"),
        ]
        if self.purge is not None:
            self._tasks.append(asyncio.create_task(self.purge.run(self._stop), name="hal-purge"))
        if self.cloud_providers:
            await self._start_cloud()
        log.info("control plane started", extra={"revision": self.cluster.revision})

    async def _start_cloud(self) -> None:
        """The autoscaler over ``cloud_providers``: at start, or at the reconfigure that
        gives ``[cloud]`` its first group."""
        assert self.data_dir is not None  # (``cloud_providers`` refused [cloud] without)
        self.cloud = await asyncio.to_thread(
            cloud_service, self.cluster, self.cloud_providers, self.data_dir, self.url
        )
        self.cloud.forget_token = lambda: self.ctx.tokens.forget_user(CLOUD_AGENT)
        self.app.state.cloud = self.cloud  # GET /v1/cloud
        self.observe.metrics.cloud_stats = self.cloud.status
        self._tasks.append(asyncio.create_task(self.cloud.run(self._stop), name="hal-cloud"))

    async def _reconfigure_cloud(self, providers: dict[str, Provider]) -> None:
        """The autoscaler takes the new ``[cloud]`` (the cluster has its templates)."""
        self.cloud_providers = providers
        if self.cloud is not None:
            self.cloud.configure(self.config.cloud, providers)
            await self.cloud.rebind()
        elif providers and self._tasks:  # the first group, in a started server
            await self._start_cloud()

    async def stop(self) -> None:
        self._stop.set()
        self.cluster.changed.set()
        await cancel_tasks([*self._tasks, *self._hangups])
        self._tasks = []
        await self.ctx.steps.stop()  # local steps their jobs ended: written before close
        if self.data is not None:
            await self.data.stop()
        if self.cache_plane is not None:
            await self.cache_plane.stop()
        await self.observe.stop()
        await self.predictions.stop()
        await self.cluster.close()
        self.unclaim()  # after the last write

    # -- scontrol reconfigure -------------------------------------------------------
    async def reconfigure(self, by: str = "") -> Reconfigured:
        """Re-read ``config_path``, validate it whole as start-up does, and take it
        (``hal.api.reconfigure``, ADR 0014). A mistake raises the start-up error
        (``FILE: key: what to write``) and changes nothing; a partition still in use
        is refused (``hal.state.config_change``). ``by``: who asked, for the log."""
        async with self._reconfiguring:
            path = self.config_path
            if path is None:
                raise InvalidRequest(
                    "this server was started without a configuration file; start it with "
                    "--config FILE (or DATA_DIR/hal.toml) to reconfigure it",
                    field="config",
                )
            if path.exists() or self._config_was_read:
                new = await asyncio.to_thread(load_config, path)
            else:  # as at start: no file there, the defaults
                new = HalConfig()
            running = self.config

            def predictor_of(config: HalConfig) -> str:
                return predictor_name(server_profile(config), config)

            try:
                new, kept = restart_only(running, new, predictor_of)
                scheduler = server_scheduler(new, server_profile(new), self.predictor)
            except ProfileError as err:
                raise config_error(err, str(path)) from None
            providers = await asyncio.to_thread(
                cloud_providers, new.cloud, new.cluster_name, self.data_dir, self.cloud_providers
            )
            changed = config_changes(running, new)
            removed = removed_partitions(running, new)
            data = {
                "changed": changed,
                "kept": kept,
                "partitions_added": added_partitions(running, new),
                "partitions_removed": removed,
                "by": by,
            }
            await take_config(
                self.cluster, new, removed, data, lambda: self._configure(new, scheduler)
            )
            await self._reconfigure_cloud(providers)
            for key in kept:
                log.warning(kept_warning(key))
            log.info(
                "reconfigured from %s by %s: %s",
                path,
                by or "?",
                ", ".join(changed) or "nothing changed",
                extra={"changed": changed, "kept": kept},
            )
            warnings = empty_partitions(self.cluster)
            for warning in warnings:
                log.warning(warning)
            return Reconfigured(changed=changed, kept=kept, warnings=warnings)

    def _configure(self, config: HalConfig, scheduler: Scheduler) -> None:
        """The server's parts take ``config`` (the cluster has already): each through
        the method its constructor used, so start and reconfigure share one path."""
        self.config = self.ctx.config = config
        self.priority.configure(config.priority)
        self.priority.recalculate()  # sprio and the queue order at once
        # a pass in flight finishes with the old scheduler; its plan is checked against
        # the new partitions when it is applied
        self.scheduler = self.ctx.scheduler = self.paced.scheduler = scheduler
        self.service.interval_s = config.scheduler_interval_seconds
        self.mail.program.config = config.mail  # read at each mail sent
        if self.purge is not None:
            self.purge.config = config.accounting
        elif config.accounting.purges:
            self.purge = RecordPurge(self.cluster, config.accounting)
            self.purge.on_purged = self.observe.metrics.observe_purge
            if self._tasks:  # started: its loop starts now
                self._tasks.append(
                    asyncio.create_task(self.purge.run(self._stop), name="hal-purge")
                )

    def _reconfigure_on_hangup(self) -> None:
        """SIGHUP (from the event loop): reconfigure as ``scontrol reconfigure`` does;
        the outcome is logged, a refusal with its reason."""

        async def run() -> None:
            try:
                await self.reconfigure(by="SIGHUP")
            except HalError as err:
                log.error("reconfigure (SIGHUP) refused: %s", err.message)
            except Exception:
                log.exception("reconfigure (SIGHUP) failed")

        task = asyncio.get_running_loop().create_task(run(), name="hal-reconfigure")
        self._hangups.add(task)
        task.add_done_callback(self._hangups.discard)

    async def _housekeeping(self) -> None:
        ticks = 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), HOUSEKEEPING_S)
            try:
                # during a database outage: one probe a tick, nothing else (none of it
                # could be written); the probe that succeeds ends the outage
                if not await self.cluster.database_ok() or not await self._keep_claim():
                    continue
                await self.cluster.reconcile()
                await self.ctx.steps.record_unrecorded()
                await step_signal.signal_due(self.ctx.steps)
                await agents.check_nodes(self.cluster)
                await preempt.end_graced(self.cluster)
                await preempt.resume_freed(self.cluster)
                await reservations.end_expired(self.cluster)
                ticks += 1
                if ticks % 30 == 0:
                    self.cluster.prune()
                    await self.cluster.forget_old_submit_keys()
            except Exception:
                log.exception("housekeeping failed")

    async def _keep_claim(self) -> bool:
        """Whether the server lock is still this server's (``ServerLock.keep``: taken
        again if its PostgreSQL session ended). When another server took it meanwhile,
        this one's mirror can no longer be trusted: it is fenced, and stops serving."""
        lock = self._server_lock
        if lock is None:
            return True
        try:
            if await asyncio.to_thread(lock.keep, self.store):
                log.warning("took the database's server lock again (its session had ended)")
        except Conflict as err:
            self.fenced = (
                f"{err} (it took the lock while this server's connection was down); this "
                "server stops, as its view of the cluster may be stale"
            )
            log.critical("%s", self.fenced)
            self._stop.set()
            self._releasing = asyncio.create_task(self._release_waiters())
            if self._uvicorn is not None:
                self._uvicorn.should_exit = True
            return False
        except Exception as err:  # the database is out of reach: the next tick tries again
            log.debug("server lock not checked: %s", err)
        return True

    async def serve(
        self,
        host: str,
        port: int,
        stop: asyncio.Event | None = None,
        *,
        sock: socket.socket | None = None,
    ) -> None:
        """Serve HTTP until ``stop`` is set (or the process gets SIGINT/SIGTERM), on
        ``sock`` when given (bound by ``listen_socket``), else on ``host``:``port``."""
        sockets = [sock if sock is not None else listen_socket(host, port)]
        self.url = own_url(host, port)
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
        loop = asyncio.get_running_loop()

        def release() -> None:  # from uvicorn's signal handler
            def start() -> None:
                self._releasing = loop.create_task(self._release_waiters())

            loop.call_soon_threadsafe(start)

        if stop is None:
            # `hal server`: SIGHUP re-reads the configuration, as slurmctld's
            # (`hal up` and embedders own their signals: there it means stop)
            loop.add_signal_handler(signal.SIGHUP, self._reconfigure_on_hangup)
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
        await self._release_waiters()
        server.should_exit = True
        await serving

    async def _release_waiters(self) -> None:
        """Before the graceful shutdown: requests that wait by design (agents' output
        polls, followed event streams) answer now, so shutting down does not wait
        ``timeout_graceful_shutdown`` for them and then cancel them with a traceback."""
        self.observe.output_relay.close()
        self.ctx.steps.release_waiters()
        await self.cluster.release_waiters()


def own_url(host: str, port: int) -> str:
    """The URL agents reach this server at: ``host``, or this machine's name where
    the server listens on every address."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


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


def ensure_user(
    store: SqlStateStore, name: str, *, admin: bool, now: float, agent: bool = False
) -> str | None:
    """Create ``name`` with a fresh token if absent; return the token (None if it existed).
    ``agent``: an agent's token, for any node."""
    store.migrate()
    if name in {u.name for u in store.users()}:
        return None
    token = new_token()
    with store.transaction() as tx:
        tx.add_user(name, token_hash(token), admin, now, agent=agent)
    return token


def agent_token(store: SqlStateStore, name: str, *, now: float) -> str:
    """A fresh agent token for any node under ``name`` (``hal up``'s agents): the user is
    created if absent, else its token replaced, so an agent of an earlier run holds none.
    A user or administrator of that name is left alone: a clear error instead."""
    token = ensure_user(store, name, admin=False, now=now, agent=True)
    if token is not None:
        return token
    user = next(u for u in store.users() if u.name == name)
    if not user.agent:
        raise Conflict(
            f"user {name} exists and is no agent, but the local agents use that name: "
            f"delete it (`hal user delete {name}`) and start again"
        )
    return reset_token(store, name, admin=False)


def reset_token(store: SqlStateStore, name: str, *, admin: bool) -> str:
    token = new_token()
    with store.transaction() as tx:
        tx.set_user_token(name, token_hash(token), admin)
    return token
