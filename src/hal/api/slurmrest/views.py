"""HAL's views (``hal.wire``'s ``JobInfo``, ``NodeInfo``, ``PartitionInfo``) in Slurm's
v0.0.45 shapes: ``job_info`` (``hal.wire.slurm_json``'s, shared with ``squeue --json``),
``node``, ``partition_info``. Times are UNIX seconds in no_val structs, time limits
minutes, memory MiB, as slurmrestd sends them.

Fields HAL has no value for are left out rather than made up (a client reading an absent
field gets its default); ``docs/reference/slurmrest.md`` lists what is filled.
"""

from __future__ import annotations

from hal import __version__
from hal.slurm.syntax import compress_hostlist
from hal.wire.nodes import NodeInfo, PartitionInfo
from hal.wire.slurm_json import MIB, job_info, minutes, no_val

__all__ = ["job_info", "node", "partition"]

# sinfo's state → Slurm's node state array (base state, then flags)
NODE_STATES = {
    "idle": ["IDLE"],
    "alloc": ["ALLOCATED"],
    "mix": ["MIXED"],
    "down": ["DOWN"],
    "drain": ["IDLE", "DRAIN"],
}


def node_state(info: NodeInfo) -> list[str]:
    """The base state, then the flags in scontrol's order: ``["IDLE", "DRAIN"]``,
    ``["IDLE", "CLOUD", "POWERED_DOWN"]`` (a ``[cloud]`` group's node not created yet),
    ``["MIXED", "CLOUD", "DRAIN"]``."""
    if info.display_state == "drng":
        busy = "ALLOCATED" if info.cpus_alloc >= info.cpus else "MIXED"
        state = [busy, "DRAIN"]
    else:
        state = list(NODE_STATES.get(info.display_state, ["UNKNOWN"]))
    return state[:1] + sorted(set(state[1:]) | set(info.state_flags))


def node(info: NodeInfo, cluster: str) -> dict[str, object]:
    state = node_state(info)
    gres = ""
    if info.gpus:
        gres = f"gpu:{info.gpu_model}:{info.gpus}" if info.gpu_model else f"gpu:{info.gpus}"
    mem = info.memory_bytes // MIB
    tres = f"cpu={info.cpus},mem={mem}M" + (f",gres/gpu={info.gpus}" if info.gpus else "")
    used = f"cpu={info.cpus_alloc},mem={info.memory_alloc_bytes // MIB}M" + (
        f",gres/gpu={info.gpus_alloc}" if info.gpus_alloc else ""
    )
    return {
        "name": info.name,
        "hostname": info.name,
        "address": info.address or info.name,
        "cluster_name": cluster,
        "state": state,
        "reason": info.reason or "",
        "reason_set_by_user": info.reason_user,
        "reason_changed_at": no_val(info.reason_time),
        "cpus": info.cpus,
        "effective_cpus": info.cpus,
        "alloc_cpus": info.cpus_alloc,
        "alloc_idle_cpus": max(0, info.cpus - info.cpus_alloc),
        "real_memory": mem,
        "alloc_memory": info.memory_alloc_bytes // MIB,
        "free_mem": no_val(
            None if info.free_memory_bytes is None else info.free_memory_bytes // MIB
        ),
        # Slurm's load is the 1-minute load average times 100
        "cpu_load": 0 if info.cpu_load is None else round(info.cpu_load * 100),
        "features": list(info.features),
        "active_features": list(info.features),
        "partitions": list(info.partitions),
        "gres": gres,
        "gres_used": f"gpu:{info.gpus_alloc}" if info.gpus else "",
        "tres": tres,
        "tres_used": used,
        "version": f"HAL {__version__}",
    }


def partition(info: PartitionInfo, cpus: int, cluster: str) -> dict[str, object]:
    return {
        "name": info.name,
        "cluster": cluster,
        "nodes": {
            "configured": compress_hostlist(info.nodes) if info.nodes else "",
            "total": len(info.nodes),
            "allowed_allocation": "",
        },
        "cpus": {"total": cpus, "task_binding": 0},
        "partition": {"state": [info.state]},  # UP, DOWN, DRAIN, INACTIVE
        "priority": {"tier": info.priority_tier, "job_factor": 1},
        "maximums": {
            "time": minutes(info.max_time_seconds),
            "nodes": no_val(None, infinite=True) if not info.max_nodes else no_val(info.max_nodes),
        },
        "defaults": {
            "time": minutes(info.default_time_seconds)
            if info.default_time_seconds
            else no_val(None),
            "job": "",
        },
    }
