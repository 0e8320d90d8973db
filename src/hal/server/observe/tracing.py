"""One OpenTelemetry trace per job, built when the job ends (conventions §2.4).

Span model (attributes under ``hal.``)::

    job                      submit → final state (root, INTERNAL)
      job.queue [attempt]    submit (or the previous attempt's end) → start;
                             one event per scheduling decision: the pending reason
      job.dispatch [attempt] start decision → the agent confirmed the process started
      job.run [attempt]      process start → end; its span id is the job's TRACEPARENT

Long-lived spans are not held open: the server keeps a small ``_Trail`` per job that has
something worth remembering (scheduling decisions, attempt starts, launch confirmations)
and, when the job reaches a final state, starts and ends every span with explicit
timestamps. The ids are not random: ``traceids`` derives them from the job, so the
``TRACEPARENT`` handed to the job at launch names the very ``job.run`` span exported
here — no per-job id needs storing, and every server process agrees on it.

Spans are built only while an exporter is attached (OTLP from the environment, or an
in-memory exporter in tests); trails are kept anyway, because the dashboard's job timeline
reads them.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from hal.core.clock import Clock
from hal.core.job import Job
from hal.core.states import JobState
from hal.observe import traceids
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.service import CycleStats

MAX_EVENTS = 32  # scheduling decisions remembered per job (the latest ones)
KEEP_FINISHED = 2000  # trails of finished jobs kept for the dashboard's job timeline
FAILED_STATES = frozenset(
    {
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
    }
)


@dataclass(slots=True)
class Attempt:
    attempt: int
    start: float
    nodes: tuple[str, ...]
    launched_at: float | None = None
    end: float | None = None
    outcome: str = ""


@dataclass(slots=True)
class Trail:
    """What the server remembers about a live job for its trace and timeline."""

    events: deque[tuple[float, str, dict[str, str]]] = field(
        default_factory=lambda: deque(maxlen=MAX_EVENTS)
    )
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts and self.attempts[-1].end is None else None


class _ForcedIds(IdGenerator):
    """Random ids, except for the next span when ``force`` was called (same thread)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._local = threading.local()

    def force(self, trace_id: int | None, span_id: int) -> None:
        self._local.trace_id = trace_id
        self._local.span_id = span_id

    def generate_trace_id(self) -> int:
        forced: int | None = getattr(self._local, "trace_id", None)
        self._local.trace_id = None
        return forced if forced is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        forced: int | None = getattr(self._local, "span_id", None)
        self._local.span_id = None
        return forced if forced is not None else self._random.generate_span_id()


def _submitter_link(job: Job) -> list[Link]:
    """A link to the trace the job was submitted from (a TRACEPARENT in its exported
    environment): a traced workflow finds its jobs without HAL parenting them."""
    text = dict(job.spec.environment).get("TRACEPARENT", "")
    parts = text.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return []
    try:
        ctx = SpanContext(int(parts[1], 16), int(parts[2], 16), is_remote=True,
                          trace_flags=TraceFlags(int(parts[3][:2], 16)))  # fmt: skip
    except ValueError:
        return []
    return [Link(ctx, {"hal.link": "submitter"})] if ctx.is_valid else []


def _ns(t: float) -> int:
    return int(t * 1_000_000_000)


class JobTracer:
    def __init__(self, cluster_name: str, clock: Clock, *, enabled: bool = True) -> None:
        self.cluster_name = cluster_name
        self.clock = clock
        self.enabled = enabled
        self._ids = _ForcedIds()
        self.provider = TracerProvider(
            resource=Resource.create(
                {
                    "service.name": "hal-server",
                    "host.name": socket.gethostname(),
                    "process.pid": os.getpid(),
                }
            ),
            id_generator=self._ids,
        )
        self.tracer = self.provider.get_tracer("hal.observe")
        self.exporting = False
        self.trails: dict[int, Trail] = {}
        self.finished: OrderedDict[int, Trail] = OrderedDict()

    # -- configuration ------------------------------------------------------------------
    def add_exporter(self, exporter: SpanExporter, *, batch: bool = True) -> None:
        processor: SpanProcessor = (
            BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        )
        self.provider.add_span_processor(processor)
        self.exporting = True

    def add_otlp(self, endpoint: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.add_exporter(OTLPSpanExporter(endpoint=endpoint, timeout=10))

    def shutdown(self) -> None:
        self.provider.shutdown()

    def trail(self, job_id: int) -> Trail | None:
        """What is remembered of a live or recently finished job (dashboard timeline)."""
        return self.trails.get(job_id) or self.finished.get(job_id)

    def trace_id(self, job: Job) -> str:
        return traceids.trace_id_hex(self.cluster_name, job.id, job.submit_time)

    # -- inputs -------------------------------------------------------------------------
    def _trail(self, job_id: int) -> Trail:
        trail = self.trails.get(job_id)
        if trail is None:
            trail = self.trails[job_id] = Trail()
        return trail

    def on_cycle(self, stats: CycleStats, snap: ClusterSnapshot, plan: Plan) -> None:
        """Remember each decision that changed something: O(plan), not O(queue). A full
        pass sends every waiting job whose reason or expected start changed (at scale,
        most of them); one the job's trail already ends with (the same reason, the same
        expected start to the millisecond) is not added again: each event is built on
        the event loop, and a queue's worth of them costs it seconds."""
        if not self.enabled:
            return
        now = snap.now
        trails = self.trails
        for up in plan.updates:
            start = up.expected_start
            was = trails.get(up.job_id)
            if was is not None and was.events:
                _, name, last = was.events[-1]
                if (
                    name == "scheduling.pending"
                    and last.get("hal.job.reason") == up.reason.value
                    and last.get("hal.job.expected_start")
                    == (None if start is None else f"{start:.3f}")
                ):
                    continue
            attrs = {"hal.job.reason": up.reason.value}
            if start is not None:
                attrs["hal.job.expected_start"] = f"{start:.3f}"
            self._trail(up.job_id).events.append((now, "scheduling.pending", attrs))
        for placement in plan.placements:
            nodes = ",".join(placement.allocation.nodes)
            self._trail(placement.job_id).events.append(
                (now, "scheduling.placed", {"hal.job.nodes": nodes})
            )
        for term in plan.terminations:
            self._trail(term.job_id).events.append(
                (now, "scheduling.terminated", {"hal.job.reason": term.reason.value})
            )

    def on_jobs_changed(self, jobs: Sequence[Job]) -> None:
        if not self.enabled:
            return
        trails = self.trails
        for job in jobs:
            state = job.state
            trail = trails.get(job.id)
            if state is JobState.PENDING:
                # the common case (submit, hold, a pass's reason): nothing to remember
                # unless a run of it ends here (requeued)
                if trail is not None and trail.attempts:
                    current = trail.current
                    if current is not None and job.restarts > current.attempt:
                        current.end = self.clock.now()
                        current.outcome = "requeued"
                continue
            if state.is_active and job.start_time is not None:
                trail = trail or self._trail(job.id)
                current = trail.current
                if current is None or current.attempt != job.restarts:
                    nodes = job.allocation.nodes if job.allocation else ()
                    trail.attempts.append(Attempt(job.restarts, job.start_time, nodes))
                    current = trail.attempts[-1]
                if job.launched and current.launched_at is None:
                    current.launched_at = self.clock.now()
            elif state.is_terminal:
                trails.pop(job.id, None)
                if trail is not None:
                    current = trail.current
                    end = job.end_time
                    # A short job's "started" report can reach the server after the agent's
                    # own finish time; the server's clock must not put launch after end.
                    if current is not None and current.launched_at is not None and end:
                        current.launched_at = min(current.launched_at, end)
                    self.finished[job.id] = trail
                    if len(self.finished) > KEEP_FINISHED:
                        self.finished.popitem(last=False)
                if self.exporting:
                    self.emit(job, trail)

    # -- output -------------------------------------------------------------------------
    def emit(self, job: Job, trail: Trail | None) -> None:
        """Start and end every span of ``job`` with explicit times (the job has ended)."""
        attempts = list(trail.attempts) if trail is not None else []
        if job.start_time is not None and not attempts:
            nodes = job.allocation.nodes if job.allocation else ()
            attempts.append(Attempt(job.restarts, job.start_time, nodes))
        end = job.end_time if job.end_time is not None else self.clock.now()
        name, jid, submit = self.cluster_name, job.id, job.submit_time
        trace_id = traceids.job_trace_id(name, jid, submit)
        attrs: dict[str, str | int] = {
            "hal.job.id": jid,
            "hal.job.partition": job.partition,
            "hal.job.user": job.spec.user,
            "hal.job.name": job.spec.name,
            "hal.job.state": job.state.value,
            "hal.job.exit_code": job.exit_code,
            "hal.job.reason": job.reason.value,
            "hal.job.restarts": job.restarts,
        }
        if job.array_job_id is not None and job.array_task_id is not None:
            attrs["hal.job.array_id"] = job.array_job_id
            attrs["hal.job.array_index"] = job.array_task_id
        failed = job.state in FAILED_STATES
        if failed:
            attrs["error.type"] = job.state.value
        self._ids.force(trace_id, traceids.job_span_id(name, jid, submit, "job"))
        root = self.tracer.start_span(
            "job", context=None, kind=SpanKind.INTERNAL, attributes=attrs,
            start_time=_ns(submit), links=_submitter_link(job),
        )  # fmt: skip
        parent = trace.set_span_in_context(root)
        events = list(trail.events) if trail is not None else []
        queue_start = submit
        for att in attempts:
            run_end = att.end if att.end is not None else end
            self._span(parent, job, "job.queue", att.attempt, queue_start, att.start, events)
            launched = att.launched_at if att.launched_at is not None else att.start
            launched = max(att.start, min(launched, run_end))
            self._span(parent, job, "job.dispatch", att.attempt, att.start, launched, [])
            run_attrs: dict[str, str | int] = {"hal.job.nodes": ",".join(att.nodes)}
            if att.outcome:
                run_attrs["hal.job.outcome"] = att.outcome
            self._span(parent, job, "job.run", att.attempt, launched, run_end, [], run_attrs)
            queue_start = run_end
        if job.start_time is None or (attempts and attempts[-1].end is not None):
            # ended while pending (cancelled, dependency never satisfied)
            self._span(parent, job, "job.queue", job.restarts, queue_start, end, events)
        for t, event, event_attrs in events:  # decisions outside every queue window
            root.add_event(event, event_attrs, timestamp=_ns(t))
        if failed:
            root.set_status(Status(StatusCode.ERROR, job.reason.value))
        root.end(end_time=_ns(end))

    def _span(
        self,
        parent: Context,
        job: Job,
        name: str,
        attempt: int,
        start: float,
        end: float,
        events: list[tuple[float, str, dict[str, str]]],
        attrs: dict[str, str | int] | None = None,
    ) -> None:
        """One child span; the decisions in ``events`` that fall within it move onto it."""
        span_id = traceids.job_span_id(self.cluster_name, job.id, job.submit_time, name, attempt)
        self._ids.force(None, span_id)
        all_attrs: dict[str, str | int] = {"hal.job.attempt": attempt, **(attrs or {})}
        span = self.tracer.start_span(
            name, context=parent, kind=SpanKind.INTERNAL, attributes=all_attrs,
            start_time=_ns(start),
        )  # fmt: skip
        kept = []
        for t, event, event_attrs in events:
            if start <= t <= end:
                span.add_event(event, event_attrs, timestamp=_ns(t))
            else:
                kept.append((t, event, event_attrs))
        events[:] = kept
        span.end(end_time=_ns(max(start, end)))
