"""Which of the host's CPUs each job on this node runs on (Slurm's ``task/affinity``).

Without it a job given two CPUs of a 64-CPU node sees all 64: ``nproc``, Python's
``os.sched_getaffinity``, OpenMP runtimes, Go and Rust size their thread pools by the
CPUs a process may run on, and start 64 threads that fight the node's other jobs for
CPUs. The agent gives each job, on each of its nodes, as many of the host's CPUs as it
was allocated there, the lowest ones no other running job of this agent holds, and its
batch script and step tasks start bound to them (``sched_setaffinity``, inherited by
every process they start): the same CPUs for the batch script and the job's steps on
that node.

Binding is on where the agent serves the host's own CPUs (``hal agent --bind-cpus
auto``, its default: no ``--cpus`` given; those it may run on, so ``hal up``'s agents,
each started on its own share of the host's by ``--cpu-list``, bind their jobs within
it), never where several agents share a host as virtual nodes (test clusters, ``hal up
--cpus-per-agent``): node CPU ``i`` would be host CPU ``i`` for all of them. A job that
finds too few CPUs free (its CPUs held by a job suspended for it) runs unbound rather
than not at all. A job may widen its own affinity again: binding is
advice the kernel keeps, not a cgroup ``cpuset`` fence.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from hal.core.errors import InvalidRequest

CHOICES = ("auto", "yes", "no")
Key = tuple[int, int]  # (job id, attempt)


class CpuPool:
    """The host CPUs this agent's jobs may be bound to, and who holds which."""

    def __init__(self, cpus: Sequence[int] = ()) -> None:
        self.cpus = tuple(cpus)  # () : binding off
        self._held: dict[Key, tuple[int, ...]] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.cpus)

    def take(self, key: Key, count: int) -> tuple[int, ...]:
        """The CPUs of job ``key`` on this node: those it holds already (its batch
        script's, for its steps), else the ``count`` lowest free ones; () (unbound) when
        binding is off or too few are free."""
        if not self.cpus:
            return ()
        held = self._held.get(key)
        if held is not None:
            return held
        used = {c for ids in self._held.values() for c in ids}
        free = [c for c in self.cpus if c not in used]
        if count <= 0 or len(free) < count:
            return ()
        self._held[key] = picked = tuple(free[:count])
        return picked

    def holds(self, key: Key) -> bool:
        return key in self._held

    def note(self, key: Key, cpus: Sequence[int]) -> None:
        """An adopted job's CPUs (from its plan, after an agent restart)."""
        if cpus and self.cpus:
            self._held[key] = tuple(cpus)

    def give(self, key: Key) -> None:
        self._held.pop(key, None)


def cpu_pool(choice: str, node_cpus: int | None) -> CpuPool:
    """The pool for ``hal agent --bind-cpus CHOICE`` with ``--cpus node_cpus`` (None: the
    host's own). ``yes`` where the node has more CPUs than the host lets the agent use is
    refused: there are not that many to bind to."""
    if choice not in CHOICES:
        raise InvalidRequest(f"--bind-cpus must be one of {', '.join(CHOICES)}, got {choice!r}")
    try:
        host = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        host = []
    if choice == "no" or (choice == "auto" and node_cpus is not None) or not host:
        return CpuPool()
    count = len(host) if node_cpus is None else node_cpus
    if count > len(host):
        raise InvalidRequest(
            f"--bind-cpus yes: the node has {count} CPUs (--cpus) but this agent may run on "
            f"{len(host)} of the host's; lower --cpus or use --bind-cpus no"
        )
    return CpuPool(host[:count])


def fence_choice(choice: str, pool: CpuPool) -> str:
    """What ``--constrain-cores CHOICE`` asks of the isolation backend for an agent
    binding jobs to ``pool``'s CPUs: only bound jobs are fenced, so "no" where none is,
    and ``yes`` there is refused (nothing would be fenced)."""
    if choice not in CHOICES:
        raise InvalidRequest(
            f"--constrain-cores must be one of {', '.join(CHOICES)}, got {choice!r}"
        )
    if pool.enabled:
        return choice
    if choice == "yes":
        raise InvalidRequest(
            "--constrain-cores yes fences jobs to the CPUs they are bound to, and this agent "
            "binds none (--bind-cpus no, or auto with --cpus); use --bind-cpus yes, or "
            "--constrain-cores auto"
        )
    return "no"


def bind(cpus: Sequence[int]) -> None:
    """Bind the calling process (a job's first process, before exec) to ``cpus``; a
    failure leaves it unbound rather than failing the job."""
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)
