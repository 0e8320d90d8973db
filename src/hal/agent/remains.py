"""What a step supervisor that died leaves behind, and how the agent ends it.

The supervisor ends every process of its job when the batch script exits (``supervisor``).
If the supervisor itself is SIGKILLed — by an operator or the kernel's OOM killer — that
never happens: the batch shell and everything it started are reparented to init and run
on outside any job. The agent that notices (the supervisor's pidfd, or adoption after a
restart) kills them instead, finding them three ways, as far as the host allows:

- the job's **cgroup** (cgroup backends): every process, whatever it did; the cgroup is
  then removed;
- the supervisor's **session**: processes that did not call ``setsid`` (the batch shell,
  its children, a plain double fork) keep its id, and Linux does not reuse a pid while
  it names a session with members — so the dead supervisor's pid still names exactly
  them, unless a live process has that pid now (the session is empty then);
- ``HAL_JOB_MARKER`` in the **environment** (``environment.job_marker``): a process that
  left the session but kept the environment it was started with.

A process that left the session and cleared its environment escapes where there is no
cgroup: finding it for sure is what cgroups are for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from hal.agent.environment import MARKER, job_marker
from hal.agent.isolation import Isolation
from hal.agent.procfs import processes_of
from hal.host.process import start_ticks

KILL_ROUNDS = 50  # x 20 ms: a process stuck in the kernel (D state) is left behind


def end_remains(
    isolation: Isolation,
    agent: str,
    job: tuple[int, int],
    supervisor: tuple[int, int],
) -> int:
    """SIGKILL what is left of ``job`` (id, attempt), whose supervisor (pid, start ticks)
    has died without recording its end, and remove its cgroup; returns how many processes
    were found outside the cgroup. Blocks for at most ~1 s (``KILL_ROUNDS``)."""
    job_id, attempt = job
    isolation.remove_job(job_id, attempt)
    pid, ticks = supervisor
    # a zombie supervisor (not reaped yet) still has its start time: its session is ours
    session = pid if start_ticks(pid) in (None, ticks) else 0
    variable = f"{MARKER}={job_marker(agent, job_id, attempt)}"
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        pids = processes_of(session, variable)
        if not pids:
            break
        for found in pids:
            with contextlib.suppress(OSError):  # ended meanwhile, or not ours to signal
                os.kill(found, signal.SIGKILL)
        killed.update(pids)
        time.sleep(0.02)
    return len(killed)
