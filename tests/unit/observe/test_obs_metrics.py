"""Control-plane metrics: names and units per the conventions, transitions counted once,
gauges read from the mirror, exposition that promtool accepts."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import JobState, NodeState, PendingReason
from hal.scheduler.framework.scheduler import BackfillCycle, PassResult
from hal.scheduler.framework.snapshot import Plan
from hal.scheduler.plugins import build_scheduler
from hal.server.observe.metrics import HalMetrics, instrumented_decide
from hal.state import commands
from hal.state.cluster import Cluster
from hal.state.node_usage import hold
from hal.testing.builders import cluster as snapshot_of
from hal.testing.builders import make_job, make_node
from hal.testing.mirror import commit


def samples(m: HalMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(m.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: HalMetrics, name: str, **labels: str) -> float:
    return samples(m).get((name, tuple(sorted(labels.items()))), 0.0)


def put(cluster: Cluster, *jobs: Job) -> None:
    for job in jobs:
        cluster.put(job)


def test_a_job_life_is_counted_once_per_transition(cluster: Cluster, clock: VirtualClock) -> None:
    m = HalMetrics(cluster, clock)
    pending = make_job(1).partition("debug").submitted(clock.now()).build()
    m.on_jobs_changed([pending])
    m.on_jobs_changed([pending.evolve(reason=PendingReason.PRIORITY)])  # an update, no new job
    clock.advance(30)
    running = make_job(1).partition("debug").submitted(clock.now() - 30)
    started = running.running_on("n1", start=clock.now()).build()
    m.on_jobs_changed([started])
    clock.advance(0.2)
    m.on_jobs_changed([started.evolve(launched=True)])
    clock.advance(60)
    done = started.evolve(state=JobState.COMPLETED, end_time=clock.now(), launched=True)
    m.on_jobs_changed([done])
    assert value(m, "hal_jobs_submitted_total", partition="debug") == 1
    assert value(m, "hal_jobs_started_total", partition="debug") == 1
    assert value(m, "hal_jobs_finished_total", partition="debug", state="completed") == 1
    assert value(m, "hal_job_queue_wait_seconds_sum", partition="debug") == pytest.approx(30)
    assert value(
        m, "hal_job_run_duration_seconds_sum", partition="debug", state="completed"
    ) == pytest.approx(60.2)
    assert value(m, "hal_dispatch_latency_seconds_sum") == pytest.approx(0.2)
    assert m._seen == {}  # finished jobs are forgotten


def test_requeue_and_out_of_memory_use_the_conventions_labels(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = HalMetrics(cluster, clock)
    job = make_job(3).running_on("n1", start=clock.now()).build()
    m.on_jobs_changed([job])
    m.on_jobs_changed([job.evolve(state=JobState.PENDING, restarts=1, start_time=None)])
    m.on_jobs_changed([job.evolve(restarts=1)])
    m.on_jobs_changed([job.evolve(restarts=1, state=JobState.OUT_OF_MEMORY, end_time=1e6)])
    assert value(m, "hal_jobs_requeued_total", partition="batch") == 1
    assert value(m, "hal_jobs_started_total", partition="batch") == 2
    assert value(m, "hal_jobs_finished_total", partition="batch", state="oom") == 1
    assert value(m, "hal_jobs_submitted_total", partition="batch") == 0


def test_seeded_jobs_loaded_at_start_are_not_counted_as_submissions(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = HalMetrics(cluster, clock)
    old = make_job(9).build()
    m.seed([old])
    m.on_jobs_changed([old.evolve(reason=PendingReason.JOB_HELD_USER)])
    assert value(m, "hal_jobs_submitted_total", partition="batch") == 0


def test_gauges_read_jobs_nodes_and_allocations_from_the_mirror(
    cluster: Cluster, clock: VirtualClock
) -> None:
    cluster.nodes = {
        "n1": make_node("n1").cpus(8).gpus(2).mem_gib(32).build(),
        "n2": make_node("n2").cpus(4).down().build(),
    }
    running = make_job(1).cpus(3).gpus(1).running_on("n1", start=clock.now()).build()
    put(
        cluster,
        running,
        make_job(2).reason(PendingReason.RESOURCES).build(),
        make_job(3).reason(PendingReason.RESOURCES).build(),
        make_job(4).reason(PendingReason.DEPENDENCY).partition("gpu").build(),
        make_job(5).state(JobState.COMPLETED).build(),
    )
    m = HalMetrics(cluster, clock)
    assert value(m, "hal_jobs", state="running", partition="batch") == 1
    assert value(m, "hal_jobs", state="pending", partition="batch") == 2
    assert value(m, "hal_jobs", state="completed", partition="batch") == 0  # not a gauge
    assert value(m, "hal_queue_pending_jobs", partition="batch", reason="Resources") == 2
    assert value(m, "hal_queue_pending_jobs", partition="gpu", reason="Dependency") == 1
    assert value(m, "hal_node_cpus", node="n1", state="alloc") == 3
    assert value(m, "hal_node_cpus", node="n1", state="idle") == 5
    assert value(m, "hal_node_gpus", node="n1", state="alloc") == 1
    assert value(m, "hal_node_up", node="n2") == 0
    assert value(m, "hal_nodes", state="mix") == 1
    assert value(m, "hal_nodes", state="down") == 1
    assert value(m, "hal_build_info", version=__import__("hal").__version__,
                 python=__import__("platform").python_version()) == 1  # fmt: skip
    assert not any(name.endswith("_created") for name, _ in samples(m))


def test_a_pass_reports_attempts_and_rejections_per_plugin_and_reason(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = HalMetrics(cluster, clock)
    jobs = [make_job(i).cpus(2).submitted(float(i)).build() for i in range(1, 4)]
    held = make_job(9).hold().build()
    decide = instrumented_decide(build_scheduler(), [m.record_pass])
    plan = decide(snapshot_of().nodes(make_node("n1").cpus(2)).pending(*jobs, held).build())
    assert len(plan.placements) == 1
    assert value(m, "hal_schedule_attempts_total", result="scheduled") == 1
    assert value(m, "hal_schedule_attempts_total", result="unschedulable") == 3
    assert value(m, "hal_scheduler_rejections_total", plugin="hold", reason="JobHeldUser") == 1


def test_backfill_stages_are_counted_like_sdiag(cluster: Cluster, clock: VirtualClock) -> None:
    m = HalMetrics(cluster, clock)
    plan = Plan(revision=0)
    m.record_pass(PassResult(plan, backfill=BackfillCycle(0.02, 40, 3, 5)))
    m.record_pass(PassResult(plan))  # a pass that did not backfill changes nothing
    m.record_pass(PassResult(plan, backfill=BackfillCycle(0.04, 10, 1, 2)))
    assert value(m, "hal_backfill_cycles_total") == 2
    assert value(m, "hal_backfill_cycle_duration_seconds_count") == 2
    assert value(m, "hal_backfill_cycle_duration_seconds_sum") == pytest.approx(0.06)
    assert value(m, "hal_backfill_last_cycle_duration_seconds") == pytest.approx(0.04)
    assert value(m, "hal_backfill_last_depth_jobs") == 10
    assert value(m, "hal_backfill_jobs_started_total") == 4
    assert value(m, "hal_backfill_reservations_total") == 7


def test_sampled_passes_report_each_plugin_at_each_extension_point(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = HalMetrics(cluster, clock)
    plan = Plan(revision=0)
    m.record_pass(PassResult(plan, plugin_seconds={("noderesources", "Filter"): 0.002}))
    m.record_pass(PassResult(plan))  # an untimed pass adds nothing
    two = {("noderesources", "Filter"): 0.003, ("priority", "QueueSort"): 0.00001}
    m.record_pass(PassResult(plan, plugin_seconds=two))
    key = {"plugin": "noderesources", "extension_point": "Filter"}
    assert value(m, "hal_scheduler_plugin_duration_seconds_count", **key) == 2
    assert value(m, "hal_scheduler_plugin_duration_seconds_sum", **key) == pytest.approx(0.005)
    sort = {"plugin": "priority", "extension_point": "QueueSort"}
    assert value(m, "hal_scheduler_plugin_duration_seconds_count", **sort) == 1


def test_prediction_error_and_underpredictions_per_predictor(
    cluster: Cluster, clock: VirtualClock
) -> None:
    m = HalMetrics(cluster, clock)
    m.declare_predictor("learned")
    assert ("hal_prediction_underpredicted_total", (("predictor", "learned"),)) in samples(m)
    m.observe_prediction("learned", 100.0, 80.0)  # over: |80 - 100| / 80 = 0.25
    m.observe_prediction("learned", 50.0, 100.0)  # under: 0.5
    m.observe_prediction("learned", 0.2, 0.5)  # both taken as 1 s: exact
    assert value(m, "hal_prediction_error_ratio_count", predictor="learned") == 3
    assert value(m, "hal_prediction_error_ratio_sum", predictor="learned") == 0.75
    assert value(m, "hal_prediction_error_ratio_bucket", predictor="learned", le="0.25") == 2
    assert value(m, "hal_prediction_underpredicted_total", predictor="learned") == 1


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package 'prometheus')")  # fmt: skip
def test_exposition_passes_promtool_check_metrics(cluster: Cluster, clock: VirtualClock) -> None:
    cluster.nodes = {"n1": make_node("n1").build()}
    job = make_job(1).running_on("n1", start=clock.now()).build()
    put(cluster, job)
    m = HalMetrics(cluster, clock)
    m.on_jobs_changed([make_job(2).build(), job])
    m.on_jobs_changed([job.evolve(state=JobState.FAILED, end_time=clock.now() + 5)])
    m.observe_registration("n1")
    m.record_pass(PassResult(Plan(revision=0), backfill=BackfillCycle(0.01, 2, 1, 1),
                             plugin_seconds={("noderesources", "Filter"): 0.001}))  # fmt: skip
    m.observe_prediction("avg2", 60.0, 90.0)
    text = generate_latest(m.registry)
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def test_node_usage_helper_matches_cluster_accounting(cluster: Cluster) -> None:
    """The fixture's mirror uses the real applier bookkeeping (``hold``)."""
    job = make_job(1).cpus(2).running_on("n1").build()
    hold(cluster.usage, job)
    assert cluster.usage["n1"].allocated.cpus == 2
    assert NodeState.UP.value == "UP"


def test_a_finished_job_changed_again_is_not_counted_traced_or_logged_twice(
    cluster: Cluster, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A finished job committed again, still COMPLETED (once by ``hal update 1 --comment``,
    refused now, and by any later change of its record): that is no second
    end (hal_jobs_finished_total, the run-duration histogram, a second exported trace and
    a second "job finished" log line all said it was)."""
    import asyncio

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from hal.config.model import HalConfig
    from hal.observe.config import ObserveConfig
    from hal.server.observe.plane import ObservePlane
    from hal.state.cluster import Caller

    async def scenario() -> None:
        await cluster.load()
        plane = ObservePlane(HalConfig(cluster_name="test"), cluster, clock, ObserveConfig())
        spans = InMemorySpanExporter()
        plane.tracer.add_exporter(spans, batch=False)
        t = clock.now()
        running = make_job(1).partition("debug").submitted(t).running_on("n1", start=t).build()
        await commit(cluster, [running], [])
        done = running.evolve(state=JobState.COMPLETED, end_time=t + 60, launched=True)
        await commit(cluster, [done], [])
        roots = [s for s in spans.get_finished_spans() if s.name == "job"]
        assert len(roots) == 1
        clock.advance(120)
        with caplog.at_level("INFO", logger="hal.observe"):
            caplog.clear()  # (the end itself was logged if a test before set INFO)
            updated = cluster.jobs[1].evolve(spec=cluster.jobs[1].spec.with_changes(comment="seen"))
            await commit(cluster, [updated], [])
        assert updated.state is JobState.COMPLETED and updated.spec.comment == "seen"
        m = plane.metrics
        assert value(m, "hal_jobs_finished_total", partition="debug", state="completed") == 1
        assert (
            value(m, "hal_job_run_duration_seconds_count", partition="debug", state="completed")
            == 1
        )
        assert [s for s in spans.get_finished_spans() if s.name == "job"] == roots
        assert not [r for r in caplog.records if r.getMessage() == "job finished"]
        # requeued after it ended (``scontrol requeue``), it runs and ends again: counted
        await commands.requeue(cluster, "1", Caller("root", admin=True))
        again = cluster.jobs[1].evolve(
            state=JobState.COMPLETED, start_time=t + 200, end_time=t + 260
        )
        await commit(cluster, [again], [])
        assert value(m, "hal_jobs_finished_total", partition="debug", state="completed") == 2
        # a server started after the job ended: a change of its record is no end either
        later = ObservePlane(HalConfig(cluster_name="test"), cluster, clock, ObserveConfig())
        await later.start()
        try:
            job = cluster.jobs[1]
            await commit(cluster, [job.evolve(spec=job.spec.with_changes(comment="again"))], [])
        finally:
            await later.stop()
        assert value(later.metrics, "hal_jobs_finished_total", partition="debug",
                     state="completed") == 0  # fmt: skip

    asyncio.run(scenario())


def test_passes_and_forecast_slices_are_counted_apart(
    cluster: Cluster, clock: VirtualClock
) -> None:
    """sdiag's main schedule statistics are the passes alone, as Slurm's main scheduler's
    are; the forecast's slices and the cycles they make with their passes have their
    own fields (``/v1/diag``), series (``/metrics``) and block; ``sdiag -r`` zeroes the
    maxima and the slices' last, as it zeroes backfill's."""
    import asyncio

    from hal.compat.sdiag import sdiag_lines
    from hal.config.model import HalConfig
    from hal.observe.config import ObserveConfig
    from hal.scheduler.service import CycleStats
    from hal.server.observe.diag import reset_diag, scheduler_diag
    from hal.server.observe.plane import ObservePlane

    asyncio.run(cluster.load())
    plane = ObservePlane(HalConfig(cluster_name="test"), cluster, clock, ObserveConfig())
    snap, plan = snapshot_of().build(), Plan(revision=0)
    plane._on_cycle(CycleStats(1, 1.5, 1.2, 0.3), snap, plan)  # a pass, then a slice
    plane._on_cycle(CycleStats(2, 0.4, 0.4, None), snap, plan)  # no slice due
    m = plane.metrics
    assert value(m, "hal_scheduling_pass_duration_seconds_sum") == pytest.approx(1.6)
    assert value(m, "hal_forecast_slice_duration_seconds_count") == 1
    assert value(m, "hal_scheduling_cycle_duration_seconds_sum") == pytest.approx(1.9)
    d = scheduler_diag(plane)
    assert (d.cycles, d.max_cycle_s, d.last_cycle_s) == (2, 1.5, 0.4)
    assert (d.max_pass_s, d.last_pass_s, d.mean_pass_us) == (1.2, 0.4, 800_000)
    assert d.total_pass_s == pytest.approx(1.6)
    assert (d.forecast_slices, d.max_forecast_slice_s, d.last_forecast_slice_s) == (1, 0.3, 0.3)
    lines = sdiag_lines(d)
    main = lines.index("Main schedule statistics (microseconds):")
    assert lines[main + 1 : main + 3] == ["\tLast cycle:   400000", "\tMax cycle:    1200000"]
    assert "\tMean cycle:   800000" in lines
    forecast = lines.index("Forecast statistics (microseconds):")
    assert lines[forecast + 1 : forecast + 6] == [
        "\tTotal slices: 1",
        "\tLast slice:   300000",
        "\tMax slice:    300000",
        "\tLast cycle with its slice: 400000",
        "\tMax cycle with its slice:  1500000",
    ]
    reset_diag(plane)
    d = scheduler_diag(plane)
    assert (d.max_pass_s, d.max_forecast_slice_s, d.max_cycle_s) == (0.0, 0.0, 0.0)
    assert (d.forecast_slices, d.last_forecast_slice_s, d.last_pass_s) == (0, 0.0, 0.4)


def test_passes_stopped_at_the_cap_and_their_backfill_turns_are_counted(
    cluster: Cluster, clock: VirtualClock
) -> None:
    """A pass that stopped at max_job_starts (``PassResult.capped``), and one of those
    that ran the backfill stage all the same (its turn): counted in ``/metrics``,
    ``/v1/diag`` and sdiag's forecast block; ``sdiag -r`` starts them again from 0."""
    import asyncio

    from hal.compat.sdiag import sdiag_lines
    from hal.config.model import HalConfig
    from hal.observe.config import ObserveConfig
    from hal.server.observe.diag import reset_diag, scheduler_diag
    from hal.server.observe.plane import ObservePlane

    asyncio.run(cluster.load())
    plane = ObservePlane(HalConfig(cluster_name="test"), cluster, clock, ObserveConfig())
    m, plan, cycle = plane.metrics, Plan(revision=0), BackfillCycle(0.01, 2, 1, 1)
    for capped, backfilled in ((True, True), (True, False), (False, True), (True, False)):
        backfill = cycle if backfilled else None
        m.record_pass(PassResult(plan, backfill=backfill, capped=("a",) if capped else ()))
    assert value(m, "hal_scheduling_passes_capped_total") == 3
    assert value(m, "hal_scheduling_passes_capped_backfilled_total") == 1
    d = scheduler_diag(plane)
    assert (d.passes_capped, d.passes_capped_backfilled) == (3, 1)
    lines = sdiag_lines(d)
    assert "\tPasses stopped at max_job_starts: 3" in lines
    assert "\tPasses stopped there that backfilled: 1" in lines
    reset_diag(plane)
    d = scheduler_diag(plane)
    assert (d.passes_capped, d.passes_capped_backfilled) == (0, 0)
