"""``sbatch --signal=SIG@N`` without ``B:``: N seconds before a running job's time limit,
the signal goes to the job's running steps, not to its batch shell, as Slurm's does
(sbatch(1): "all job steps will be signaled, but not the batch shell itself"; checked
against Slurm 22.05.8: the step got USR2 once, the line after srun ran and
the job ended COMPLETED). A job without steps then gets nothing, as in Slurm; ``B:``
signals the batch shell alone, which its node's agent does.

The server sends it (housekeeping, each second): it knows every step, also those srun
runs on the batch node, and reaches them as ``scancel -s SIG JOB`` does. Once per run of
a job; a server restarted more than ``LATE_S`` after the moment does not send it again
(it may have been sent before the restart)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.core.states import JobState
from hal.core.suspension import suspended_seconds

if TYPE_CHECKING:
    from hal.state.steps import StepTable

LATE_S = 60.0


async def signal_due(table: StepTable) -> None:
    now = table.cluster.clock.now()
    for job_id in sorted({job_id for (job_id, _, _), s in table.steps.items() if not s.done}):
        job = table.cluster.jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING or job.start_time is None:
            continue
        wanted = job.spec.signal
        if wanted is None or wanted.batch_only or not job.time_limit_s:
            continue
        limit = job.start_time + job.time_limit_s + suspended_seconds(job, now)
        due = limit - wanted.seconds_before
        run = (job_id, job.restarts)
        if due <= now <= due + LATE_S and run not in table.signalled:
            table.signalled.add(run)
            for step in sorted(
                (s for (j, a, _), s in table.steps.items() if (j, a) == run and not s.done),
                key=lambda s: s.step_id,
            ):
                await table.cancel(step, wanted.signum)
