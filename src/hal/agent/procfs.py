"""Small readers of ``/proc`` (Linux) used by the shell and the step supervisor.

Everything here is plain system calls, safe to run in a freshly forked child.
"""

from __future__ import annotations

import os
from typing import NamedTuple

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def open_pidfd(pid: int) -> int | None:
    """A pidfd (readable once the process exits), or ``None`` if the process is gone or
    the kernel is older than 5.3."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and all its descendants.

    Walks ``/proc/<pid>/task/<tid>/children`` (``descendants``) instead of scanning all of
    ``/proc``: a job's tree is small, the host's process table may not be, and the rlimit
    watchdog calls this for every job several times a second.
    """
    total = 0
    for pid in (root, *descendants(root)):
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE_SIZE
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return total


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (``/proc/<pid>/task/<tid>/children``), or ``[]``."""
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
    except (OSError, ValueError):
        pass  # the process ended while we looked
    return found


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (not ``root`` itself), parents first."""
    found: list[int] = []
    stack = children(root)
    seen: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found.append(pid)
        stack.extend(children(pid))
    return found


def socket_inodes(pid: int) -> list[int]:
    """The inodes of the sockets ``pid`` holds open (its ``/proc/<pid>/fd`` links
    ``socket:[<inode>]``, as ``ss -p`` finds them), or ``[]`` when it is gone or not
    ours to read: another user's process needs root or CAP_SYS_PTRACE. One directory
    read and one ``readlink`` per descriptor, relative to the open folder."""
    try:
        folder = os.open(f"/proc/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    found: list[int] = []
    try:
        for name in os.listdir(folder):
            try:
                target = os.readlink(name, dir_fd=folder)
            except OSError:
                continue  # closed while we looked
            if target.startswith("socket:["):
                found.append(int(target[8:-1]))
    except (OSError, ValueError):
        pass  # the process ended while we looked
    finally:
        os.close(folder)
    return found


def processes_of(session: int, variable: str) -> list[int]:
    """Every live (not zombie) process in ``session`` (0: match none) or whose environment
    holds ``variable`` (``NAME=value``), found by scanning ``/proc``; not this process.

    A process's environment is readable by its own user and by root only, so an agent
    finds the jobs it can signal anyway. Costs a read or two per process on the host:
    only for a job whose step supervisor died.
    """
    needle = b"\0" + variable.encode() + b"\0"
    me = os.getpid()
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            fields = data[data.rfind(b")") + 2 :].split()
            if fields[0] == b"Z":
                continue
            if session and int(fields[3]) == session:
                found.append(int(name))
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = b"\0" + f.read()
        except (OSError, ValueError, IndexError):
            continue  # ended while we looked, or not ours to read
        if needle in environ:
            found.append(int(name))
    return found


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Usage(NamedTuple):
    """A sample of what processes use: resident bytes, and user and system seconds."""

    rss_bytes: int
    user_seconds: float
    system_seconds: float

    @property
    def cpu_seconds(self) -> float:
        return self.user_seconds + self.system_seconds


def job_usage(supervisor: int, below: list[int] | None = None) -> Usage:
    """What the job under step supervisor ``supervisor`` uses: the memory of its live
    processes, and the user and system time they and the processes that already ended
    used (``/proc/<pid>/stat``: a live process's own time plus its reaped children's;
    the supervisor's reaped children, the job's orphans included, through its
    ``cutime``/``cstime``). Like Slurm's ``jobacct_gather/linux``, memory is the sum of
    the processes' RSS. ``below``: its ``descendants``, where the caller has them
    already."""
    rss_pages = 0
    user = system = 0
    reaped = _stat_fields(supervisor, 13, 15)  # the supervisor: its reaped children only
    if len(reaped) == 2:
        user, system = reaped
    for pid in descendants(supervisor) if below is None else below:
        fields = _stat_fields(pid, 11, 22)  # utime, stime, cutime, cstime ... rss
        if len(fields) == 11:
            user += fields[0] + fields[2]
            system += fields[1] + fields[3]
            rss_pages += fields[10]
    return Usage(rss_pages * PAGE_SIZE, user / CLOCK_TICKS, system / CLOCK_TICKS)


def tree_usage(root: int, below: list[int] | None = None) -> Usage:
    """What ``root`` (a job step's task) and the processes below it (``below``, where
    the caller has them) use, as ``job_usage`` counts it: nothing once it is gone."""
    own = _stat_fields(root, 11, 22)
    if len(own) != 11:
        return Usage(0, 0.0, 0.0)
    rss, user, system = job_usage(root, below)  # its descendants, the children it reaped
    return Usage(
        rss + own[10] * PAGE_SIZE,
        user + own[0] / CLOCK_TICKS,
        system + own[1] / CLOCK_TICKS,
    )


def _stat_fields(pid: int, first: int, stop: int) -> list[int]:
    """Integer fields of ``/proc/<pid>/stat`` after the command name, ``[first:stop]``
    (0 is field 3, the state): ``[]`` when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return [int(v) for v in data[data.rfind(b")") + 2 :].split()[first:stop]]
    except (OSError, ValueError):
        return []


def node_load(proc: str = "/proc") -> tuple[int | None, float | None]:
    """(available memory in bytes, 1-minute load average) of this host, as the agent
    reports them with its heartbeat (Slurm's ``FreeMem`` and ``CPULoad``): ``MemAvailable``
    of ``meminfo`` (what new processes can have without swapping, not the smaller
    ``MemFree``) and the first field of ``loadavg``. ``None`` for what cannot be read."""
    free: int | None = None
    try:
        with open(f"{proc}/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    free = int(line.split()[1]) * 1024  # kB
                    break
    except (OSError, ValueError, IndexError):
        free = None
    load: float | None = None
    try:
        with open(f"{proc}/loadavg", "rb") as f:
            load = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        load = None
    return free, load
