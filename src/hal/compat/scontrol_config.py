"""``scontrol show config``: ``Key = value`` lines in Slurm 22.05.8's order, under its
``Configuration data as of ...`` header (checked against the peer,
docs/slurm-checks.md).

A key is printed only where HAL honours what its value says; the rest of Slurm's ~200
are left out rather than filled in:

- ``SlurmctldTimeout`` (HAL has no backup controller) and ``SchedulerTimeSlice`` (no
  gang scheduling); HAL's node timeout is ``SlurmdTimeout``.
- ``DefMemPerNode``: a job without ``--mem`` holds no memory in HAL, which no Slurm
  value says (``UNLIMITED`` would mean the whole node).
- ``MaxJobCount``: HAL keeps no such limit.
- ``TaskPlugin``, ``ProctrackType``, ``JobAcctGatherType``: each agent's own (its
  ``--bind-cpus`` and cgroups), not the server's to say.

``SelectType = select/cons_tres`` and ``SelectTypeParameters = CR_CPU_MEMORY``: HAL gives
a job CPUs (not cores), the memory it asks for and GPUs, several jobs to a node, as
cons_tres with CR_CPU_Memory does (``hal.scheduler.framework.runtime``).
``AccountingStorageType = accounting_storage/hal``: HAL keeps accounting in its own
database (``sacct`` and ``sacctmgr`` read it), with no slurmdbd. ``HAL_VERSION`` and
slurmdbd.conf's ``PurgeEventAfter``/``PurgeJobAfter`` are HAL's additions, at the places
their names sort to.
"""

from __future__ import annotations

import time

from hal.compat.formats import duration_long, timestamp
from hal.compat.version import SLURM_COMPAT_VERSION
from hal.wire.nodes import ClusterConfig
from hal.wire.priority import PriorityWeightsInfo

# Slurm 22.05.8's order of the keys HAL prints (mostly alphabetical, not quite:
# PreemptExemptTime after PreemptType, PriorityType after PriorityMaxAge, SlurmUser
# before SlurmctldTimeout), HAL's own keys where their names sort
ORDER = (
    "AccountingStorageType",
    "BOOT_TIME",
    "ClusterName",
    "HAL_VERSION",
    "KillWait",
    "Licenses",
    "MailDomain",
    "MailProg",
    "MaxArraySize",
    "MinJobAge",
    "PreemptMode",
    "PreemptType",
    "PreemptExemptTime",
    "PriorityDecayHalfLife",
    "PriorityCalcPeriod",
    "PriorityFavorSmall",
    "PriorityMaxAge",
    "PriorityType",
    "PriorityWeightAge",
    "PriorityWeightAssoc",
    "PriorityWeightFairShare",
    "PriorityWeightJobSize",
    "PriorityWeightPartition",
    "PriorityWeightQOS",
    "PriorityWeightTRES",
    "PurgeEventAfter",
    "PurgeJobAfter",
    "ReturnToService",
    "SchedulerParameters",
    "SchedulerType",
    "SelectType",
    "SelectTypeParameters",
    "SlurmUser",
    "SlurmdTimeout",
    "SLURM_VERSION",
    "StateSaveLocation",
)
_PREEMPT_TYPES = {
    "off": "preempt/none",
    "qos": "preempt/qos",
    "partition_prio": "preempt/partition_prio",
}


def _priority(p: PriorityWeightsInfo | None) -> dict[str, str]:
    """priority/multifactor's keys; priority/basic (no ``[priority]``) has only its type,
    as Slurm prints no multifactor keys for it."""
    if p is None:
        return {"PriorityType": "priority/basic"}
    return {
        "PriorityType": "priority/multifactor",
        "PriorityDecayHalfLife": duration_long(int(p.decay_half_life_seconds)),
        "PriorityCalcPeriod": duration_long(int(p.calc_period_seconds)),
        "PriorityFavorSmall": "Yes" if p.favor_small else "No",
        "PriorityMaxAge": duration_long(int(p.max_age_seconds)),
        "PriorityWeightAge": str(p.age),
        "PriorityWeightAssoc": "0",  # HAL has no association factor
        "PriorityWeightFairShare": str(p.fairshare),
        "PriorityWeightJobSize": str(p.job_size),
        "PriorityWeightPartition": str(p.partition),
        "PriorityWeightQOS": str(p.qos),
        "PriorityWeightTRES": "(null)",  # nor TRES weights: Slurm's value when unset
    }


def config_pairs(config: ClusterConfig) -> dict[str, str]:
    """Slurm key → value, unordered."""
    pairs = {
        "AccountingStorageType": "accounting_storage/hal",
        "ClusterName": config.cluster_name,
        "KillWait": f"{config.kill_wait_seconds} sec",
        "MinJobAge": f"{config.min_job_age_seconds} sec",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_CPU_MEMORY",
        "SLURM_VERSION": SLURM_COMPAT_VERSION,
        "HAL_VERSION": config.version,
        "Licenses": ",".join(f"{k}:{n}" for k, n in sorted(config.licenses.items())) or "(null)",
        "PreemptType": _PREEMPT_TYPES.get(config.preempt_type, config.preempt_type),
        "PreemptMode": "OFF" if config.preempt_type == "off" else config.preempt_mode.upper(),
        "PreemptExemptTime": duration_long(int(config.preempt_exempt_seconds)),
        **_priority(config.priority),
        **config.settings,
    }
    if config.enable_user_top and "SchedulerParameters" not in pairs:  # (an older server)
        pairs["SchedulerParameters"] = "enable_user_top"
    if config.backfill is not None:
        pairs["SchedulerType"] = "sched/backfill" if config.backfill else "sched/builtin"
    if config.node_timeout_seconds is not None:
        pairs["SlurmdTimeout"] = f"{int(config.node_timeout_seconds)} sec"
    if config.return_to_service is not None:
        pairs["ReturnToService"] = str(config.return_to_service)
    if config.state_save_location:
        pairs["StateSaveLocation"] = config.state_save_location
    if config.boot_time is not None:
        pairs["BOOT_TIME"] = timestamp(config.boot_time)
    return pairs


def _rank(key: str) -> tuple[int, str]:
    """Slurm's place for ``key``; a key the list lacks (a newer server's) goes last."""
    return (ORDER.index(key), "") if key in ORDER else (len(ORDER), key.lower())


def config_lines(config: ClusterConfig, now: float) -> list[str]:
    """``scontrol show config``: ``Key = value`` with keys padded to 23 characters."""
    pairs = config_pairs(config)
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
    body = [f"{k:<23} = {pairs[k]}" for k in sorted(pairs, key=_rank)]
    return [f"Configuration data as of {when}", *body]
