"""Prometheus metrics of the control plane (names follow the observability conventions).

Two kinds, chosen by cost:

* **event counters and histograms** (submitted, started, finished, queue wait, cycle
  duration, rejections) are updated where the event happens: the cluster's job-change
  listener (one dict lookup per changed job, label updates batched per commit) and the
  scheduler's decide wrapper (one update per distinct plugin/reason per pass);
* **state gauges** (jobs by state, pending by reason, nodes, CPUs/memory/GPUs, heartbeat
  age) are computed when Prometheus scrapes, from the cluster mirror, so the request and
  scheduling paths never maintain them.

Everything lives on a private ``CollectorRegistry`` so several servers in one process
(tests, benchmarks) do not collide. ``_created`` series are disabled (conventions §2.1).
"""

from __future__ import annotations

import contextlib
import platform
from collections import Counter as Tally
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hal import __version__
from hal.core.clock import Clock
from hal.core.job import Job
from hal.core.preemption import PREEMPT_MODE, PREEMPTED_BY
from hal.core.states import JobState, PendingReason
from hal.observe.cachemetrics import cache_node_metrics
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.service import CycleStats, PassRunner
from hal.server.observe.artifactmetrics import artifact_metrics
from hal.server.observe.cloudmetrics import cloud_metrics, cost_metrics
from hal.server.observe.feedbackmetrics import feedback_metrics
from hal.server.observe.harmonicmetrics import HarmonicStats, harmonic_metrics
from hal.server.observe.loop_lag import LAG_BUCKETS
from hal.server.observe.powermetrics import power_metrics
from hal.state.artifacts import Registry
from hal.state.cluster import Cluster
from hal.state.retention import Purged
from hal.wire.cloud import CloudCosts, CloudStatus

if TYPE_CHECKING:
    from hal.server.observe.anomalies import AnomalyDetector

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

# kube-scheduler's scheduling-attempt buckets: 1 ms ×2, 15 buckets (up to ~16 s).
CYCLE_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# per plugin and pass: 10 µs ×4 up to ~10 s (most plugins take well under a millisecond)
PLUGIN_BUCKETS = tuple(0.00001 * 4**i for i in range(11))
WAIT_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400, 43200, 86400)
RUN_BUCKETS = (1, 10, 60, 300, 900, 3600, 14400, 43200, 86400, 259200)
DISPATCH_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# |actual - predicted| / actual: within 5 %, 10 %, ... ; over 1 = off by more than the run
ERROR_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 100)

# Final states as metric label values (the conventions' short vocabulary).
FINISHED_LABEL = {s: s.value.lower() for s in JobState if s.is_terminal}
FINISHED_LABEL[JobState.OUT_OF_MEMORY] = "oom"

# a resumed job (SUSPENDED → RUNNING) did not start again
_RUNNING = (JobState.RUNNING, JobState.SUSPENDED)

# state, restarts, launched, preempted, and when the current attempt entered the queue
# (submit, or the requeue: its queue wait does not include the runs before it)
Seen = tuple[JobState, int, bool, bool, float]


def preempted(job: Job) -> bool:
    return PREEMPTED_BY in job.extra


class HalMetrics:
    """The control plane's metrics. ``registry`` is what ``/metrics`` exposes."""

    def __init__(self, cluster: Cluster, clock: Clock, *, enabled: bool = True) -> None:
        self.cluster = cluster
        self.clock = clock
        self.enabled = enabled
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.submitted = Counter(
            "hal_jobs_submitted", "Jobs accepted (array elements count one each).",
            ["partition"], registry=r,
        )  # fmt: skip
        self.started = Counter(
            "hal_jobs_started", "Job attempts started by the scheduler.", ["partition"],
            registry=r,
        )  # fmt: skip
        self.finished = Counter(
            "hal_jobs_finished", "Jobs that reached a final state.", ["partition", "state"],
            registry=r,
        )  # fmt: skip
        self.preempted = Counter(
            "hal_jobs_preempted", "Running jobs preempted, by mode (requeue, cancel).",
            ["partition", "mode"], registry=r,
        )  # fmt: skip
        self.requeued = Counter(
            "hal_jobs_requeued", "Job attempts put back in the queue.", ["partition"],
            registry=r,
        )  # fmt: skip
        self.resized = Counter(
            "hal_jobs_resized",
            "Malleable jobs resized by the feedback loop, by direction (grow, shrink).",
            ["partition", "direction"], registry=r,
        )  # fmt: skip
        self.moved = Counter(
            "hal_jobs_moved",
            "Running jobs the feedback loop moved away from a neighbour, by reason"
            " (dissonance: its or the neighbour's feedback fell beside a clashing class).",
            ["partition", "reason"], registry=r,
        )  # fmt: skip
        self.queue_wait = Histogram(
            "hal_job_queue_wait_seconds", "Submit (or requeue) to start of each attempt.",
            ["partition"], buckets=WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.run_duration = Histogram(
            "hal_job_run_duration_seconds", "Start to end of finished jobs.",
            ["partition", "state"], buckets=RUN_BUCKETS, registry=r,
        )  # fmt: skip
        self.dispatch = Histogram(
            "hal_dispatch_latency_seconds",
            "Scheduling decision to the agent confirming the process started.",
            buckets=DISPATCH_BUCKETS, registry=r,
        )  # fmt: skip
        self.cycle = Histogram(
            "hal_scheduling_cycle_duration_seconds",
            "Duration of one scheduling cycle: its pass and the forecast slice after it.",
            buckets=CYCLE_BUCKETS, registry=r,
        )  # fmt: skip
        self.pass_duration = Histogram(
            "hal_scheduling_pass_duration_seconds",
            "Duration of one scheduling pass (main loop, and the backfill stage when it "
            "ran), without the cycle's forecast slice.",
            buckets=CYCLE_BUCKETS, registry=r,
        )  # fmt: skip
        self.passes_capped = Counter(
            "hal_scheduling_passes_capped",
            "Scheduling passes that passed over a partition's jobs at max_job_starts.",
            registry=r,
        )
        self.passes_capped_backfilled = Counter(
            "hal_scheduling_passes_capped_backfilled",
            "Scheduling passes that stopped at max_job_starts and ran the backfill stage "
            "all the same (its turn: bf_interval had passed).",
            registry=r,
        )
        self.loop_lag = Histogram(
            "hal_event_loop_lag_seconds",
            "How much later than asked a task sleeping 0.1 s on the server's event loop "
            "woke: what a request arriving then waited before the loop looked at it.",
            buckets=LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self.forecast_slice = Histogram(
            "hal_forecast_slice_duration_seconds",
            "Duration of one slice of the expected-start forecast (bf_yield_interval), run "
            "after a cycle's plan is applied.",
            buckets=CYCLE_BUCKETS, registry=r,
        )  # fmt: skip
        self.plugin_duration = Histogram(
            "hal_scheduler_plugin_duration_seconds",
            "Time one plugin spent at one extension point during a sampled pass (one pass "
            "per HAL_PLUGIN_TIMING_INTERVAL_S; inclusive of plugins it calls).",
            ["plugin", "extension_point"], buckets=PLUGIN_BUCKETS, registry=r,
        )  # fmt: skip
        self.attempts = Counter(
            "hal_schedule_attempts",
            "Per-job scheduling attempts by result (scheduled/unschedulable/error).",
            ["result"], registry=r,
        )  # fmt: skip
        self.rejections = Counter(
            "hal_scheduler_rejections",
            "Jobs a pass left pending or ended, by the plugin and Slurm reason that said no.",
            ["plugin", "reason"], registry=r,
        )  # fmt: skip
        self.backfill_cycles = Counter(
            "hal_backfill_cycles", "Scheduling passes that ran the backfill stage.", registry=r
        )
        self.backfill_duration = Histogram(
            "hal_backfill_cycle_duration_seconds",
            "Duration of the backfill stage of a pass (mean: _sum / _count).",
            buckets=CYCLE_BUCKETS, registry=r,
        )  # fmt: skip
        self.backfill_last_duration = Gauge(
            "hal_backfill_last_cycle_duration_seconds",
            "Duration of the last backfill stage.", registry=r,
        )  # fmt: skip
        self.backfill_depth = Gauge(
            "hal_backfill_last_depth_jobs",
            "Jobs handed to the last backfill stage (held back by the queue).", registry=r,
        )  # fmt: skip
        self.backfill_started = Counter(
            "hal_backfill_jobs_started", "Jobs started by the backfill stage.", registry=r
        )
        self.backfill_reservations = Counter(
            "hal_backfill_reservations", "Reservations (planned starts) made by backfill.",
            registry=r,
        )  # fmt: skip
        self.prediction_error = Histogram(
            "hal_prediction_error_ratio",
            "|actual - predicted| / actual run time of finished jobs (both at least 1 s),"
            " predicted when the job started.",
            ["predictor"], buckets=ERROR_BUCKETS, registry=r,
        )  # fmt: skip
        self.underpredicted = Counter(
            "hal_prediction_underpredicted",
            "Finished jobs that ran longer than predicted at their start"
            " (rate: divide by hal_prediction_error_ratio_count).",
            ["predictor"], registry=r,
        )  # fmt: skip
        self.registrations = Counter(
            "hal_agent_registrations", "Agent (re-)registrations per node.", ["node"],
            registry=r,
        )  # fmt: skip
        self.notifications = Counter(
            "hal_alert_notifications", "Webhook deliveries by result (sent/failed).",
            ["result"], registry=r,
        )  # fmt: skip
        self.job_mail = Counter(
            "hal_job_mail", "Job mail ([mail] prog) by result: sent, failed, timeout,"
            " missing (no such program), dropped (too many waiting).", ["result"], registry=r,
        )  # fmt: skip
        self.purged = Counter(
            "hal_accounting_purged_records",
            "Records deleted by the [accounting] purge, by record (events, jobs).",
            ["record"], registry=r,
        )  # fmt: skip
        for record in ("events", "jobs"):
            self.purged.labels(record=record)
        self.last_purge = Gauge(
            "hal_accounting_last_purge_timestamp_seconds",
            "When the last [accounting] purge finished (0: none yet).", registry=r,
        )  # fmt: skip
        self._init_readings()
        self._seen: dict[int, Seen] = {}
        r.register(_StateCollector(self))
        prometheus_client.ProcessCollector(registry=r)

    def _init_readings(self) -> None:
        """The figures read beside the registry's series: sdiag's plain numbers and the
        other services' status callbacks, each a no-op until its service sets it."""
        self.last_cycle_time = 0.0
        # What sdiag adds to the series above (plain numbers, read by hal.server.observe.diag):
        # the longest cycle, pass and forecast slice, the last slice, the pending jobs
        # the passes looked at, the backfill stage's longest run, when it last ran and
        # the jobs handed to it in all.
        self.cycle_max_s = 0.0
        self.pass_max_s = 0.0
        self.forecast_max_s = 0.0
        self.forecast_last_s = 0.0
        self.cycle_depth_total = 0
        self.last_queue_length = 0
        self.backfill_max_s = 0.0
        self.backfill_last_time = 0.0
        self.backfill_depth_total = 0
        self.alerts_firing: Callable[[], Iterable[tuple[str, str]]] = lambda: ()
        # The HTC broker's last report (``hal.htc.rest.HtcStats`` as a dict), set by the
        # /v1/htc router; None while no broker runs.
        self.htc_stats: Callable[[], Mapping[str, Any] | None] = lambda: None
        # The data service's counters (``hal.server.data.DataService.status``), set by the
        # server when hal.toml has a [data] table; None: no hal_data_* series.
        self.data_stats: Callable[[], Mapping[str, Any] | None] = lambda: None
        # the autoscaler's state (``hal.server.cloud.CloudService.status``), set by the
        # server when hal.toml has [cloud] groups; None: no hal_cloud_* series
        self.cloud_stats: Callable[[], CloudStatus | None] = lambda: None
        # this month's cloud costs and budgets (``CloudService.month_costs``), likewise
        self.cloud_costs: Callable[[], CloudCosts | None] = lambda: None
        # the traffic graph's counters (``hal.server.traffic.TrafficService.stats``), set
        # by the server; None: no hal_harmonic_* series
        self.harmonic_stats: Callable[[], HarmonicStats | None] = lambda: None
        # the running jobs' latest feedback (``FeedbackService.running_latest``), set by
        # the server: job → metric → value, as hal_job_feedback gauges
        self.feedback_latest: Callable[[], Mapping[int, Mapping[str, float]]] = dict
        # the artifact registry (set by the server); None: no hal_artifact_* series
        self.artifacts: Registry | None = None
        # The predictor's anomaly detector (set by ObservePlane); its last check is
        # exported for the JobOverrunningPrediction/NodeFailureRateAnomalous rules.
        self.anomalies: AnomalyDetector | None = None

    # -- seeding ------------------------------------------------------------------------
    def seed(self, jobs: Iterable[Job]) -> None:
        """Remember the jobs the server loaded at start, so their next change is read as
        a transition rather than a new submission."""
        for job in jobs:
            if not job.state.is_terminal:
                # (a requeued job still waiting counts from its submit: no requeue time
                # is stored)
                entry = (job.state, job.restarts, job.launched, preempted(job), job.submit_time)
                self._seen[job.id] = entry

    # -- the cluster's job-change listener ------------------------------------------------
    def on_jobs_changed(self, jobs: Sequence[Job]) -> None:
        if not self.enabled or not jobs:
            return
        seen = self._seen
        submitted: Tally[str] = Tally()
        started: Tally[str] = Tally()
        requeued: Tally[str] = Tally()
        now = self.clock.now()
        for job in jobs:
            state = job.state
            prev = seen.get(job.id)
            queued = job.submit_time if prev is None else prev[4]
            if prev is None and state is JobState.PENDING and job.restarts == 0:
                submitted[job.partition] += 1
            elif state is JobState.PENDING and job.restarts > (0 if prev is None else prev[1]):
                # back in the queue (prev None: a finished job requeued, ``hal requeue``)
                requeued[job.partition] += 1
                queued = now
            elif state is JobState.RUNNING and (prev is None or prev[0] not in _RUNNING):
                started[job.partition] += 1
                if job.start_time is not None:
                    wait = max(0.0, job.start_time - queued)
                    self.queue_wait.labels(job.partition).observe(wait)
            if prev is not None and not prev[3] and preempted(job):
                self.preempted.labels(job.partition, job.extra.get(PREEMPT_MODE, "")).inc()
            if job.launched and (prev is None or not prev[2]) and job.start_time is not None:
                self.dispatch.observe(max(0.0, now - job.start_time))
            if state.is_terminal:
                seen.pop(job.id, None)
                label = FINISHED_LABEL[state]
                self.finished.labels(job.partition, label).inc()
                if job.start_time is not None and job.end_time is not None:
                    self.run_duration.labels(job.partition, label).observe(
                        max(0.0, job.end_time - job.start_time)
                    )
            else:
                seen[job.id] = (state, job.restarts, job.launched, preempted(job), queued)
        for part, n in submitted.items():
            self.submitted.labels(part).inc(n)
        for part, n in started.items():
            self.started.labels(part).inc(n)
        for part, n in requeued.items():
            self.requeued.labels(part).inc(n)

    # -- the scheduler -----------------------------------------------------------------
    def record_pass(self, result: PassResult) -> None:
        """Attempt results and rejection counts of one pass (O(distinct reasons))."""
        if not self.enabled:
            return
        placed = len(result.plan.placements)
        # the jobs the pass looked at: every pending one, or its queue depth (ADR 0029)
        self.cycle_depth_total += result.looked
        errors = 0
        unschedulable = 0
        for (plugin, reason), n in result.rejections.items():
            self.rejections.labels(plugin or "unknown", reason.value).inc(n)
            # A crashed cycle (Code.ERROR) is the only verdict that carries
            # WaitingForScheduling (status.error); counting by reason keeps this O(reasons).
            if reason is PendingReason.WAITING_FOR_SCHEDULING:
                errors += n
            else:
                unschedulable += n
        if placed:
            self.attempts.labels("scheduled").inc(placed)
        if unschedulable:
            self.attempts.labels("unschedulable").inc(unschedulable)
        if errors:
            self.attempts.labels("error").inc(errors)
        for (plugin, point), seconds in (result.plugin_seconds or {}).items():
            self.plugin_duration.labels(plugin, point).observe(seconds)
        bf = result.backfill
        if bf is not None:
            self.backfill_cycles.inc()
            self.backfill_duration.observe(bf.duration_s)
            self.backfill_last_duration.set(bf.duration_s)
            self.backfill_depth.set(bf.considered)
            self.backfill_max_s = max(self.backfill_max_s, bf.duration_s)
            self.backfill_last_time = self.clock.now()
            self.backfill_depth_total += bf.considered
            self.backfill_started.inc(bf.started)
            self.backfill_reservations.inc(bf.reservations)
        if result.capped:  # (it stopped at max_job_starts; backfilled: its turn)
            self.passes_capped.inc()
            if bf is not None:
                self.passes_capped_backfilled.inc()

    def on_cycle(self, stats: CycleStats, snap: ClusterSnapshot, plan: Plan) -> None:
        if not self.enabled:
            return
        self.cycle.observe(stats.last_duration_s)
        self.pass_duration.observe(stats.last_pass_s)
        self.last_cycle_time = self.clock.now()
        self.cycle_max_s = max(self.cycle_max_s, stats.last_duration_s)
        self.pass_max_s = max(self.pass_max_s, stats.last_pass_s)
        sliced = stats.last_forecast_s
        if sliced is not None:
            self.forecast_slice.observe(sliced)
            self.forecast_last_s = sliced
            self.forecast_max_s = max(self.forecast_max_s, sliced)
        self.last_queue_length = stats.last_pending

    def declare_predictor(self, predictor: str) -> None:
        """Export the predictor's error series at zero before its first finished job."""
        self.prediction_error.labels(predictor)
        self.underpredicted.labels(predictor)

    def observe_prediction(self, predictor: str, predicted_s: float, actual_s: float) -> None:
        """A finished job's run time against its prediction at start (thread-safe: the
        prediction service's worker calls it)."""
        if not self.enabled:
            return
        predicted, actual = max(predicted_s, 1.0), max(actual_s, 1.0)
        self.prediction_error.labels(predictor).observe(abs(actual - predicted) / actual)
        if actual > predicted:
            self.underpredicted.labels(predictor).inc()

    def observe_purge(self, purged: Purged) -> None:
        """A purge of old records finished (``hal.state.retention.RecordPurge``)."""
        self.purged.labels(record="events").inc(purged.events)
        self.purged.labels(record="jobs").inc(purged.jobs)
        self.last_purge.set(self.clock.now())

    def observe_resize(self, partition: str, direction: str) -> None:
        """The feedback loop resized a malleable job (``hal.server.malleable``)."""
        if self.enabled:
            self.resized.labels(partition, direction).inc()

    def observe_move(self, partition: str, reason: str) -> None:
        """The feedback loop moved a running job away from a neighbour."""
        if self.enabled:
            self.moved.labels(partition, reason).inc()

    def observe_registration(self, node: str) -> None:
        self.registrations.labels(node).inc()

    def forget_node(self, node: str) -> None:
        """A removed node's series go (its name's next node starts afresh)."""
        with contextlib.suppress(KeyError):
            self.registrations.remove(node)


def instrumented_decide(
    scheduler: PassRunner, sinks: Sequence[Callable[[PassResult], None]]
) -> Callable[[ClusterSnapshot], Plan]:
    """``scheduler.schedule`` that also hands each ``PassResult`` to ``sinks`` (metrics,
    traces). Runs on the scheduler's worker thread; sinks must be thread-safe and cheap."""

    def decide(snapshot: ClusterSnapshot) -> Plan:
        result = scheduler.run_pass(snapshot)
        for sink in sinks:
            sink(result)
        return result.plan

    return decide


class Collected(Collector):
    """Metric families collected once (on the event loop: the state collector reads
    the mirror), for their text to be written elsewhere (``generate_latest`` in a
    thread takes any collector)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


class _StateCollector(Collector):
    """Gauges read from the cluster mirror at scrape time (one pass over jobs and nodes)."""

    def __init__(self, metrics: HalMetrics) -> None:
        self.m = metrics

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: families are only known at collect time

    def collect(self) -> Iterable[Metric]:
        m = self.m
        cluster = m.cluster
        now = m.clock.now()
        info = GaugeMetricFamily(
            "hal_build_info", "HAL version (value 1).", labels=["version", "python"]
        )
        info.add_metric([__version__, platform.python_version()], 1)
        yield info
        yield from _job_gauges(cluster)
        yield from _node_gauges(cluster, now)
        last = GaugeMetricFamily(
            "hal_scheduler_last_cycle_timestamp_seconds",
            "When the last scheduling pass ended (0: none yet).",
        )
        last.add_metric([], m.last_cycle_time)
        yield last
        firing = GaugeMetricFamily(
            "hal_alerts_firing",
            "Alerts the built-in evaluator has firing.",
            labels=["alertname", "severity"],
        )
        for name, severity in m.alerts_firing():
            firing.add_metric([name, severity], 1)
        yield firing
        if m.anomalies is not None:
            yield from _anomaly_gauges(m.anomalies, cluster)
        yield from _htc_metrics(m.htc_stats())
        yield from _data_metrics(m.data_stats())
        yield from cloud_metrics(m.cloud_stats())
        yield from power_metrics(cluster)
        yield from cost_metrics(m.cloud_costs())
        yield from harmonic_metrics(m.harmonic_stats())
        yield from feedback_metrics(m.feedback_latest())
        yield from artifact_metrics(m.artifacts)


def _job_gauges(cluster: Cluster) -> Iterable[Metric]:
    by_state: Tally[tuple[str, str]] = Tally()
    pending: Tally[tuple[str, str]] = Tally()
    for job in cluster.unfinished.values():  # (not the finished ones kept for MinJobAge)
        by_state[(job.state.value.lower(), job.partition)] += 1
        if job.state is JobState.PENDING:
            pending[(job.partition, job.reason.value)] += 1
    jobs = GaugeMetricFamily(
        "hal_jobs", "Jobs not yet finished, by state and partition.", labels=["state", "partition"]
    )
    for (state, part), n in sorted(by_state.items()):
        jobs.add_metric([state, part], n)
    yield jobs
    queue = GaugeMetricFamily(
        "hal_queue_pending_jobs",
        "Pending jobs by partition and Slurm pending reason.",
        labels=["partition", "reason"],
    )
    for (part, reason), n in sorted(pending.items()):
        queue.add_metric([part, reason], n)
    yield queue


class _NodeRow(NamedTuple):
    """What the nodes' families show of one node, read once for all of them."""

    name: str
    split: tuple[tuple[int, int], ...]  # (allocated, total) of CPUs, memory, GPUs
    up: bool
    age: float
    gpu_problems: int | None


def _node_gauges(cluster: Cluster, now: float) -> Iterable[Metric]:
    """The nodes' families, from one read of every node: each family is built in a step
    of its own (``/metrics`` lets the event loop turn between them: at 10,000 nodes
    the seven together were one hold of a tenth of a second), all of them from that
    read."""
    states: Tally[str] = Tally()
    rows: list[_NodeRow] = []
    sessions = cluster.agent_sessions
    for name in sorted(cluster.nodes):
        node = cluster.nodes[name]
        states[cluster.node_display_state(node)] += 1
        used = cluster.usage.get(name)
        total = node.resources
        a = used.allocated if used else None
        session = sessions.get(name)
        seen = max(node.last_heartbeat, session.last_seen if session else 0.0)
        problems = session.gpu_problems if session is not None else None
        split = (
            (a.cpus if a else 0, total.cpus),
            (a.memory_bytes if a else 0, total.memory_bytes),
            (a.gpus if a else 0, total.gpus),
        )
        gpu_problems = None if problems is None else len(problems)
        rows.append(_NodeRow(name, split, node.schedulable, max(0.0, now - seen), gpu_problems))
    nodes = GaugeMetricFamily("hal_nodes", "Nodes by display state.", labels=["state"])
    for state in ("idle", "mix", "alloc", "drain", "drng", "down"):
        nodes.add_metric([state], states.get(state, 0))
    yield nodes
    for at, (family, help_text) in enumerate((
        ("hal_node_cpus", "CPUs per node, allocated or idle."),
        ("hal_node_memory_bytes", "Memory per node, allocated or idle."),
        ("hal_node_gpus", "GPUs per node, allocated or idle."),
    )):  # fmt: skip
        held = GaugeMetricFamily(family, help_text, labels=["node", "state"])
        for row in rows:
            used_now, total_now = row.split[at]
            held.add_metric([row.name, "alloc"], used_now)
            held.add_metric([row.name, "idle"], max(0, total_now - used_now))
        yield held
    up = GaugeMetricFamily(
        "hal_node_up", "1 when the node is UP (schedulable), else 0.", labels=["node"]
    )
    for row in rows:
        up.add_metric([row.name], 1 if row.up else 0)
    yield up
    age = GaugeMetricFamily(
        "hal_agent_heartbeat_age_seconds",
        "Seconds since the node's agent last synced.",
        labels=["node"],
    )
    for row in rows:
        age.add_metric([row.name], row.age)
    yield age
    problems_family = GaugeMetricFamily(
        "hal_node_gpu_problems",
        "Problems the node's agent found at its last GPU health read (a lost GPU, "
        "uncorrectable ECC errors, a pending row remap); 0 = healthy. Drained meanwhile.",
        labels=["node"],
    )
    for row in rows:
        if row.gpu_problems is not None:
            problems_family.add_metric([row.name], row.gpu_problems)
    yield problems_family


def _anomaly_gauges(detector: AnomalyDetector, cluster: Cluster) -> Iterable[Metric]:
    """The anomaly detector's last check (every ``HAL_ANOMALY_INTERVAL_S``): what
    ``deploy/prometheus/hal-alerts.yml`` alerts on. No job ids: the built-in alert and
    ``hal alerts`` name the jobs."""
    overrunning: Tally[tuple[str, str]] = Tally()
    for o in detector.overruns.values():
        overrunning[(o.partition, o.node)] += 1
    over = GaugeMetricFamily(
        "hal_jobs_overrunning_prediction",
        "Running jobs past max(factor x their predicted run time, prediction + margin): "
        "possible hangs (JobOverrunningPrediction), by partition and batch node.",
        labels=["partition", "node"],
    )
    for (part, node), n in sorted(overrunning.items()):
        over.add_metric([part, node], n)
    yield over
    counts = detector.window_counts()
    recent = GaugeMetricFamily(
        "hal_node_recent_jobs",
        "Jobs that ended on the node within the anomaly window (HAL_ALERT_NODE_FAIL_WINDOW_S),"
        " by result (failed: FAILED or NODE_FAIL; ok: any other end).",
        labels=["node", "result"],
    )
    for node in sorted(counts):
        c = counts[node]
        recent.add_metric([node, "failed"], c.failed)
        recent.add_metric([node, "ok"], c.jobs - c.failed)
    yield recent
    yield _node_flags(
        "hal_node_failure_rate_anomalous",
        "1 while the node's recent jobs fail far more often than its peers' "
        "(NodeFailureRateAnomalous), else 0.",
        set(cluster.nodes) | set(counts),
        detector.nodes,
    )
    ratios = detector.node_ratios
    ratio = GaugeMetricFamily(
        "hal_node_runtime_ratio",
        "Median of run time / predicted run time (a model's, at start) of the jobs on at "
        f"most {detector.inflation_rule.max_nodes} nodes that completed (or reached their "
        "time limit) on the node within HAL_ALERT_NODE_SLOW_WINDOW_S.",
        labels=["node"],
    )
    for node in sorted(ratios):
        ratio.add_metric([node], ratios[node])
    yield ratio
    yield _node_flags(
        "hal_node_runtime_inflated",
        "1 while the node's recent jobs run far longer than predicted, against the runs "
        "elsewhere (NodeRuntimeInflated), else 0.",
        set(cluster.nodes) | set(ratios),
        detector.slow,
    )


def _node_flags(
    name: str, help_text: str, nodes: Iterable[str], flagged: Container[str]
) -> GaugeMetricFamily:
    """A 0/1 gauge per node of ``nodes``: 1 for those in ``flagged`` (a stable series for
    every known node, so a rule's ``== 1`` has something to turn on and off)."""
    gauge = GaugeMetricFamily(name, help_text, labels=["node"])
    for node in sorted(nodes):
        gauge.add_metric([node], 1 if node in flagged else 0)
    return gauge


# -- data plane (hal.server.data) --------------------------------------------------------------
def _data_metrics(stats: Mapping[str, Any] | None) -> Iterable[Metric]:
    """Pre-staging results, bytes staged into leaf caches, and the data view's age (a
    view older than a few refresh intervals means the cache control plane is unreachable
    and placement uses what it last saw). Nothing without a [data] table."""
    if stats is None:
        return
    prestage = CounterMetricFamily(
        "hal_data_prestage",
        "Pre-staging of a job's --data inputs into one node's leaf cache, by result "
        "(staged: all keys held; partial; failed; no_cache: the node reads through none).",
        labels=["result"],
    )
    for result, n in sorted(stats["prestage"].items()):
        prestage.add_metric([result], n)
    yield prestage
    moved = CounterMetricFamily(
        "hal_data_bytes_staged",
        "Bytes pulled into leaf caches by pre-staging (keys the view did not show there).",
    )
    moved.add_metric([], stats["bytes_staged"])
    yield moved
    age = GaugeMetricFamily(
        "hal_data_view_age_seconds",
        "Seconds since the data view was last refreshed from the cache control plane.",
    )
    age.add_metric([], stats["view_age_seconds"])
    yield age
    yield from cache_node_metrics(stats.get("caches", ()))


def _htc_metrics(stats: Mapping[str, Any] | None) -> Iterable[Metric]:
    """HTC sessions, tasks and workers from the broker's last report (no session ids).
    Counters count from the broker process's start; none but ``hal_htc_broker_up`` while
    no broker runs (most clusters never open a session)."""
    up = GaugeMetricFamily(
        "hal_htc_broker_up", "1 when the HTC broker runs and reported in the last 10 s."
    )
    up.add_metric([], 0 if stats is None else 1)
    yield up
    if stats is None:
        return

    def labelled(
        family: GaugeMetricFamily | CounterMetricFamily, values: Mapping[str, int]
    ) -> Metric:
        for label, n in sorted(values.items()):
            family.add_metric([label], n)
        return family

    yield labelled(
        GaugeMetricFamily("hal_htc_sessions", "Live HTC sessions by state.", labels=["state"]),
        stats["sessions"],
    )
    opened = CounterMetricFamily("hal_htc_sessions_opened", "HTC sessions opened.")
    opened.add_metric([], stats["sessions_opened"])
    yield opened
    yield labelled(
        CounterMetricFamily(
            "hal_htc_sessions_ended", "HTC sessions ended, by final state.", labels=["state"]
        ),
        stats["sessions_ended"],
    )
    submitted = CounterMetricFamily("hal_htc_tasks_submitted", "HTC tasks accepted.")
    submitted.add_metric([], stats["tasks_submitted"])
    yield submitted
    yield labelled(
        CounterMetricFamily(
            "hal_htc_tasks_completed",
            "HTC task outcomes delivered, by result (ok/failed/timeout/poison).",
            labels=["result"],
        ),
        stats["tasks_completed"],
    )
    retried = CounterMetricFamily(
        "hal_htc_tasks_retried", "HTC task re-runs (after an error or a worker death)."
    )
    retried.add_metric([], stats["tasks_retried"])
    yield retried
    backlog = GaugeMetricFamily("hal_htc_task_backlog", "HTC tasks waiting for a worker.")
    backlog.add_metric([], stats["backlog"])
    yield backlog
    flight = GaugeMetricFamily(
        "hal_htc_tasks_in_flight", "HTC tasks sent to a worker, result not back yet."
    )
    flight.add_metric([], stats["in_flight"])
    yield flight
    yield labelled(
        GaugeMetricFamily(
            "hal_htc_workers", "HTC workers of live sessions by state.", labels=["state"]
        ),
        stats["workers"],
    )
    yield labelled(
        CounterMetricFamily(
            "hal_htc_worker_failures",
            "HTC workers that died (lost) or failed to start (start).",
            labels=["reason"],
        ),
        stats["worker_failures"],
    )
