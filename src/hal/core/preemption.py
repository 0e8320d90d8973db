"""Preemption settings (Slurm's ``PreemptType``, ``PreemptMode``, ``GraceTime`` and
``PreemptExemptTime``), read from ``[preemption]`` and ``[[qos]]`` of ``hal.toml``.

Who may preempt whom:

* ``qos`` (preempt/qos): a job may preempt a running job whose QoS is in its own QoS's
  ``preempt`` list (HAL refuses a config where a QoS lists one of equal or higher QoS
  priority, so a job is never preempted by one of equal or lower standing);
* ``partition_prio`` (preempt/partition_prio): a job may preempt a running job of a
  partition with a lower ``priority_tier``, on the nodes both partitions share.

How a victim ends is its QoS's ``preempt_mode`` and ``grace_time`` if set, else the
``[preemption]`` defaults.

A victim of mode ``suspend`` is not ended: it is SUSPENDED (SIGSTOP) and gives its CPUs
to the preemptor while keeping its memory and GPUs, as Slurm's ``PreemptMode=SUSPEND``
does; ``holding`` is what such a job still holds, read by every place that accounts node
usage (the server's mirror, the scheduler's node table, the plan applier's re-check).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hal.core.job import Allocation, Job
from hal.core.resources import ResourceVector
from hal.core.states import JobState

# job.extra key the server sets on a preempted job (the preemptor's id): the scheduler
# counts such a job as leaving, the server ends it as PREEMPTED (``hal.state.preempt``)
PREEMPTED_BY = "preempted_by"
# job.extra key on a pending job that had jobs preempted for it (when): the queue tries it
# first, so what its victims free goes to it and not back to them (until it starts)
PREEMPTING = "preempting"
# job.extra key on a preempted job: how it is preempted (a ``PreemptMode`` value)
PREEMPT_MODE = "preempt_mode"
# job.extra key on a victim with a grace time (``hal.state.preempt``): when that time ends
GRACE_END = "preempt_grace_end"
_SUSPENDED, _COMPLETING = JobState.SUSPENDED, JobState.COMPLETING


class PreemptType(StrEnum):
    OFF = "off"
    QOS = "qos"
    PARTITION_PRIO = "partition_prio"


class PreemptMode(StrEnum):
    # The victim goes back to the queue (keeping its submit time, so its age priority).
    REQUEUE = "requeue"
    # The victim ends in state PREEMPTED.
    CANCEL = "cancel"
    # The victim is SUSPENDED (SIGSTOP) and resumed when its CPUs are free again.
    SUSPEND = "suspend"


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """``type``: who may preempt whom; ``mode`` and ``grace_time_s``: the defaults for
    how a victim ends (a QoS may override both); ``exempt_time_s``: a job that has run
    less than this is never preempted (PreemptExemptTime)."""

    type: PreemptType = PreemptType.OFF
    mode: PreemptMode = PreemptMode.REQUEUE
    grace_time_s: float = 0.0
    exempt_time_s: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.type is not PreemptType.OFF


def suspended_by_preemption(job: Job) -> bool:
    """SUSPENDED for a preemptor (not by an administrator's ``scontrol suspend``)."""
    return job.state is JobState.SUSPENDED and job.extra.get(PREEMPT_MODE) == PreemptMode.SUSPEND


def holds_no_cpus(job: Job) -> bool:
    """Suspended by preemption, or being ended (cancelled, requeued) while it was: its
    processes are stopped, and its CPUs may be the preemptor's now. (Asked of every
    running job in every pass: the states compared by identity with module constants,
    not looked up through the enum class and hashed.)"""
    state = job.state
    return (state is _SUSPENDED or state is _COMPLETING) and job.extra.get(
        PREEMPT_MODE
    ) == PreemptMode.SUSPEND


def holding(job: Job) -> tuple[Allocation | None, bool]:
    """What ``job`` holds on its nodes, and whether it holds them exclusively.

    Its allocation, except for a job suspended by preemption (``holds_no_cpus``): that
    one holds its memory and GPUs (a stopped process keeps its memory, as in Slurm) but
    no CPUs, and never exclusively; it still counts as a job on its nodes, so no
    exclusive job starts there while it waits. A job an administrator suspended holds
    everything, as before.
    """
    alloc = job.allocation
    if alloc is None or not holds_no_cpus(job):
        return alloc, job.spec.exclusive
    return without_cpus(alloc), False


def without_cpus(alloc: Allocation) -> Allocation:
    per_node = tuple(ResourceVector(0, r.memory_bytes, r.gpus) for r in alloc.per_node)
    return Allocation(alloc.nodes, per_node, alloc.gpu_ids)
