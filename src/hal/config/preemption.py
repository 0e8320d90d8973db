"""``[preemption]`` of ``hal.toml`` (``hal.core.preemption``; docs/admin/preemption.md)::

    [preemption]
    type = "qos"            # PreemptType: "off" (default), "qos" or "partition_prio"
    mode = "requeue"        # PreemptMode: "requeue" (default), "cancel" or "suspend"
    grace_time = 30         # GraceTime: seconds of notice before the kill (default 0)
    exempt_time = "10:00"   # PreemptExemptTime: never preempt a job younger than this

``suspend`` (Slurm's ``PreemptMode=SUSPEND,GANG``) stops a victim instead of ending it
and resumes it when its CPUs are free again; ``grace_time`` does not apply to it.
"""

from __future__ import annotations

from typing import Any

from hal.config.priority import PREEMPT_MODES, duration, fail
from hal.core.errors import did_you_mean
from hal.core.preemption import PreemptionPolicy, PreemptMode, PreemptType

_KEYS = ("type", "mode", "grace_time", "exempt_time")


def preemption_from_table(raw: Any, source: str) -> PreemptionPolicy:
    if not isinstance(raw, dict):
        raise fail(source, "preemption", "[preemption] must be a table")
    for key in raw:
        if key not in _KEYS:
            raise fail(
                source,
                f"preemption.{key}",
                f"unknown key{did_you_mean(key, _KEYS)}; known keys are {', '.join(_KEYS)}",
            )
    types = [t.value for t in PreemptType]
    kind = raw.get("type", PreemptType.OFF.value)
    if kind not in types:
        raise fail(source, "preemption.type", f"must be one of {', '.join(types)}")
    mode = raw.get("mode", PreemptMode.REQUEUE.value)
    if mode not in PREEMPT_MODES:
        raise fail(source, "preemption.mode", f"must be one of {', '.join(PREEMPT_MODES)}")
    return PreemptionPolicy(
        type=PreemptType(kind),
        mode=PreemptMode(mode),
        grace_time_s=duration(raw.get("grace_time", 0), source, "preemption.grace_time"),
        exempt_time_s=duration(raw.get("exempt_time", 0), source, "preemption.exempt_time"),
    )
