"""``squeue --json``: the shape of slurmrestd's data_parser v0.0.45 ``jobs`` response.

Only the fields HAL knows are present. Numbers use Slurm's no_val struct
(``{"set", "infinite", "number"}``), ``job_state`` is a list, ``time_limit`` is in minutes.
"""

from __future__ import annotations

import math

from hal.compat.formats import SLURM_COMPAT_VERSION
from hal.compat.job_fields import reason_name
from hal.core.slurm_syntax import compress_hostlist
from hal.core.states import JobState
from hal.wire.jobs import JobInfo

Json = dict[str, object]


def no_val(number: float | None, *, infinite: bool = False) -> Json:
    if number is None:
        return {"set": False, "infinite": infinite, "number": 0}
    return {"set": True, "infinite": infinite, "number": int(number)}


def _exit_code(job: JobInfo) -> Json:
    try:
        finished = JobState(job.state).is_terminal
    except ValueError:
        finished = False
    if not finished:
        status = "PENDING"
    elif job.exit_signal:
        status = "SIGNALED"
    elif job.exit_code:
        status = "ERROR"
    else:
        status = "SUCCESS"
    return {
        "status": [status],
        "return_code": no_val(job.exit_code if finished else None),
        "signal": {"id": no_val(job.exit_signal or None), "name": ""},
    }


def job_json(job: JobInfo) -> Json:
    reason = reason_name(job.reason)
    limit_minutes = math.ceil(job.time_limit_seconds / 60) if job.time_limit_seconds else None
    return {
        "account": job.account or "",
        "array_job_id": no_val(job.array_job_id or 0),
        "array_task_id": no_val(job.array_task_id),
        "array_max_tasks": no_val(job.array_max_running),
        "comment": {"job": job.comment},
        "cpus": no_val(job.cpus),
        "current_working_directory": job.workdir,
        "dependency": job.dependency or "",
        "end_time": no_val(job.end_time),
        "exit_code": _exit_code(job),
        "features": "&".join(job.constraint),
        # a het job component (Slurm's job_info: het_job_id 0 and "" for other jobs)
        "het_job_id": no_val(job.het_job_id or 0),
        "het_job_id_set": job.het_job_id_set or "",
        "het_job_offset": no_val(job.het_job_offset),
        "job_id": job.id,
        "job_state": [job.state],
        "name": job.name,
        "node_count": no_val(job.node_count),
        "nodes": compress_hostlist(job.nodes),
        "partition": job.partition,
        "priority": no_val(job.priority),
        "qos": job.qos or "",
        "requeue": job.requeue,
        "restart_cnt": job.restarts,
        "standard_error": job.stderr,
        "standard_output": job.stdout,
        "start_time": no_val(job.start_time if job.start_time is not None else job.expected_start),
        "state_description": "" if reason == job.reason else job.reason,
        "state_reason": reason,
        "submit_time": no_val(job.submit_time),
        "time_limit": no_val(limit_minutes, infinite=limit_minutes is None),
        "time_minimum": no_val(math.ceil((job.time_min_seconds or 0) / 60)),  # 0: none
        "tres_per_node": f"gres/gpu:{job.gpus // max(job.node_count, 1)}" if job.gpus else "",
        "user_name": job.user,
    }


def jobs_json(jobs: list[JobInfo], now: float) -> Json:
    major, minor, micro = SLURM_COMPAT_VERSION.split(".")
    return {
        "jobs": [job_json(job) for job in jobs],
        "last_backfill": no_val(None),
        "last_update": no_val(now),
        "meta": {
            "plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.45"},
            "slurm": {
                "version": {"major": major, "minor": minor, "micro": micro},
                "release": SLURM_COMPAT_VERSION,
                "cluster": "hal",
            },
        },
        "errors": [],
        "warnings": [],
    }
