"""Which process a pid names: its start time, read from ``/proc`` (Linux).

Plain system calls, safe in a freshly forked child (the agent's supervisors); srun
names itself with it too (``hal.compat.steps.srun_identity``).
"""

from __future__ import annotations

import os


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22),
    or ``None`` when there is no such process.

    Together with the pid it names one process for the machine's uptime: a recycled pid
    gets a new start time. Zombies still have their stat file, so a finished but unreaped
    supervisor is still recognised.
    """
    try:  # raw system calls: no buffered file object per launch
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)  # procfs returns the whole (sub-page) line in one read
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall; 20th after "pid (comm)"
    except (IndexError, ValueError):
        return None
