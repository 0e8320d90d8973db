"""``ObservePlane``: metrics, traces, logs and alerts wired into one ``HalServer``.

The server builds it next to the cluster and calls, in this order::

    plane = ObservePlane(config, cluster, clock,        # registers the job listeners
                         predicted_at_start=predictions.start_prediction)
    service = SchedulerService(cluster, plane.decide(PacedScheduler(scheduler)), ...)
    plane.attach(service)                               # the per-cycle hook
    plane.install(app)                                  # /metrics, /v1/alerts, /ui ...
    await plane.start()  /  await plane.stop()          # after cluster.load / before close

Hooks on the hot paths stay O(changed jobs) (listener) or O(distinct reasons) (pass
result); everything proportional to the queue runs at scrape time, in the 1 s alert tick,
or in the 5 s utilisation sample.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hal.config.model import HalConfig
from hal.core.clock import Clock
from hal.core.errors import Unavailable
from hal.core.job import Job
from hal.core.states import JobState, NodeState
from hal.core.tasks import cancel_tasks
from hal.observe.config import ObserveConfig
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.service import CycleStats, PassRunner, SchedulerService
from hal.server.observe.alerts import Alert, AlertEvaluator, WebhookNotifier
from hal.server.observe.anomalies import AnomalyDetector, StartLookup
from hal.server.observe.diag import Counted
from hal.server.observe.heap import HeapFreezer
from hal.server.observe.loop_lag import LoopLag
from hal.server.observe.metrics import HalMetrics, instrumented_decide
from hal.server.observe.outputrelay import OutputRelay
from hal.server.observe.passes import SlowPasses
from hal.server.observe.rpc_stats import RequestCounts
from hal.server.observe.tracing import JobTracer
from hal.state.cluster import Cluster

log = logging.getLogger("hal.observe")
SAMPLE_EVERY_S = 5.0
HISTORY = 720  # samples: an hour at 5 s


@dataclass(frozen=True, slots=True)
class Sample:
    """One point of the dashboard's utilisation chart."""

    time: float
    cpus_alloc: int
    cpus_total: int
    memory_alloc_bytes: int
    memory_total_bytes: int
    gpus_alloc: int
    gpus_total: int
    pending: int
    running: int
    nodes_up: int
    nodes_total: int


class ObservePlane:
    def __init__(
        self,
        config: HalConfig,
        cluster: Cluster,
        clock: Clock,
        settings: ObserveConfig | None = None,
        *,
        predicted_at_start: StartLookup | None = None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.clock = clock
        self.settings = settings or ObserveConfig.from_env()
        s = self.settings
        self.metrics = HalMetrics(cluster, clock, enabled=s.metrics)
        self.tracer = JobTracer(config.cluster_name, clock, enabled=s.tracing)
        if s.tracing and s.otlp_endpoint:
            self.tracer.add_otlp(s.otlp_endpoint)
        self.started_at = 0.0  # when ``start`` ran: what sdiag's counters count from
        # sdiag -r (``hal.server.observe.diag.reset_diag``): when, and the counters then
        self.diag_since = 0.0
        self.diag_base = Counted()
        # the HTTP requests by route and by user (sdiag's RPC statistics)
        self.requests = RequestCounts()
        self.last_start = 0.0
        self.last_cycle_s = 0.0  # the last cycle: its pass and its forecast slice
        self.last_pass_s = 0.0  # its pass alone
        self.last_cycle_at: float | None = None  # when the last pass ended (None: none yet)
        self.cycles = 0
        self.alerts = AlertEvaluator(
            cluster,
            s,
            last_start=lambda: self.last_start,
            last_cycle_s=lambda: self.last_cycle_s,
            on_registration=self.metrics.observe_registration,
            on_forgotten=self.metrics.forget_node,
        )
        self.metrics.alerts_firing = self.alerts.firing_labels
        self.anomalies = AnomalyDetector(
            cluster,
            s,
            predicted_at_start=predicted_at_start,
            drain=config.drain_anomalous_nodes,
        )
        self.alerts.sources.append(self.anomalies.findings)
        self.metrics.anomalies = self.anomalies
        self.output_relay = OutputRelay(cluster, timeout_s=s.output_relay_timeout_s)
        self.history: deque[Sample] = deque(maxlen=HISTORY)
        # the event loop's lag (``hal_event_loop_lag_seconds``, sdiag's longest)
        self.loop_lag = LoopLag(
            self.metrics.loop_lag.observe if s.metrics else lambda lag: None,
            stall_log_s=s.loop_stall_log_s,
        )
        self.heap = HeapFreezer(s.gc_thaw_s)
        # the long passes' breakdowns: logged, and the longest kept for /v1/diag
        self.passes = SlowPasses(s.slow_pass_log_s, self.heap.collector.full_between, clock.now)
        self._tasks: list[asyncio.Task[None]] = []
        # (job id, end time) of the ends already counted, traced and logged, oldest first:
        # a later change to a finished job (``hal update``, ``scontrol update``) is
        # committed again, still in its final state, but it did not end again
        self._ended: dict[tuple[int, float | None], None] = {}
        cluster.on_jobs_changed(self._on_jobs)

    # -- wiring ---------------------------------------------------------------------------
    def decide(self, scheduler: PassRunner) -> Callable[[ClusterSnapshot], Plan]:
        """The scheduler's decide function, reporting each pass to the slow-pass log
        and, when metrics are on, to the metrics."""
        sinks = [self.passes.record]
        if self.settings.metrics:
            sinks.append(self.metrics.record_pass)
        return instrumented_decide(scheduler, sinks)

    @property
    def plugin_timing_every_s(self) -> float | None:
        """How often a pass runs with its plugins timed (``PacedScheduler``); None: never
        (metrics off, or ``HAL_PLUGIN_TIMING_INTERVAL_S`` negative)."""
        every = self.settings.plugin_timing_interval_s
        return every if self.settings.metrics and every >= 0 else None

    def attach(self, service: SchedulerService) -> None:
        service.on_cycle.append(self._on_cycle)

    async def start(self) -> None:
        """After ``cluster.load()``: seed what the store already had, start the tick."""
        self.started_at = self.clock.now()
        self.metrics.seed(self.cluster.jobs.values())
        for job in self.cluster.jobs.values():
            self._ended_before(job)  # ended before this start: no end to count later
        self._tasks = [
            asyncio.create_task(self._tick(), name="hal-observe-tick"),
            asyncio.create_task(self.loop_lag.run(), name="hal-loop-lag"),
            asyncio.create_task(self.heap.run(), name="hal-heap"),
        ]
        if self.settings.webhooks:
            queue: asyncio.Queue[Alert] = asyncio.Queue()
            self.alerts.changes = queue
            notifier = WebhookNotifier(
                self.settings.webhooks,
                self.config.cluster_name,
                timeout_s=self.settings.webhook_timeout_s,
                on_result=lambda ok: self.metrics.notifications.labels(
                    "sent" if ok else "failed"
                ).inc(),
            )
            self._tasks.append(asyncio.create_task(notifier.run(queue), name="hal-alert-webhooks"))

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []
        self.tracer.shutdown()

    # -- hooks ----------------------------------------------------------------------------
    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        jobs = [j for j in jobs if not self._ended_before(j)]
        self.metrics.on_jobs_changed(jobs)
        self.tracer.on_jobs_changed(jobs)
        info = log.isEnabledFor(logging.INFO)
        for job in jobs:
            state = job.state
            if state is JobState.PENDING:
                continue
            if state is JobState.RUNNING and not job.launched:
                self.last_start = self.clock.now()
                if info:
                    self._log_job("job started", job)
            elif state.is_terminal and info:
                self._log_job("job finished", job, exit_code=job.exit_code)

    def _ended_before(self, job: Job) -> bool:
        """Whether ``job`` is a finished job whose end the hooks have already seen."""
        if not job.state.is_terminal:
            return False
        key = (job.id, job.end_time)
        if key in self._ended:
            return True
        self._ended[key] = None
        if len(self._ended) > 100_000:
            del self._ended[next(iter(self._ended))]
        return False

    def _log_job(self, message: str, job: Job, **more: object) -> None:
        node = job.allocation.nodes[0] if job.allocation and job.allocation.nodes else None
        log.info(
            message,
            extra={
                "job_id": job.display_id,
                "node": node,
                "partition": job.partition,
                "state": job.state.value,
                "trace_id": self.tracer.trace_id(job),
                **more,
            },
        )

    def _on_cycle(self, stats: CycleStats, snap: ClusterSnapshot, plan: Plan) -> None:
        self.last_cycle_s = stats.last_duration_s
        self.last_pass_s = stats.last_pass_s
        self.last_cycle_at = self.clock.now()
        self.cycles = stats.cycles
        self.metrics.on_cycle(stats, snap, plan)
        self.tracer.on_cycle(stats, snap, plan)
        self.passes.on_cycle(stats, len(snap.pending))

    async def _tick(self) -> None:
        next_sample = next_anomaly_check = 0.0
        while True:
            now = self.clock.now()
            try:
                if now >= next_anomaly_check:
                    next_anomaly_check = now + self.settings.anomaly_interval_s
                    await self.anomalies.check(now)
                self.alerts.evaluate(now)
                if now >= next_sample:
                    self.history.append(self.sample(now))
                    next_sample = now + SAMPLE_EVERY_S
            except Unavailable:
                pass  # the database is away: logged where it is seen; the next tick retries
            except Exception:
                log.exception("observe tick failed")  # never take the server down
            await asyncio.sleep(self.settings.alert_interval_s)

    def sample(self, now: float) -> Sample:
        c = self.cluster
        cpus = mem = gpus = a_cpus = a_mem = a_gpus = up = 0
        for name, node in c.nodes.items():
            r = node.resources
            cpus, mem, gpus = cpus + r.cpus, mem + r.memory_bytes, gpus + r.gpus
            up += node.state is NodeState.UP
            used = c.usage.get(name)
            if used is not None:
                a = used.allocated
                a_cpus, a_mem, a_gpus = a_cpus + a.cpus, a_mem + a.memory_bytes, a_gpus + a.gpus
        # (counted per change by the mirror: a walk of every job held the loop)
        pending, running = len(c.pending_ids), len(c.active_ids)
        return Sample(
            now, a_cpus, cpus, a_mem, mem, a_gpus, gpus, pending, running, up, len(c.nodes)
        )
