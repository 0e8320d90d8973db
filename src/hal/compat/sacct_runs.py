"""sacct's records of a requeued job's earlier runs (``sacct -D``, ``--duplicates``).

Slurm's accounting keeps one record per run of a job: a requeue (``scontrol requeue``, a
preemption, a node failure) ends one record and the job's next run is a new one under the
same id. sacct shows the latest only; ``-D`` shows the earlier ones too, before it, each
with its own steps (Slurm 22.05.8, docs/slurm-checks.md). The server keeps the runs a
requeue ended (``JobInfo.runs``); a step belongs to the run it started in
(``StepRecord.attempt``: each run numbers its steps from 0, as Slurm's, so ``-D`` shows
``J.0`` under each run; a server from before that sends no run, and a step then belongs
to the run its start falls in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.client.records import replaced
from hal.core.states import STATE_CODES

if TYPE_CHECKING:  # (sacct reads records, not pydantic's models: their import is its start)
    from hal.wire.jobs import JobInfo, JobRun, StepRecord

_CODES = {state.value: code for state, code in STATE_CODES.items()} | {"REQUEUED": "RQ"}
# a record's ``suspended_seconds`` where its own is unknown: the server keeps one sum for
# all of a job's runs, so a requeued job suspended in any of them has no figure per run
SUSPENSION_UNKNOWN = -1.0


def records(job: JobInfo, *, duplicates: bool) -> list[JobInfo]:
    """The records sacct shows of ``job``: its latest run, after its earlier ones with
    ``duplicates``; each with the steps that started in it."""
    runs = sorted(job.runs, key=lambda r: r.attempt)
    if not runs:
        return [job]
    suspended = SUSPENSION_UNKNOWN if job.suspended_seconds else 0.0
    latest = replaced(
        job,
        {
            "steps": _of_run(job.steps, job.restarts, runs[-1].end_time, None),
            "suspended_seconds": suspended,
        },
    )
    if not duplicates:
        return [latest]
    earlier, since = [], None
    for run in runs:
        view = _view(job, run, _of_run(job.steps, run.attempt, since, run.end_time))
        earlier.append(replaced(view, {"suspended_seconds": suspended}))
        since = run.end_time
    return [*earlier, latest]


def _of_run(
    steps: list[StepRecord], attempt: int, since: float | None, until: float | None
) -> list[StepRecord]:
    """The steps of run ``attempt``, which ran in [``since``, ``until``) (None: without
    that bound): by their run, or (none sent) by their start."""
    return [
        s
        for s in steps
        if s.attempt == attempt
        or (
            s.attempt is None
            and (since is None or s.start_time >= since)
            and (until is None or s.start_time < until)
        )
    ]


def _view(job: JobInfo, run: JobRun, steps: list[StepRecord]) -> JobInfo:
    """``job`` as it was in ``run``."""
    return replaced(
        job,
        {
            "state": run.state,
            "state_code": _CODES.get(run.state, ""),
            "exit_code": run.exit_code,
            "exit_signal": run.exit_signal,
            "partition": run.partition,
            "submit_time": run.submit_time,
            "eligible_time": run.eligible_time,
            "start_time": run.start_time,
            "end_time": run.end_time,
            "nodes": run.nodes,
            "node_count": len(run.nodes),
            "cost": run.cost,
            "max_rss_bytes": run.max_rss_bytes,
            "cpu_seconds": run.cpu_seconds,
            "interrupted_at": run.interrupted_at,
            "lost_work_seconds": run.lost_work_seconds,
            # (an earlier run keeps only the sum: its UserCPU/SystemCPU are not known)
            "user_cpu_seconds": None,
            "system_cpu_seconds": None,
            "restarts": run.attempt,
            "cancelled_by": None,
            "steps": steps,
            "runs": [],
        },
    )
