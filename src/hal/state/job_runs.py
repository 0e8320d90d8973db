"""The earlier runs of requeued jobs, as Slurm's accounting keeps them (``sacct -D``).

A job requeued (``scontrol requeue``, a preemption in mode requeue, its node failing with
``--requeue``, a cron job's next run) goes back to the queue under its id, and its row
then describes the new run. The run that ended is kept in ``job_runs`` by the same
commit (``Cluster._commit``): its state as sacct shows it (``REQUEUED``, ``PREEMPTED``,
``NODE_FAIL``...), exit code, partition, times, nodes, what its batch script used, and
what its cloud nodes cost (its rate at its start × its run time, ``hal.core.cloud_costs``),
whether a provider's interruption notice ended it and the work it lost
(``hal.state.interruptions``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hal.core.cloud_costs import rate_of, run_cost
from hal.core.job import Job
from hal.state.codec import allocation_to_json
from hal.state.interruptions import interrupted_at, lost_work
from hal.state.job_changes import RUN_END
from hal.state.store import RunRow


def ended_runs(before: Mapping[int, Job], jobs: Sequence[Job]) -> list[RunRow]:
    """The runs that ``jobs`` (new versions) ended by going back to the queue, from their
    versions ``before`` the change."""
    runs: list[RunRow] = []
    for job in jobs:
        old = before.get(job.id)
        if old is None or job.restarts != old.restarts + 1 or RUN_END not in job.extra:
            continue
        state, code, sig = job.extra[RUN_END].split()
        end = old.end_time or job.eligible_time or job.submit_time
        runs.append(
            RunRow(
                job_id=job.id,
                attempt=old.restarts,
                state=state,
                exit_code=int(code),
                exit_signal=int(sig),
                partition=old.partition,
                submit_time=old.submit_time,
                eligible_time=old.eligible_time,
                start_time=old.start_time,
                end_time=end,
                allocation=allocation_to_json(old.allocation),
                max_rss=int(job.extra.get("max_rss", "0") or 0),
                cpu_seconds=float(job.extra.get("cpu_seconds", "0") or 0),
                cost=run_cost(rate_of(old.extra), old.start_time, end),
                interrupted_at=interrupted_at(old.extra),
                lost_work=lost_work(old, state, end),
            )
        )
    return runs
