"""A cgroup's memory limit, written where the agent (a job's or step's cgroup) and srun
(the cgroup of a step it runs on the batch node) set one: cgroup v2's ``memory.max``
with no swap, or cgroup v1's ``memory.limit_in_bytes`` and, where swap accounting is on,
``memory.memsw.limit_in_bytes`` (memory and swap together) at the same size; and the
CPU fence both write for a bound job or step (``fence_cpus``, ``hal.agent.cpusets``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence


def limit_memory(path: str, kind: str, memory_bytes: int) -> None:
    """Limit the cgroup ``path`` (of the ``kind`` "cgroup2" or "cgroup1" memory
    hierarchy) to ``memory_bytes``; nothing for 0. Raises ``OSError`` where it may not."""
    if memory_bytes <= 0:
        return
    if kind == "cgroup2":
        write(path, "memory.max", memory_bytes)
        with contextlib.suppress(OSError):
            write(path, "memory.swap.max", 0)
    else:
        write(path, "memory.limit_in_bytes", memory_bytes)
        # memsw bounds memory+swap; it must not be set below limit_in_bytes
        with contextlib.suppress(OSError):
            write(path, "memory.memsw.limit_in_bytes", memory_bytes)


def fence_cpus(path: str, cpus: Sequence[int], *, v1: bool) -> None:
    """Confine the cpuset cgroup ``path`` (made already) to the host ``cpus`` (Slurm's
    ConstrainCores); a cgroup1 cpuset takes its parent's ``cpuset.mems`` first, without
    which it holds no process. Raises ``OSError`` where it may not."""
    if v1:
        with open(os.path.join(os.path.dirname(path), "cpuset.mems")) as f:
            write(path, "cpuset.mems", f.read().strip())
    write(path, "cpuset.cpus", ",".join(str(c) for c in cpus))


def write(directory: str, name: str, value: object) -> None:
    """Write ``value`` to the cgroup file ``name`` in ``directory`` (one ``write``)."""
    fd = os.open(os.path.join(directory, name), os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)
