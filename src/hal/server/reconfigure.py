"""What ``scontrol reconfigure`` (and SIGHUP to ``hal server``) may change in a running
server, and what changed.

The server re-reads the file it started with and validates it as start-up does
(``load_config``, then the scheduler profile); only then does it take the new
configuration, through the same ``configure`` methods its parts were built with
(``HalServer.reconfigure``; ADR 0014). A few settings are bound when the server starts:
a change to them is reported by name and the running value kept (``restart_only``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hal.config.model import HalConfig, PartitionConfig
from hal.core.priority import PriorityPolicy
from hal.state.cluster import Cluster

# HalConfig fields bound at start → the hal.toml key an administrator edits:
#  cluster_name        the tracer's and the accounting's cluster, the slurmrest facade's
#  node timeout and heartbeat interval: told to every agent when it registered
#  max_request_bytes   the request-size guard installed in the HTTP stack
#  topology            the nodes' switch paths, worked out when they registered
#  data                the cache control plane's client and its refresh task
#  scheduler_predictor the trained predictor the server keeps (its model file)
#  scheduler_correction  the expiry correction that predictor was built (and calibrated) for
#  scheduler_pass_process  where passes are decided: the pass runner is made at start
#  drain_anomalous_nodes  the anomaly detector, built with the observability plane
RESTART_ONLY: dict[str, str] = {
    "cluster_name": "cluster_name",
    "node_timeout_seconds": "node_timeout_seconds",
    "heartbeat_interval_seconds": "heartbeat_interval_seconds",
    "max_request_bytes": "max_request_bytes",
    "topology": "topology",
    "data": "data",
    "scheduler_predictor": "scheduler.predictor",
    "scheduler_correction": "scheduler.correction",
    "drain_anomalous_nodes": "scheduler.drain_anomalous_nodes",
    "scheduler_pass_process": "scheduler.pass_process",
}
# HalConfig fields a reconfigure takes: read where used (``Cluster.config``, the request
# context), or given to the part that uses them through its ``configure``
LIVE = frozenset(
    {
        "min_job_age_seconds",
        "kill_wait_seconds",
        "max_array_size",
        "max_batch_jobs",
        "max_artifact_bytes",
        "return_to_service",
        "scheduler_interval_seconds",
        "scheduler_max_job_starts",
        "scheduler_default_queue_depth",
        "scheduler_sched_interval_s",
        "scheduler_profile",
        "enable_user_top",
        "partitions",
        "priority",
        "preemption",
        "licenses",
        "accounting",
        "mail",
        "cloud",
        "power",
        "harmonic",
        "artifacts",  # node_cache: told to each agent at its next registration
    }
)
# the other fields' hal.toml names, where they differ
_KEYS = {
    "scheduler_interval_seconds": "scheduler.interval_seconds",
    "scheduler_max_job_starts": "scheduler.max_job_starts",
    "scheduler_default_queue_depth": "scheduler.default_queue_depth",
    "scheduler_sched_interval_s": "scheduler.sched_interval",
    "scheduler_profile": "scheduler",
    "enable_user_top": "scheduler.enable_user_top",
}
_PARTITION_KEYS = {"max_time_s": "max_time", "default_time_s": "default_time"}


def restart_only(
    running: HalConfig,
    new: HalConfig,
    predictor_of: Callable[[HalConfig], str],
) -> tuple[HalConfig, list[str]]:
    """``new`` with the settings bound at start set back to ``running``'s, and the
    hal.toml keys of those that differed. ``predictor_of``: the predictor a config
    trains (``server_profile``'s backfill argument, else ``[scheduler] predictor``)."""
    kept = [
        key for name, key in RESTART_ONLY.items() if getattr(running, name) != getattr(new, name)
    ]
    if "scheduler.predictor" not in kept and predictor_of(running) != predictor_of(new):
        kept.append("scheduler.plugin_args.backfill.predictor")
    same = {name: getattr(running, name) for name in RESTART_ONLY}
    return dataclasses.replace(new, **same), kept


def config_changes(running: HalConfig, new: HalConfig) -> list[str]:
    """The hal.toml keys whose values differ: ``partitions.NAME`` for a partition added
    or removed, ``partitions.NAME.KEY`` for one changed; ``priority``, ``accounts``,
    ``users``, ``qos``, ``licenses.NAME`` ...; the rest by their own names."""
    out: list[str] = []
    for f in dataclasses.fields(HalConfig):
        old, now = getattr(running, f.name), getattr(new, f.name)
        if old == now:
            continue
        if f.name == "partitions":
            out += _partition_changes(old, now)
        elif f.name == "priority":
            out += _priority_changes(old, now)
        elif f.name == "licenses":
            out += [
                f"licenses.{n}" for n in sorted(set(old) | set(now)) if old.get(n) != now.get(n)
            ]
        else:
            out.append(_KEYS.get(f.name, f.name))
    return out


def removed_partitions(running: HalConfig, new: HalConfig) -> list[str]:
    names = {p.name for p in new.partitions}
    return [p.name for p in running.partitions if p.name not in names]


def added_partitions(running: HalConfig, new: HalConfig) -> list[str]:
    names = {p.name for p in running.partitions}
    return [p.name for p in new.partitions if p.name not in names]


def _partition_changes(
    old: tuple[PartitionConfig, ...], new: tuple[PartitionConfig, ...]
) -> list[str]:
    before = {p.name: p for p in old}
    after = {p.name: p for p in new}
    out: list[str] = []
    for name in [*before, *(n for n in after if n not in before)]:
        if name not in before or name not in after:
            out.append(f"partitions.{name}")
            continue
        for f in dataclasses.fields(PartitionConfig):
            if getattr(before[name], f.name) != getattr(after[name], f.name):
                out.append(f"partitions.{name}.{_PARTITION_KEYS.get(f.name, f.name)}")
    return out


def _priority_changes(old: PriorityPolicy, new: PriorityPolicy) -> list[str]:
    """``accounts``, ``users`` and ``qos`` (their own tables), else ``priority``."""
    tables = ("accounts", "users", "qos")
    out = [name for name in tables if getattr(old, name) != getattr(new, name)]
    same = {name: getattr(old, name) for name in tables}
    if dataclasses.replace(new, **same) != old:
        out.insert(0, "priority")
    return out


def empty_partitions(cluster: Cluster) -> list[str]:
    """A warning for each partition that names its nodes and none of which has
    registered (nor is a ``[cloud]`` group's): a typo in ``nodes`` leaves its jobs
    waiting for nodes that never come."""
    from hal.slurm.syntax import compress_hostlist

    known = set(cluster.nodes) | set(cluster.cloud_templates)
    return [
        f"reconfigure: partition {p.name} names {compress_hostlist(list(p.nodes))}, and no "
        "such node has registered: its jobs wait until one does (sinfo -N lists the nodes)"
        for p in cluster.partitions.values()
        if p.nodes and not known & set(p.nodes)
    ]
