"""HAL's views (``hal.wire``'s ``JobInfo``, ``NodeInfo``, ``PartitionInfo``) in Slurm's
v0.0.45 shapes: ``job_info``, ``node``, ``partition_info``. Times are UNIX seconds in
no_val structs, time limits minutes, memory MiB, as slurmrestd sends them.

Fields HAL has no value for are left out rather than made up (a client reading an absent
field gets its default); ``docs/slurmrest.md`` lists what is filled.
"""

from __future__ import annotations

import signal

from hal import __version__
from hal.api.slurmrest.envelope import no_val
from hal.core.slurm_syntax import compress_hostlist
from hal.wire.jobs import JobInfo
from hal.wire.nodes import NodeInfo, PartitionInfo

MIB = 1024 * 1024
UNFINISHED = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
# sinfo's state → Slurm's node state array (base state, then flags)
NODE_STATES = {
    "idle": ["IDLE"],
    "alloc": ["ALLOCATED"],
    "mix": ["MIXED"],
    "down": ["DOWN"],
    "drain": ["IDLE", "DRAIN"],
}


def _minutes(seconds: int | None) -> dict[str, object]:
    """A limit in seconds (0: none) → Slurm's minutes, infinite when unlimited."""
    if seconds is None:
        return no_val(None)
    if seconds == 0:
        return no_val(None, infinite=True)
    return no_val(-(-seconds // 60))


def _time(when: float | None) -> dict[str, object]:
    return no_val(None if when is None else int(when))


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


def exit_code(info: JobInfo) -> dict[str, object]:
    """``{status, return_code, signal}``: PENDING until the job ends, then SUCCESS (exit 0),
    ERROR (non-zero) or SIGNALED (a signal ended it; its return code is 0, sacct's 0:N)."""
    no_signal = {"id": no_val(None), "name": ""}
    if info.state in UNFINISHED:
        return {"status": ["PENDING"], "return_code": no_val(None), "signal": no_signal}
    if info.exit_signal:
        return {
            "status": ["SIGNALED"],
            "return_code": no_val(0),
            "signal": {"id": no_val(info.exit_signal), "name": signal_name(info.exit_signal)},
        }
    status = "SUCCESS" if info.exit_code == 0 else "ERROR"
    return {"status": [status], "return_code": no_val(info.exit_code), "signal": no_signal}


def job_info(info: JobInfo, cluster: str) -> dict[str, object]:
    per_node = max(1, info.node_count)
    out: dict[str, object] = {
        "job_id": info.id,
        "name": info.name,
        "user_name": info.user,
        "account": info.account or "",
        "qos": info.qos or "",
        "partition": info.partition,
        "cluster": cluster,
        "job_state": [info.state],
        "state_reason": info.reason,
        "state_description": "",
        "hold": info.held,
        "priority": no_val(info.priority),
        "nice": info.nice,
        "batch_flag": True,
        "command": info.script_path or "",
        "comment": info.comment,
        "current_working_directory": info.workdir,
        "standard_output": info.stdout,
        "standard_error": info.stderr,
        "standard_input": "/dev/null",
        "stdout_expanded": info.stdout,
        "stderr_expanded": info.stderr,
        "dependency": info.dependency or "",
        "features": "&".join(info.constraint),
        "licenses": info.licenses,
        "resv_name": info.reservation,
        "requeue": info.requeue,
        "restart_cnt": info.restarts,
        "nodes": compress_hostlist(info.nodes) if info.nodes else "",
        "node_count": no_val(info.node_count),
        "cpus": no_val(info.cpus),
        "tasks": no_val(info.ntasks),
        "cpus_per_task": no_val(info.cpus_per_task),
        "memory_per_node": no_val(info.memory_bytes // per_node // MIB),
        "tres_per_node": f"gres/gpu:{info.gpus // per_node}" if info.gpus else "",
        "time_limit": _minutes(info.time_limit_seconds),
        "time_minimum": _minutes(info.time_min_seconds or None),
        "submit_time": _time(info.submit_time),
        "eligible_time": _time(info.eligible_time),
        # a pending job's expected start, as Slurm's start_time
        "start_time": _time(info.start_time if info.start_time else info.expected_start),
        "end_time": _time(info.end_time),
        "preempt_time": _time(info.preempt_time),
        "exit_code": exit_code(info),
        "array_job_id": no_val(info.array_job_id or 0),
        "array_task_id": no_val(info.array_task_id),
        "het_job_id": no_val(info.het_job_id or 0),
        "het_job_offset": no_val(info.het_job_offset),
        "het_job_id_set": info.het_job_id_set or "",
        "flags": [],
    }
    return out


def node(info: NodeInfo, cluster: str) -> dict[str, object]:
    if info.display_state == "drng":
        busy = "ALLOCATED" if info.cpus_alloc >= info.cpus else "MIXED"
        state = [busy, "DRAIN"]
    else:
        state = list(NODE_STATES.get(info.display_state, ["UNKNOWN"]))
    state += [f for f in info.state_flags if f not in state]
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
        "partition": {"state": ["UP"] if info.up else ["DOWN"]},
        "priority": {"tier": info.priority_tier, "job_factor": 1},
        "maximums": {
            "time": _minutes(info.max_time_seconds),
            "nodes": no_val(None, infinite=True) if not info.max_nodes else no_val(info.max_nodes),
        },
        "defaults": {
            "time": _minutes(info.default_time_seconds)
            if info.default_time_seconds
            else no_val(None),
            "job": "",
        },
    }
