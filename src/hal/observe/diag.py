"""``GET /v1/diag`` (``sdiag``): the scheduler statistics the metrics count, gathered
into one object. Every number is one the server measured since it started: the
Prometheus counters of ``HalMetrics`` (the same as ``/metrics``), the few plain numbers
it keeps beside them for sdiag, and the job counts of the cluster mirror now."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from hal.core.errors import Conflict
from hal.observe.plane import ObservePlane
from hal.wire.diag import SchedulerDiag

# sdiag's three end counters, as Slurm 22.05 counts them (observed): a job whose batch
# script ended is "completed" whatever its exit status (one exiting 3 is); "canceled"
# is scancel; "failed" what the system ended (node failures, boot failures). A job that
# reached its time limit counted in none of them, nor do HAL's timeout, deadline and
# preempted ends here (hal_jobs_finished_total has every state).
COMPLETED = ("completed", "failed", "oom")
CANCELED = ("cancelled",)
FAILED = ("node_fail", "boot_fail")


def _sum(metric: Counter | Gauge | Histogram, suffix: str, **labels: str) -> float:
    """The sum of ``metric``'s ``suffix`` samples (``_total``, ``_count``, ``_sum``) over
    the label values matching ``labels``."""
    total = 0.0
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith(suffix) and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                total += sample.value
    return total


def scheduler_diag(plane: ObservePlane) -> SchedulerDiag:
    m = plane.metrics
    if not plane.settings.metrics:
        raise Conflict(
            "this server runs with HAL_METRICS=0: it counts nothing for sdiag; "
            "start it without HAL_METRICS=0 (docs/observability.md)"
        )
    now = plane.clock.now()

    def ended(states: tuple[str, ...]) -> int:
        return int(sum(_sum(m.finished, "_total", state=s) for s in states))

    sample = plane.sample(now)
    cycles = int(_sum(m.cycle, "_count"))
    total_cycle_s = _sum(m.cycle, "_sum")
    backfill_cycles = int(_sum(m.backfill_cycles, "_total"))
    backfill_total_cycle_s = _sum(m.backfill_duration, "_sum")
    return SchedulerDiag(
        now=now,
        since=plane.started_at,
        jobs_submitted=int(_sum(m.submitted, "_total")),
        jobs_started=int(_sum(m.started, "_total")),
        jobs_completed=ended(COMPLETED),
        jobs_canceled=ended(CANCELED),
        jobs_failed=ended(FAILED),
        jobs_pending=sample.pending,
        jobs_running=sample.running,
        cycles=cycles,
        last_cycle_s=plane.last_cycle_s,
        max_cycle_s=m.cycle_max_s,
        total_cycle_s=total_cycle_s,
        total_depth=m.cycle_depth_total,
        last_queue_length=m.last_queue_length,
        backfill_jobs=int(_sum(m.backfill_started, "_total")),
        backfill_cycles=backfill_cycles,
        backfill_last_when=m.backfill_last_time,
        backfill_last_cycle_s=_sum(m.backfill_last_duration, ""),
        backfill_max_cycle_s=m.backfill_max_s,
        backfill_total_cycle_s=backfill_total_cycle_s,
        backfill_last_depth=int(_sum(m.backfill_depth, "")),
        backfill_total_depth=m.backfill_depth_total,
        mean_cycle_us=_mean(_us(total_cycle_s), cycles),
        mean_depth=_mean(m.cycle_depth_total, cycles),
        backfill_mean_cycle_us=_mean(_us(backfill_total_cycle_s), backfill_cycles),
        backfill_mean_depth=_mean(m.backfill_depth_total, backfill_cycles),
    )


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def _mean(total: int, count: int) -> int:
    """sdiag's mean: an integer division, 0 before the first cycle."""
    return total // count if count else 0
