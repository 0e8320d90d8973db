"""``ControlPlane``: the store, the cluster mirror, the scheduler service and every other
service of the control plane, wired in one constructor, and their lifecycle (start, stop,
housekeeping, ``scontrol reconfigure``, the database's server lock). It speaks no HTTP:
``hal.api.server.HalServer`` serves it.

``data_dir`` holds what is not in the database (the learned predictor's model, in
``predict/learned.json``); by default the SQLite database's directory. With PostgreSQL
and no ``data_dir`` the model is not persisted: it is rebuilt from the accounting history
at every start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from hal.cloud.provider import Provider
from hal.config.model import HalConfig, load_config
from hal.config.power import check_programs
from hal.core.clock import Clock
from hal.core.errors import Conflict, HalError, InvalidRequest
from hal.core.job import Job
from hal.core.laps import Laps
from hal.core.tasks import cancel_tasks
from hal.host.clock import SystemClock
from hal.predict import CONFIGURABLE, Predictor, SharedPredictor, planning_predictor
from hal.scheduler.forked import FORK_FROM, ForkedScheduler
from hal.scheduler.framework import ProfileError
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import BACKFILL, build_scheduler, default_registry
from hal.scheduler.service import PacedScheduler, PassBounds, PassRunner, SchedulerService
from hal.server.auth import TokenCache
from hal.server.cloud import CloudService, cloud_providers, cloud_service
from hal.server.cloud_token import CLOUD_AGENT
from hal.server.data import DataAwareRunner, DataService
from hal.server.dissonance import DissonanceAwareRunner, DissonanceService
from hal.server.feedback import FeedbackService, load_key
from hal.server.job_mail import JobMail
from hal.server.mail_program import MailProgram
from hal.server.malleable import FeedbackLoop
from hal.server.observe.plane import ObservePlane
from hal.server.power import PowerService
from hal.server.predictions import MODEL_FILE, PredictionService
from hal.server.priority import PriorityService
from hal.server.profile import config_error, server_profile
from hal.server.reconfigure import (
    added_partitions,
    config_changes,
    empty_partitions,
    removed_partitions,
    restart_only,
)
from hal.server.services import Services
from hal.server.software_staging import SoftwareStaging, StagingRunner
from hal.server.standby import Leadership, stand_by
from hal.server.traffic import TrafficAwareRunner, TrafficService
from hal.state import agents, preempt, reservations, step_signal
from hal.state.cluster import Cluster
from hal.state.codec import JobRowMemo
from hal.state.config_change import take_config
from hal.state.leader import application_name
from hal.state.retention import RecordPurge
from hal.state.store import SqlStateStore
from hal.wire.nodes import Reconfigured, kept_warning

log = logging.getLogger("hal.server")
# after a takeover the predictor (its history read and replay) starts this much later
PREDICT_AFTER_TAKEOVER_S = 20.0
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


def pass_bounds(config: HalConfig) -> PassBounds:
    """The main pass's bounds from ``config``'s ``[scheduler]`` (ADR 0029): at start
    and at every reconfigure."""
    return PassBounds(
        config.scheduler_default_queue_depth,
        config.scheduler_sched_interval_s,
        config.scheduler_max_job_starts,
    )


def cache_db_url(db_url: str, data_dir: Path | None) -> str:
    """The embedded cache control plane's database: a ``cache.db`` beside SQLite state
    (two writers on one SQLite file would lock each other out), else HAL's own database
    (its tables are ``cache_*``)."""
    if db_url.startswith("sqlite") and data_dir is not None:
        return f"sqlite:///{data_dir / 'cache.db'}"
    return db_url


class ControlPlane:
    """The control plane without its HTTP edge: what ``HalServer`` serves, and what a
    test or an embedder may start and stop on its own."""

    def __init__(
        self,
        config: HalConfig,
        db_url: str,
        clock: Clock | None = None,
        *,
        data_dir: str | Path | None = None,
        config_path: str | Path | None = None,
    ) -> None:
        self.config = config
        # the file ``scontrol reconfigure`` re-reads (``reconfigure``): the one this
        # config came from, or where it would have (then absent: the defaults again)
        self.config_path = Path(config_path) if config_path is not None else None
        self._config_was_read = self.config_path is not None and self.config_path.exists()
        self._reconfiguring = asyncio.Lock()
        self.store = SqlStateStore(db_url, application_name=application_name())
        self.cluster = Cluster(self.store, config, clock or SystemClock())
        self.data_dir = Path(data_dir).expanduser() if data_dir else sqlite_dir(db_url)
        # the default profile for this config, tuned or replaced by [scheduler]
        profile = server_profile(config)
        data = config.data
        # the simulator's planning policy for the same names (``hal sim run --predictor
        # --correction``): what is measured on traces is what plans here
        self.predictor = SharedPredictor(
            planning_predictor(predictor_name(profile, config), config.scheduler_correction)
        )
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
        # the interference model learns from each run's time against its solo estimate
        self.dissonance = DissonanceService(self.cluster, self.data_dir)
        anomalies, dissonance = self.observe.anomalies, self.dissonance

        def run_finished(job: Job, predicted_s: float, version: int, runtime: float) -> None:
            anomalies.run_finished(job, predicted_s, version, runtime)
            dissonance.run_finished(job, predicted_s, version, runtime)

        self.predictions.on_run_finished = run_finished
        self.observe.metrics.declare_predictor(self.predictor.name)
        # [data]: the data plane's view goes into each pass's snapshot (DataAwareRunner)
        self.data = DataService(data, self.cluster) if data is not None else None
        # [scheduler] pass_process = "fork" or "auto": passes decided in a process
        # forked at the pass (ADR 0031)
        self.forked: ForkedScheduler | None = None
        where = config.scheduler_pass_process
        if where != "thread" and hasattr(os, "fork"):
            self.forked = ForkedScheduler(
                self.scheduler, fork_from=FORK_FROM if where == "auto" else 0
            )
        self.paced = PacedScheduler(
            self.forked or self.scheduler,
            time_plugins_every_s=self.observe.plugin_timing_every_s,
            bounds=pass_bounds(config),
        )
        runner: PassRunner = self.paced
        if self.data is not None:
            runner = DataAwareRunner(runner, self.data)
        # jobs' artifacts and Python environments fetched on their reserved nodes
        self.software = SoftwareStaging(self.cluster)
        runner = StagingRunner(runner, self.software)
        # the traffic graph (who talks to whom) goes into each pass's snapshot too
        self.traffic = TrafficService(self.cluster, config.harmonic)
        runner = TrafficAwareRunner(runner, self.traffic)
        runner = DissonanceAwareRunner(runner, self.dissonance)  # which classes clash
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
        # job mail (--mail-type): [mail] prog, run off the hot paths (docs/user/mail.md)
        self.mail = JobMail(
            self.cluster,
            MailProgram(
                config.mail, lambda result: self.observe.metrics.job_mail.labels(result).inc()
            ),
            self.cluster.clock,
        )
        # application feedback: each run's token is made with a key kept in data_dir
        # [power]: idle owned nodes powered down and up (its loop idles without [power])
        check_programs(config.power, str(self.config_path or "hal.toml"))
        self.power = PowerService(self.cluster, config.power)
        self.feedback = FeedbackService(self.cluster, load_key(self.data_dir))
        self.cluster.feedback_key = self.feedback.key
        self.observe.metrics.feedback_latest = self.feedback.running_latest
        # what jobs report acted on: malleable jobs resized, clashing jobs moved apart
        self.feedback_loop = FeedbackLoop(self.cluster, self.feedback, self.dissonance.view)
        self.feedback_loop.on_resized = self.observe.metrics.observe_resize
        self.feedback_loop.on_moved = self.observe.metrics.observe_move
        # what the HTTP edge reaches (``hal.api``), typed
        self.ctx = Services(
            config=config,
            cluster=self.cluster,
            tokens=TokenCache(self.store),
            service=self.service,
            scheduler=self.scheduler,
            predictions=self.predictions,
            priority=self.priority,
            data=self.data,
            traffic=self.traffic,
            dissonance=self.dissonance,
            feedback=self.feedback,
            power=self.power,
            observe=self.observe,
            data_dir=self.data_dir,
            reconfigure=self.reconfigure,
        )
        if self.data is not None:
            self.observe.metrics.data_stats = self.data.status
        self.observe.metrics.artifacts = self.ctx.artifacts
        self.observe.metrics.harmonic_stats = self.traffic.stats
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._releasing: asyncio.Task[None] | None = None  # held: a task only weakly held
        # the database's lock, the lead and the standby's wait (``hal.server.standby``)
        self.leadership = Leadership(self.store)
        self.ctx.leadership = self.leadership
        self._standing_by: asyncio.Task[None] | None = None
        self._started = False  # this server led (``start``): ``stop`` has things to stop
        # SIGHUP reconfigures, one task each (held: a task is only weakly held); they
        # wait their turn on ``_reconfiguring`` and are cancelled at stop
        self._hangups: set[asyncio.Task[None]] = set()
        # [cloud]: each group's provider (its settings checked now), and the autoscaler
        # over them, made at start (it needs the URL ``serve`` listens on)
        self.cloud_providers = cloud_providers(config.cloud, config.cluster_name, self.data_dir)
        self.cloud: CloudService | None = None
        self.url = ""  # where agents reach this control plane (its HTTP edge sets it)
        # called once this control plane has fenced itself (``_keep_claim``): its HTTP
        # edge stops serving
        self.on_fenced: Callable[[], None] | None = None
        # why this server stopped itself: another took the database's lock (PostgreSQL)
        # while its session was gone (``_keep_claim``); "" while it has not
        self.fenced = ""
        # seconds each step of the last ``start`` took (a takeover's breakdown, logged)
        self.start_timings: dict[str, float] = {}
        # of the jobs the last ``start`` loaded, how many came from a standby's read ahead
        # as they were (not fetched nor decoded again); None: no read ahead
        self.read_ahead: tuple[int, int] | None = None

    def claim(self) -> bool:
        """Take the database's server lock (``hal.state.server_lock``), if not yet held,
        before anything is read: True when this server leads. A second server on this
        database is refused (``Conflict``), or with ``leadership.standby`` on PostgreSQL
        stands by (False; ``begin`` waits for the lead). The CLI calls this before
        serving, so a refusal is one line; ``start`` calls it for everyone else."""
        return self.leadership.claim()

    def unclaim(self) -> None:
        """Let go of the server lock (``stop`` does, after the last write; the CLI too
        when the server never started)."""
        self.leadership.release()

    async def begin(self) -> None:
        """Start leading if the lock is this server's, else stand by and lead once it
        is (``hal.server.standby``): what the HTTP edge runs as it comes up, so a
        standby answers at once (``/healthz``, ``/v1/ha``, redirects)."""
        if self._stop.is_set():
            self._stop = asyncio.Event()
        if await asyncio.to_thread(self.claim):
            await self.start()
            return
        self._standing_by = asyncio.create_task(self._stand_by(), name="hal-standby")

    def _preload(self) -> int:
        """A standby's read ahead of the jobs ``Cluster.load`` will read at its takeover
        (kept decoded in the store's ``JobRowMemo``) and of the finished runs the fair
        share charges (``PriorityService.preload``); returns how many jobs."""
        if self.store.job_memo is None:
            self.store.job_memo = JobRowMemo()
        since = self.cluster.clock.now() - self.config.min_job_age_seconds
        jobs = len(self.store.load_jobs(active_or_ended_after=since))
        self.priority.preload()
        return jobs

    async def _stand_by(self) -> None:
        try:
            await stand_by(self.leadership, self.start, self._stop, self._preload)
            if self.leadership.leading:
                steps = {**self.leadership.lead_timings, **self.cluster.load_timings}
                steps.update(self.start_timings)
                kept, loaded = self.read_ahead or (0, len(self.cluster.jobs))
                runs_kept, runs = self.priority.history_read_ahead or (0, 0)
                log.warning(
                    "the takeover's steps: %s; %d of %d jobs as read ahead; %d of %d "
                    "finished runs (fair share) as read ahead",
                    ", ".join(f"{k} {v:.2f} s" for k, v in steps.items()),
                    kept,
                    loaded,
                    runs_kept,
                    runs,
                    extra={
                        "takeover_steps": steps,
                        "jobs_read_ahead": kept,
                        "jobs": loaded,
                        "runs_read_ahead": runs_kept,
                        "runs": runs,
                    },
                )
        except Exception as err:  # took the lock but could not start: leave it to another
            self.fenced = f"took the lead but could not start: {err}"
            log.exception("took the lead but could not start")
            self.leadership.release()
            if self.on_fenced is not None:
                self.on_fenced()

    async def start(self) -> None:
        if self._stop.is_set():  # started again after a stop
            self._stop = asyncio.Event()
        laps = Laps()
        self.start_timings = laps.took
        done = laps.lap

        if not await asyncio.to_thread(self.claim):
            raise Conflict("another HAL server leads this database; this one stands by")
        done("claim")
        self._started = True
        memo = self.store.job_memo
        if memo is not None:
            memo.hits = 0
        await self.cluster.load()
        # (a standby's read ahead: used once, by that load)
        self.store.job_memo = None
        self.read_ahead = (memo.hits, len(self.cluster.jobs)) if memo is not None else None
        done("cluster")
        await self.ctx.artifacts.load()
        done("artifacts")
        await self.ctx.steps.restore()  # the steps that ran on while it was away
        done("steps")
        await self.priority.start()
        done("priority")
        await self.observe.start()
        done("observe")
        await self.traffic.start()
        done("traffic")
        await self.dissonance.start()
        done("dissonance")
        # the jobs' HAL_URL, where they report feedback: where clients reach this server
        # (``--advertise-url``), else where it listens
        self.cluster.url = self.leadership.url or self.url
        self.mail.seed(self.cluster.jobs.values())
        if self.data is not None:
            await self.data.start()
        done("mail_data")
        # the predictor last: its history read (pages of finished runs, decoded on the
        # store's one thread) and its replay (a thread) go on in the background, and
        # started earlier they held every read above behind them (a takeover's fair-share
        # and traffic reads waited seconds). After a takeover it starts later still: the
        # new leader's first seconds go to the agents and clients coming back to it
        if self._standing_by is None:
            await self.predictions.start()
            later: list[asyncio.Task[None]] = []
        else:
            later = [asyncio.create_task(self._start_predictions(), name="hal-predict")]
        done("predictions")
        self._tasks = [
            asyncio.create_task(self.priority.run(self._stop), name="hal-priority"),
            asyncio.create_task(self.service.run(self._stop), name="hal-scheduler"),
            asyncio.create_task(self._housekeeping(), name="hal-housekeeping"),
            asyncio.create_task(self.mail.run(self._stop), name="hal-mail"),
            asyncio.create_task(self.traffic.run(self._stop), name="hal-traffic"),
            asyncio.create_task(self.power.run(self._stop), name="hal-power"),
            asyncio.create_task(self.dissonance.run(self._stop), name="hal-dissonance"),
            asyncio.create_task(self.feedback_loop.run(self._stop), name="hal-feedback-loop"),
        ]
        if self.purge is not None:
            self._tasks.append(asyncio.create_task(self.purge.run(self._stop), name="hal-purge"))
        self._tasks += later
        if self.cloud_providers:
            await self._start_cloud()
        done("tasks")
        self.leadership.role = "leader"
        log.info("control plane started", extra={"revision": self.cluster.revision})

    async def _start_predictions(self) -> None:
        """The predictor's start, ``PREDICT_AFTER_TAKEOVER_S`` after a takeover (``start``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), PREDICT_AFTER_TAKEOVER_S)
        if not self._stop.is_set():
            await self.predictions.start()

    async def _start_cloud(self) -> None:
        """The autoscaler over ``cloud_providers``: at start, or at the reconfigure that
        gives ``[cloud]`` its first group."""
        assert self.data_dir is not None  # (``cloud_providers`` refused [cloud] without)
        self.cloud = await asyncio.to_thread(
            cloud_service,
            self.cluster,
            self.cloud_providers,
            self.data_dir,
            self.leadership.url or self.url,  # (``--advertise-url``: where agents reach it)
        )
        self.cloud.forget_token = lambda: self.ctx.tokens.forget_user(CLOUD_AGENT)
        self.cloud.estimate = self._planned_run_time
        self.cloud.backfill_every = lambda: self.scheduler.backfill_interval_s
        data = self.ctx.data
        self.cloud.data_view = (lambda: None) if data is None else data.view
        self.ctx.cloud = self.cloud  # GET /v1/cloud
        self.observe.metrics.cloud_stats = self.cloud.status
        self.observe.metrics.cloud_costs = self.cloud.month_costs
        self._tasks.append(asyncio.create_task(self.cloud.run(self._stop), name="hal-cloud"))

    def _planned_run_time(self, job: Job) -> float | None:
        """The run time the planner expects of ``job`` (a budget's expected cost)."""
        found = self.predictions.estimate(job, self.cluster.clock.now())
        return None if found is None else found[0]

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
        if self._standing_by is not None:
            await cancel_tasks([self._standing_by])
        if not self._started:  # a standby that never led: nothing of it to write
            self.unclaim()
            await self.cluster.close()
            return
        self.cluster.changed.set()
        await cancel_tasks([*self._tasks, *self._hangups])
        self._tasks = []
        if self.forked is not None:
            self.forked.close()  # a pass's process still deciding: its plan is not wanted
        await self.ctx.steps.stop()  # local steps their jobs ended: written before close
        await self.power.stop()
        if self.data is not None:
            await self.data.stop()
        await self.traffic.stop()  # the identity graph's last changes: before close
        await self.dissonance.stop()
        await self.observe.stop()
        await self.predictions.stop()
        await self.cluster.close()
        self.unclaim()  # after the last write
        self._started = False

    # -- scontrol reconfigure -------------------------------------------------------
    async def reconfigure(self, by: str = "") -> Reconfigured:
        """Re-read ``config_path``, validate it whole as start-up does, and take it
        (``hal.server.reconfigure``, ADR 0014). A mistake raises the start-up error
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
            check_programs(new.power, str(path))
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
        self.scheduler = self.ctx.scheduler = scheduler
        if self.forked is not None:
            self.forked.use(scheduler)
        else:
            self.paced.scheduler = scheduler
        self.paced.bounds = pass_bounds(config)
        self.service.interval_s = config.scheduler_interval_seconds
        self.mail.program.config = config.mail  # read at each mail sent
        self.traffic.configure(config.harmonic)
        self.power.configure(config.power)
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
                # fenced: nothing more; during a database outage: one probe a tick,
                # nothing else (none of it could be written); the probe that succeeds
                # ends the outage
                if not await self._keep_claim() or not await self.cluster.database_ok():
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
        """Whether this server still leads (its lease keeper renews the lock and the lease
        every second, ``hal.state.leader``). When another server took the lead, this
        one's mirror can no longer be trusted: it is fenced, and stops serving."""
        why = self.leadership.fenced
        if not why:
            return True
        if not self.fenced:
            self.fenced = why
            self._stop.set()
            self._releasing = asyncio.create_task(self.release_waiters())
            if self.on_fenced is not None:
                self.on_fenced()
        return False

    async def release_waiters(self) -> None:
        """Before the graceful shutdown: requests that wait by design (agents' output
        polls, followed event streams) answer now, so shutting down does not wait
        ``timeout_graceful_shutdown`` for them and then cancel them with a traceback."""
        self.observe.output_relay.close()
        self.ctx.steps.release_waiters()
        await self.cluster.release_waiters()
