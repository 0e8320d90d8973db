"""An allocation's exit status from the command it was held for (``salloc``, ADR 0013).

salloc's command runs on the submit host while the allocation's batch script only holds
its nodes, so the script's own exit says nothing. Before salloc ends the script it
records the command's exit status here (Slurm's salloc passes it to
``slurm_complete_job``); when the script then ends on its own, the job ends with this
status instead of the script's: ``COMPLETED`` for 0:0, ``FAILED`` otherwise, and sacct's
ExitCode ``CODE:SIGNAL``. A job that is cancelled, times out or fails with its node ends
as before: the recorded status is for the command's own end only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.core.errors import InvalidRequest
from hal.core.states import JobState
from hal.state import commands
from hal.state.store import EventRow

if TYPE_CHECKING:
    from hal.core.job import Job
    from hal.state.cluster import Caller, Cluster

COMMAND_EXIT = "command_exit"  # job.extra key: "CODE:SIGNAL"


async def record(
    cluster: Cluster, ident: str, caller: Caller, exit_code: int, signal: int
) -> list[int]:
    """Record the status the running (or suspended) job ends with when its batch script
    exits; the same call again replaces it. Returns the job ids recorded."""
    if not 0 <= exit_code <= 255:
        raise InvalidRequest(f"exit code {exit_code} is not 0..255", field="exit_code")
    if not 0 <= signal <= 64:
        raise InvalidRequest(f"invalid signal number {signal}", field="signal")
    async with cluster.change() as change:
        jobs = cluster.resolve(ident)
        commands.authorise(jobs, caller)
        live = [j for j in jobs if j.state in (JobState.RUNNING, JobState.SUSPENDED)]
        if not live:
            states = ", ".join(sorted({j.state.value for j in jobs}))
            raise InvalidRequest(
                f"job {ident} is {states}, not running: only a running job's exit status "
                "can be recorded"
            )
        now = cluster.clock.now()
        value = f"{exit_code}:{signal}"
        changed = [j.evolve(extra={**j.extra, COMMAND_EXIT: value}) for j in live]
        events = [
            EventRow(
                now, "job.command_exit", job_id=j.id, state=j.state.value, data={"exit": value}
            )
            for j in live
        ]
        await change.commit(changed, events)
        return [j.id for j in changed]


def recorded(job: Job) -> tuple[int, int] | None:
    """The recorded (exit code, signal), if any."""
    value = job.extra.get(COMMAND_EXIT)
    if value is None:
        return None
    code, _, signal = value.partition(":")
    return int(code), int(signal or 0)
