"""One trace per job: span tree, explicit times, deterministic ids matching TRACEPARENT,
scheduling decisions as events, requeues as attempts."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import JobState, PendingReason
from hal.observe import traceids
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Placement, Plan
from hal.scheduler.service import CycleStats
from hal.server.observe.tracing import JobTracer
from hal.testing.builders import make_job


@pytest.fixture
def tracer(clock: VirtualClock) -> JobTracer:
    return JobTracer("test", clock)


@pytest.fixture
def exporter(tracer: JobTracer) -> InMemorySpanExporter:
    exp = InMemorySpanExporter()
    tracer.add_exporter(exp, batch=False)
    return exp


def by_name(exp: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in exp.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def cycle(tracer: JobTracer, now: float, plan: Plan) -> None:
    snap = ClusterSnapshot(revision=1, now=now, nodes=(), partitions=(), pending=(), running=())
    tracer.on_cycle(CycleStats(), snap, plan)


def test_a_completed_job_makes_one_trace_whose_run_span_is_the_jobs_traceparent(
    tracer: JobTracer, exporter: InMemorySpanExporter, clock: VirtualClock
) -> None:
    t0 = clock.now()
    pending = make_job(5).submitted(t0).build()
    tracer.on_jobs_changed([pending])
    cycle(tracer, t0 + 1, Plan(1, updates=(PendingUpdate(5, PendingReason.RESOURCES),)))
    running = make_job(5).submitted(t0).running_on("n1", start=t0 + 10).build()
    cycle(tracer, t0 + 10, Plan(2, placements=(Placement(5, running.allocation),)))  # type: ignore[arg-type]
    tracer.on_jobs_changed([running])
    clock.set(t0 + 10.5)
    tracer.on_jobs_changed([running.evolve(launched=True)])
    assert exporter.get_finished_spans() == ()  # nothing is exported before the job ends
    tracer.on_jobs_changed(
        [running.evolve(launched=True, state=JobState.COMPLETED, end_time=t0 + 70)]
    )
    spans = by_name(exporter)
    assert sorted(spans) == ["job", "job.dispatch", "job.queue", "job.run"]
    root, queue, run = spans["job"][0], spans["job.queue"][0], spans["job.run"][0]
    trace_id = traceids.job_trace_id("test", 5, t0)
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {trace_id}
    assert root.parent is None
    assert all(s.parent.span_id == root.context.span_id  # type: ignore[union-attr]
               for s in exporter.get_finished_spans() if s is not root)  # fmt: skip
    parent = traceids.traceparent("test", 5, t0, 0).split("-")[2]
    assert f"{run.context.span_id:016x}" == parent
    assert root.start_time == int(t0 * 1e9) and root.end_time == int((t0 + 70) * 1e9)
    assert queue.end_time == int((t0 + 10) * 1e9)
    assert run.start_time == int((t0 + 10.5) * 1e9)
    assert [e.name for e in queue.events] == ["scheduling.pending", "scheduling.placed"]
    assert queue.events[0].attributes == {"hal.job.reason": "Resources"}
    assert root.attributes["hal.job.state"] == "COMPLETED"  # type: ignore[index]
    assert tracer.trails == {}


def test_a_failed_job_is_an_error_span_with_error_type(
    tracer: JobTracer, exporter: InMemorySpanExporter, clock: VirtualClock
) -> None:
    job = make_job(6).submitted(clock.now()).running_on("n1", start=clock.now()).build()
    tracer.on_jobs_changed([job])
    tracer.on_jobs_changed([job.evolve(state=JobState.TIMEOUT, end_time=clock.now() + 5)])
    root = by_name(exporter)["job"][0]
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes["error.type"] == "TIMEOUT"  # type: ignore[index]


def test_a_requeued_job_has_one_queue_and_run_span_per_attempt(
    tracer: JobTracer, exporter: InMemorySpanExporter, clock: VirtualClock
) -> None:
    t0 = clock.now()
    first = make_job(7).submitted(t0).running_on("n1", start=t0 + 1).build()
    tracer.on_jobs_changed([first])
    clock.set(t0 + 5)
    tracer.on_jobs_changed([first.evolve(state=JobState.PENDING, restarts=1, start_time=None)])
    second: Job = first.evolve(restarts=1, start_time=t0 + 8)
    tracer.on_jobs_changed([second])
    tracer.on_jobs_changed([second.evolve(state=JobState.COMPLETED, end_time=t0 + 20)])
    spans = by_name(exporter)
    runs = sorted(spans["job.run"], key=lambda s: s.start_time or 0)
    assert len(runs) == 2 and len(spans["job.queue"]) == 2
    assert runs[0].attributes["hal.job.outcome"] == "requeued"  # type: ignore[index]
    assert runs[0].end_time == int((t0 + 5) * 1e9)
    for attempt, span in enumerate(runs):
        want = traceids.traceparent("test", 7, t0, attempt).split("-")[2]
        assert f"{span.context.span_id:016x}" == want


def test_a_job_cancelled_while_pending_has_a_queue_span_and_links_its_submitter(
    tracer: JobTracer, exporter: InMemorySpanExporter, clock: VirtualClock
) -> None:
    parent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    job = make_job(8).submitted(clock.now()).build()
    job = job.evolve(spec=job.spec.with_changes(environment=(("TRACEPARENT", parent),)))
    tracer.on_jobs_changed([job])
    tracer.on_jobs_changed([job.evolve(state=JobState.CANCELLED, end_time=clock.now() + 3)])
    spans = by_name(exporter)
    assert sorted(spans) == ["job", "job.queue"]
    link = spans["job"][0].links[0]
    assert f"{link.context.trace_id:032x}" == "ab" * 16


def test_without_an_exporter_no_spans_are_built_but_the_timeline_is_kept(
    tracer: JobTracer, clock: VirtualClock
) -> None:
    job = make_job(9).submitted(clock.now()).running_on("n1", start=clock.now()).build()
    tracer.on_jobs_changed([job])
    tracer.on_jobs_changed([job.evolve(state=JobState.COMPLETED, end_time=clock.now())])
    trail = tracer.trail(9)
    assert trail is not None and trail.attempts[0].nodes == ("n1",)


def test_a_reason_given_again_is_one_event(tracer: JobTracer, clock: VirtualClock) -> None:
    """Each full pass gives every pending job its reason again: the trail keeps one
    event of it until the reason or the expected start changes."""
    t0 = clock.now()
    tracer.on_jobs_changed([make_job(5).submitted(t0).build()])
    resources = Plan(1, updates=(PendingUpdate(5, PendingReason.RESOURCES),))
    for i in range(3):
        cycle(tracer, t0 + i, resources)
    expected = Plan(1, updates=(PendingUpdate(5, PendingReason.RESOURCES, t0 + 50),))
    cycle(tracer, t0 + 3, expected)
    cycle(tracer, t0 + 4, expected)
    cycle(tracer, t0 + 5, resources)
    trail = tracer.trail(5)
    assert trail is not None
    assert [(t - t0, attrs) for t, _, attrs in trail.events] == [
        (0, {"hal.job.reason": "Resources"}),
        (3, {"hal.job.reason": "Resources", "hal.job.expected_start": f"{t0 + 50:.3f}"}),
        (5, {"hal.job.reason": "Resources"}),
    ]
