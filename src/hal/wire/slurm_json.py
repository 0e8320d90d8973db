"""Slurm's JSON for a job: data_parser v0.0.45's ``job_info`` (the same at v0.0.44), its
``meta``, and the no_val numbers, written once for the two places HAL speaks it: the
slurmrestd facade (``hal.api.slurmrest``) and ``squeue --json`` (``hal.compat``).

Times are UNIX seconds and limits minutes, in no_val structs; fields HAL has no value for
are left out rather than made up (a client reading an absent field gets its default).
What is checked and what is from the spec: docs/reference/slurmrest.md, docs/slurm-checks.md
"slurmrestd".

It imports only ``hal.core`` (no pydantic at run time: ``squeue --json`` loads it).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hal import __version__
from hal.core.states import JobState
from hal.slurm.syntax import compress_hostlist

if TYPE_CHECKING:
    from hal.wire.jobs import JobInfo

Json = dict[str, object]
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ApiVersion:
    """One data_parser version HAL answers in, and the Slurm release whose OpenAPI spec
    HAL follows for it (``meta.slurm``)."""

    data_parser: str  # "v0.0.45"
    slurm: tuple[str, str, str]  # (major, minor, micro)
    release: str  # Slurm's version string, "25.11.4"


# v0.0.45: the spec of Slurm 26.11-rc1 (the reference, slurm-conventions.md §1.6); a
# release candidate's version string is "26.11.0-0rc1" (Slurm's tags, from memory)
V45 = ApiVersion("v0.0.45", ("26", "11", "0"), "26.11.0-0rc1")
# v0.0.44: the spec of Slurm 25.11.4, which the ``slurmrestapi`` client HAL's tests
# drive was generated from (its OpenAPI version "Slurm-25.11.4")
V44 = ApiVersion("v0.0.44", ("25", "11", "4"), "25.11.4")


def no_val(number: float | None, *, infinite: bool = False) -> Json:
    """Slurm's no_val struct: ``None`` is unset, ``infinite`` is unlimited."""
    if infinite:
        return {"set": False, "infinite": True, "number": 0}
    if number is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": int(number)}


def minutes(seconds: int | None) -> Json:
    """A limit in seconds (0: none) → Slurm's minutes, rounded up; infinite when
    unlimited, unset when there is none to tell."""
    if seconds is None:
        return no_val(None)
    if seconds == 0:
        return no_val(None, infinite=True)
    return no_val(-(-seconds // 60))


def meta(
    version: ApiVersion,
    cluster: str,
    *,
    user: str = "",
    source: str = "",
    plugin: tuple[str, str] = ("", ""),
) -> Json:
    """The ``meta`` of every answer: ``plugin`` is (type, name), ``openapi/slurmctld`` for
    slurmrestd's answers, empty for a command's ``--json``."""
    major, minor, micro = version.slurm
    return {
        "plugin": {
            "type": plugin[0],
            "name": plugin[1],
            "data_parser": f"data_parser/{version.data_parser}",
            "accounting_storage": "",
        },
        "client": {"source": source, "user": user, "group": ""},
        "command": [],
        "slurm": {
            "version": {"major": major, "minor": minor, "micro": micro},
            "release": f"{version.release} (HAL {__version__})",
            "cluster": cluster,
        },
    }


def signal_name(number: int) -> str:
    """Slurm's name of a signal, without ``SIG`` (``KILL``); the number when unknown."""
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


def state_reason(reason: str) -> tuple[str, str]:
    """HAL's reason text → (``state_reason``, ``state_description``). A reason with a
    description (``ReqNodeNotAvail, Reserved for maintenance``) is named by its first
    part; the whole text is the description, as slurmctld keeps it in ``state_desc``
    (from memory of Slurm's job_scheduler.c, not checked). A one-word reason has none."""
    name = reason.split(",", 1)[0]
    return name, "" if name == reason else reason


def exit_code(info: JobInfo) -> Json:
    """``{status, return_code, signal}``: PENDING until the job ends, then SUCCESS (exit
    0), ERROR (non-zero) or SIGNALED: a signal ended it, with its number and name
    (``9``, ``KILL``) and as return code the exit half of sacct's ``E:S`` (0 for the
    ``0:9`` of a killed job; reference §1.3)."""
    no_signal: Json = {"id": no_val(None), "name": ""}
    if not _ended(info.state):
        return {"status": ["PENDING"], "return_code": no_val(None), "signal": no_signal}
    if info.exit_signal:
        return {
            "status": ["SIGNALED"],
            "return_code": no_val(info.exit_code),
            "signal": {"id": no_val(info.exit_signal), "name": signal_name(info.exit_signal)},
        }
    status = "SUCCESS" if info.exit_code == 0 else "ERROR"
    return {"status": [status], "return_code": no_val(info.exit_code), "signal": no_signal}


def _ended(state: str) -> bool:
    try:
        return JobState(state).is_terminal
    except ValueError:  # a state this HAL does not know: not ended as far as it can tell
        return False


def job_info(info: JobInfo, cluster: str) -> Json:
    """One job as slurmctld's ``job_info``."""
    per_node = max(1, info.node_count)
    reason, description = state_reason(info.reason)
    return {
        "job_id": info.id,
        "name": info.name,
        "user_name": info.user,
        "account": info.account or "",
        "qos": info.qos or "",
        "partition": info.partition,
        "cluster": cluster,
        "job_state": [info.state],
        "state_reason": reason,
        "state_description": description,
        "hold": info.held,
        "priority": no_val(info.priority),
        "nice": info.nice,
        "batch_flag": not info.interactive,
        "allocating_node": info.submit_host,
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
        "time_limit": minutes(info.time_limit_seconds),
        # slurmctld keeps 0 when there is none, and 0 is a set number
        "time_minimum": no_val(-(-(info.time_min_seconds or 0) // 60)),
        "submit_time": no_val(info.submit_time),
        "eligible_time": no_val(info.eligible_time),
        # a pending job's expected start, as Slurm's start_time
        "start_time": no_val(info.start_time if info.start_time else info.expected_start),
        "end_time": no_val(info.end_time),
        "preempt_time": no_val(info.preempt_time),
        "exit_code": exit_code(info),
        "array_job_id": no_val(info.array_job_id or 0),
        "array_task_id": no_val(info.array_task_id),
        "array_max_tasks": no_val(info.array_max_running),
        # a het job component (Slurm's: het_job_id 0 and "" for other jobs)
        "het_job_id": no_val(info.het_job_id or 0),
        "het_job_offset": no_val(info.het_job_offset),
        "het_job_id_set": info.het_job_id_set or "",
        "flags": [],
    }
