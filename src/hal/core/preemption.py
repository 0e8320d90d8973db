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
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# job.extra key the server sets on a preempted job (the preemptor's id): the scheduler
# counts such a job as leaving, the server ends it as PREEMPTED (``hal.state.preempt``)
PREEMPTED_BY = "preempted_by"
# job.extra key on a pending job that had jobs preempted for it (when): the queue tries it
# first, so what its victims free goes to it and not back to them (until it starts)
PREEMPTING = "preempting"


class PreemptType(StrEnum):
    OFF = "off"
    QOS = "qos"
    PARTITION_PRIO = "partition_prio"


class PreemptMode(StrEnum):
    # The victim goes back to the queue (keeping its submit time, so its age priority).
    REQUEUE = "requeue"
    # The victim ends in state PREEMPTED.
    CANCEL = "cancel"


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
