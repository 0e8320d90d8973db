"""What ``hal up`` does with the cluster's running jobs when it stops (Ctrl-C, SIGTERM,
its terminal closed).

Jobs outlive their agent by design (``hal.agent``: a restarted agent adopts them), so
``hal up`` that only stopped its agents left every running job, and its step
supervisor, running unowned, re-parented to init, without a word. Now, by default, it
stops them with the cluster: no pass starts another job, each running job is cancelled
as by ``scancel`` (CANCELLED, by ``STOPPED_BY``), and ``hal up`` waits for the agents to
report their ends before it stops them. ``hal up --keep-jobs`` leaves them running, and
the next ``hal up`` on the same state directory adopts them. Either way it says what it
did, and what is left: jobs still pending stay queued for the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hal.core.errors import HalError
from hal.core.states import JobState

if TYPE_CHECKING:
    from hal.api.server import HalServer

# who cancelled them, as sacct ("CANCELLED by ...") and `hal show` name it
STOPPED_BY = "hal up (the local cluster stopped)"
POLL_S = 0.2
JOBS_END_S = 30.0  # beyond KillWait: the agents' reports of the cancelled jobs' ends


@dataclass(slots=True)
class Stopped:
    """What stopping did: the jobs cancelled and ended, those still running when the
    wait ended, and how many wait in the queue."""

    ended: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    pending: int = 0


async def end_jobs(server: HalServer, keep: bool, data_dir: Path, hurry: asyncio.Event) -> None:
    """Stop the running jobs with the cluster, or with ``keep`` leave them running; say
    on stderr which, and what stays queued."""
    if keep:
        lines = kept_lines(running_jobs(server), pending_jobs(server), str(data_dir))
    else:
        running = running_jobs(server)
        if running:
            print(
                f"hal: stopping {len(running)} running job(s) with the cluster (Ctrl-C again: "
                "leave them running) ...",
                file=sys.stderr,
                flush=True,
            )
        within = server.config.kill_wait_seconds + JOBS_END_S
        lines = stopped_lines(await stop_jobs(server, within, hurry), str(data_dir))
    for line in lines:
        print(line, file=sys.stderr)


def running_jobs(server: HalServer) -> list[str]:
    """The jobs holding nodes now (running, suspended, ending), by display id."""
    jobs = sorted(server.cluster.jobs.values(), key=lambda j: j.id)
    return [j.display_id for j in jobs if j.state.is_active]


def pending_jobs(server: HalServer) -> int:
    return sum(j.state is JobState.PENDING for j in server.cluster.jobs.values())


async def stop_jobs(server: HalServer, within_s: float, hurry: asyncio.Event) -> Stopped:
    """Pause the scheduler, cancel every running job and wait, at most ``within_s``
    seconds or until ``hurry`` (a second Ctrl-C), for their agents to report the ends.
    A job that a pass already under way starts is cancelled in the next round."""
    from hal.state import commands
    from hal.state.cluster import Caller

    server.service.paused = True
    caller = Caller(STOPPED_BY, admin=True)
    cancelled: dict[str, int] = {}  # display id → id, for their order
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        jobs = [j for j in server.cluster.jobs.values() if j.state.is_active]
        for job in jobs:
            if job.state is JobState.COMPLETING or job.display_id in cancelled:
                continue  # being cancelled (by us, or by its user before us)
            cancelled[job.display_id] = job.id
            with contextlib.suppress(HalError):  # it ended meanwhile
                await commands.cancel(server.cluster, job.display_id, caller)
        if not jobs or hurry.is_set() or loop.time() >= deadline:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hurry.wait(), POLL_S)
    left = running_jobs(server)
    ended = [d for d, _ in sorted(cancelled.items(), key=lambda item: item[1]) if d not in left]
    return Stopped(ended=ended, left=left, pending=pending_jobs(server))


def stopped_lines(done: Stopped, data_dir: str) -> list[str]:
    """What ``hal up`` says once it stopped the jobs."""
    lines = []
    if done.ended:
        lines.append(
            f"hal: stopped {len(done.ended)} running job(s) with the cluster "
            f"({_ids(done.ended)}): CANCELLED by {STOPPED_BY}"
        )
    if done.left:
        lines.append(
            f"hal: {len(done.left)} job(s) had not ended when hal up stopped waiting "
            f"({_ids(done.left)}); the next `hal up` on {data_dir} adopts them"
        )
    return lines + pending_lines(done.pending)


def kept_lines(running: list[str], pending: int, data_dir: str) -> list[str]:
    """What ``hal up --keep-jobs`` says at its stop."""
    lines = []
    if running:
        lines.append(
            f"hal: {len(running)} job(s) keep running ({_ids(running)}); the next `hal up` on "
            f"{data_dir} adopts them"
        )
    return lines + pending_lines(pending)


def pending_lines(pending: int) -> list[str]:
    if not pending:
        return []
    return [f"hal: {pending} pending job(s) stay queued; the next `hal up` runs them"]


def _ids(ids: list[str], shown: int = 10) -> str:
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more
