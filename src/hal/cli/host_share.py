"""This host's CPUs and memory, split between ``hal up``'s local agents.

Each agent used to offer the whole machine: two agents on a 2-CPU, 24 GB host made a
cluster of 4 CPUs and 47 GiB, and a ``-c1`` job saw both CPUs (``nproc`` 2). Now each
agent gets its own CPUs (as even a split as there is) and an equal share of the memory,
so the cluster never promises what the machine does not have. An agent is bound to its
CPUs (``hal agent --cpu-list``): it, its jobs and everything they start run on them only,
and the agent binds each job to the CPUs it was allocated among them (``hal.agent.cpus``).

``--cpus-per-agent N`` keeps the old virtual nodes, for benchmarks and tests that want
more CPUs than the host has: each offers N CPUs, shares all of the host's, binds nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hal.core.errors import InvalidRequest
from hal.core.resources import MiB
from hal.slurm.syntax import compress_indices


@dataclass(frozen=True, slots=True)
class AgentShare:
    """What one local agent offers: ``cpu_ids`` the host CPUs it and its jobs run on (()
    for a virtual node of ``--cpus-per-agent``, which runs anywhere), ``cpus`` the CPUs its
    node offers, ``memory_bytes`` its memory (whole MiB: ``hal agent --memory`` counts so)."""

    name: str
    cpu_ids: tuple[int, ...]
    cpus: int
    memory_bytes: int

    def describe(self) -> str:
        """``node1: 1 CPU (host CPU 0), 11.8 GiB`` for the banner."""
        where = (
            f"host CPU {compress_indices(list(self.cpu_ids))}"
            if self.cpu_ids
            else "shared with the other agents"
        )
        plural = "" if self.cpus == 1 else "s"
        return f"{self.name}: {self.cpus} CPU{plural} ({where}), {size_text(self.memory_bytes)}"

    def agent_args(self) -> list[str]:
        """The ``hal agent`` options that make it offer this share."""
        memory = ["--memory", f"{self.memory_bytes // MiB}M"]
        if self.cpu_ids:
            return ["--cpu-list", compress_indices(list(self.cpu_ids)), *memory]
        return ["--cpus", str(self.cpus), *memory]


def split_host(
    agents: int, cpu_ids: Sequence[int], memory_bytes: int, cpus_per_agent: int | None = None
) -> list[AgentShare]:
    """The shares of ``agents`` local agents on a host whose CPUs this process may use
    are ``cpu_ids``, with ``memory_bytes`` of memory: the first agents get one CPU more
    where they do not divide evenly. More agents than CPUs is refused, saying what to
    write: an agent with no CPU of its own would promise what another already offers."""
    memory = memory_bytes // max(agents, 1) // MiB * MiB
    names = [f"node{i + 1}" for i in range(agents)]
    if cpus_per_agent is not None:
        return [AgentShare(name, (), cpus_per_agent, memory) for name in names]
    ids = sorted(cpu_ids)
    if agents > len(ids):
        raise InvalidRequest(
            f"--agents {agents}: this host has {len(ids)} CPU(s) for HAL and each local agent "
            f"offers CPUs of its own; write --agents {len(ids)} or fewer (or --cpus-per-agent "
            "N for agents that share the host's CPUs, each offering N)",
            field="agents",
        )
    shares = []
    each, extra = divmod(len(ids), max(agents, 1))
    start = 0
    for i, name in enumerate(names):
        count = each + (1 if i < extra else 0)
        own = tuple(ids[start : start + count])
        shares.append(AgentShare(name, own, count, memory))
        start += count
    return shares


def host_cpu_ids() -> list[int]:
    """The CPUs this process may run on (a cpuset or ``taskset`` narrows them)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: no affinity to read or set
        return list(range(os.cpu_count() or 1))


def host_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


_CPU_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``hal agent --cpu-list``: ``0-3,8`` → (0, 1, 2, 3, 8), CPUs this process may run on."""
    ids: set[int] = set()
    for part in text.split(","):
        found = _CPU_RANGE.fullmatch(part.strip())
        first, last = (int(found[1]), int(found[2] or found[1])) if found else (0, -1)
        if last < first:
            raise InvalidRequest(
                f"--cpu-list {text!r}: write CPU numbers and ranges, e.g. 0-3,8", field="cpu_list"
            )
        ids.update(range(first, last + 1))
    allowed = host_cpu_ids()
    outside = sorted(ids - set(allowed))
    if outside:
        raise InvalidRequest(
            f"--cpu-list {text}: CPU {compress_indices(outside)} is not one this process may "
            f"run on ({compress_indices(allowed)}); choose among those",
            field="cpu_list",
        )
    return tuple(sorted(ids))


def bind_to(cpu_ids: Sequence[int]) -> None:
    """Bind this process, and so every process it starts from now on, to ``cpu_ids``."""
    os.sched_setaffinity(0, cpu_ids)


def size_text(size: int) -> str:
    """``11.8 GiB``: a size as people read it (binary units)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, index = float(size), 0
    while value >= 1024 and index < len(units) - 1:
        value, index = value / 1024, index + 1
    return f"{size} B" if index == 0 else f"{value:.1f} {units[index]}"
