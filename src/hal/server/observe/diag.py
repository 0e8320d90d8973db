"""``GET /v1/diag`` (``sdiag``): the scheduler statistics the metrics count, gathered
into one object. Every number is one the server measured since it started: the
Prometheus counters of ``HalMetrics`` (the same as ``/metrics``), the few plain numbers
it keeps beside them for sdiag, and the job counts of the cluster mirror now."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from hal.core.errors import Conflict
from hal.wire.diag import SchedulerDiag

if TYPE_CHECKING:  # (the plane holds a ``Counted``: no import cycle at run time)
    from hal.server.observe.metrics import HalMetrics
    from hal.server.observe.plane import ObservePlane

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


@dataclass(frozen=True, slots=True)
class Counted:
    """The Prometheus counters sdiag reads, at one moment. ``/metrics`` never goes back
    (a counter that did would break every ``rate()``), so sdiag -r keeps the values of
    its moment (``ObservePlane.diag_base``) and sdiag shows what was added since. A cycle
    is its pass and the forecast slice after it (``cycle_s``; ``pass_s`` the passes
    alone)."""

    submitted: int = 0
    started: int = 0
    completed: int = 0
    canceled: int = 0
    failed: int = 0
    cycles: int = 0
    cycle_s: float = 0.0
    pass_s: float = 0.0
    forecast_slices: int = 0
    backfill_jobs: int = 0
    backfill_cycles: int = 0
    backfill_s: float = 0.0
    passes_capped: int = 0
    passes_capped_backfilled: int = 0

    def __sub__(self, base: Counted) -> Counted:
        return Counted(*(getattr(self, f) - getattr(base, f) for f in self.__slots__))


def counted(m: HalMetrics) -> Counted:
    def ended(states: tuple[str, ...]) -> int:
        return int(sum(_sum(m.finished, "_total", state=s) for s in states))

    return Counted(
        submitted=int(_sum(m.submitted, "_total")),
        started=int(_sum(m.started, "_total")),
        completed=ended(COMPLETED),
        canceled=ended(CANCELED),
        failed=ended(FAILED),
        cycles=int(_sum(m.cycle, "_count")),
        cycle_s=_sum(m.cycle, "_sum"),
        pass_s=_sum(m.pass_duration, "_sum"),
        forecast_slices=int(_sum(m.forecast_slice, "_count")),
        backfill_jobs=int(_sum(m.backfill_started, "_total")),
        backfill_cycles=int(_sum(m.backfill_cycles, "_total")),
        backfill_s=_sum(m.backfill_duration, "_sum"),
        passes_capped=int(_sum(m.passes_capped, "_total")),
        passes_capped_backfilled=int(_sum(m.passes_capped_backfilled, "_total")),
    )


def reset_diag(plane: ObservePlane) -> None:
    """``sdiag -r``: what Slurm 22.05.8's reset zeroes starts again from 0 ("Data since"
    now): the job counters, the cycle counts, maxima, sums and depths of both stages, the
    backfill stage's last cycle and depth (and the forecast slices' count, maximum and
    last, which belong with backfill), the event loop's longest lag, and the RPC tables.
    The last main cycle and its queue length stay, as in Slurm; ``/metrics`` is not
    touched."""
    _enabled(plane)
    m = plane.metrics
    plane.diag_base = counted(m)
    plane.diag_since = plane.clock.now()
    m.cycle_max_s = m.pass_max_s = m.forecast_max_s = m.backfill_max_s = 0.0
    m.cycle_depth_total = m.backfill_depth_total = 0
    plane.loop_lag.reset()
    plane.requests.reset()
    plane.passes.reset()


def _enabled(plane: ObservePlane) -> None:
    if not plane.settings.metrics:
        raise Conflict(
            "this server runs with HAL_METRICS=0: it counts nothing for sdiag; "
            "start it without HAL_METRICS=0 (docs/admin/observability.md)"
        )


def scheduler_diag(plane: ObservePlane, agent_queue_size: int | None = None) -> SchedulerDiag:
    """``agent_queue_size``: the instructions waiting in the agents' outboxes."""
    _enabled(plane)
    m = plane.metrics
    now = plane.clock.now()
    c = counted(m) - plane.diag_base
    sample = plane.sample(now)
    backfilled = c.backfill_cycles > 0  # since the reset: else its "last" values are 0
    sliced = c.forecast_slices > 0  # (the same for the forecast's last slice)
    by_type, by_user = plane.requests.rows()
    return SchedulerDiag(
        now=now,
        since=plane.diag_since or plane.started_at,
        jobs_submitted=c.submitted,
        jobs_started=c.started,
        jobs_completed=c.completed,
        jobs_canceled=c.canceled,
        jobs_failed=c.failed,
        jobs_pending=sample.pending,
        jobs_running=sample.running,
        cycles=c.cycles,
        last_cycle_s=plane.last_cycle_s,
        max_cycle_s=m.cycle_max_s,
        total_cycle_s=c.cycle_s,
        last_pass_s=plane.last_pass_s,
        max_pass_s=m.pass_max_s,
        total_pass_s=c.pass_s,
        mean_pass_us=_mean(_us(c.pass_s), c.cycles),
        forecast_slices=c.forecast_slices,
        last_forecast_slice_s=m.forecast_last_s if sliced else 0.0,
        max_forecast_slice_s=m.forecast_max_s,
        passes_capped=c.passes_capped,
        passes_capped_backfilled=c.passes_capped_backfilled,
        max_event_loop_lag_s=plane.loop_lag.max_s,
        max_pass_breakdown=plane.passes.longest,
        total_depth=m.cycle_depth_total,
        last_queue_length=m.last_queue_length,
        backfill_jobs=c.backfill_jobs,
        backfill_cycles=c.backfill_cycles,
        backfill_last_when=m.backfill_last_time,
        backfill_last_cycle_s=_sum(m.backfill_last_duration, "") if backfilled else 0.0,
        backfill_max_cycle_s=m.backfill_max_s,
        backfill_total_cycle_s=c.backfill_s,
        backfill_last_depth=int(_sum(m.backfill_depth, "")) if backfilled else 0,
        backfill_total_depth=m.backfill_depth_total,
        mean_cycle_us=_mean(_us(c.cycle_s), c.cycles),
        mean_depth=_mean(m.cycle_depth_total, c.cycles),
        backfill_mean_cycle_us=_mean(_us(c.backfill_s), c.backfill_cycles),
        backfill_mean_depth=_mean(m.backfill_depth_total, c.backfill_cycles),
        requests_in_flight=plane.requests.in_flight,
        agent_queue_size=agent_queue_size,
        rpc_by_type=by_type,
        rpc_by_user=by_user,
    )


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def _mean(total: int, count: int) -> int:
    """sdiag's mean: an integer division, 0 before the first cycle."""
    return total // count if count else 0
