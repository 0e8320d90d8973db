"""The ``JobInfo`` fields ``sacct`` reads, so that it asks the server for those alone
(``GET /v1/jobs?history=true&fields=``, ADR 0027): what every request reads (its
filters, each job's runs and steps, the views of a step's or an earlier run's line),
and each column's. A column added to ``sacct.FIELDS`` needs its entry here
(test_sacct_fields_asked.py prints every column from just these)."""

from __future__ import annotations

# what sacct reads of every job whatever it shows: its ids (sorting, -j, arrays and het
# jobs), its times and state (the window, -s), its runs and steps (a line each), and
# what the filters -u, -A, -q, -N, -g, -i, -I, -k, --name and -p select by
BASE_FIELDS = (
    "id", "display_id", "array_job_id", "het_job_id", "het_job_offset", "interactive",
    "state", "submit_time", "eligible_time", "start_time", "end_time",
    "suspended_seconds", "restarts", "runs", "steps", "user", "account", "qos", "name",
    "partition", "nodes", "node_count", "cpus", "time_limit_seconds",
)  # fmt: skip

_TIME = ("start_time", "end_time", "suspended_seconds")
_MEASURED = ("steps", "max_rss_bytes", "end_time")
_CPUS = ("start_time", "steps", "cpus", "node_count")
_TRES = ("node_count", "cpus", "memory_bytes", "gpus", "steps", "start_time")
_TASK_CPU = (*_MEASURED, "cpu_seconds", "ntasks")

# sacct.FIELDS' name → the fields its column reads (besides BASE_FIELDS')
COLUMN_FIELDS: dict[str, tuple[str, ...]] = {
    "jobid": ("display_id",),
    "jobidraw": ("id",),
    "jobname": ("name",),
    "partition": ("partition",),
    "account": ("account",),
    "alloccpus": _CPUS,
    "reqcpus": ("cpus",),
    "state": ("state", "cancelled_by", "exit_signal"),
    "exitcode": ("state", "exit_code", "exit_signal"),
    "derivedexitcode": ("steps",),
    "elapsed": _TIME,
    "elapsedraw": _TIME,
    "start": ("start_time", "end_time"),
    "end": ("end_time",),
    "submit": ("submit_time",),
    "eligible": ("eligible_time",),
    "reqmem": ("memory_bytes", "node_count"),
    "maxrss": _MEASURED,
    "averss": _MEASURED,
    "maxrssnode": (*_MEASURED, "nodes"),
    "maxrsstask": _MEASURED,
    "totalcpu": ("cpu_seconds", "steps"),
    "usercpu": ("cpu_seconds", "user_cpu_seconds", "system_cpu_seconds", "steps"),
    "systemcpu": ("cpu_seconds", "user_cpu_seconds", "system_cpu_seconds", "steps"),
    "tresusageinmax": (*_MEASURED, "cpu_seconds", "gpu_usage"),
    "tresusageinave": (*_MEASURED, "cpu_seconds", "gpu_usage"),
    "cputime": (*_CPUS, *_TIME),
    "cputimeraw": (*_CPUS, *_TIME),
    "reqtres": _TRES,
    "alloctres": _TRES,
    "ncpus": _CPUS,
    "reqnodes": ("node_count",),
    "allocnodes": ("start_time", "node_count"),
    "nodelist": ("nodes",),
    "nnodes": ("node_count",),
    "ntasks": ("ntasks",),
    "user": ("user",),
    "timelimit": ("time_limit_seconds",),
    "reason": ("reason",),
    "priority": ("priority",),
    "qos": ("qos",),
    "comment": ("comment",),
    "workdir": ("workdir",),
    "uid": ("user",),
    "gid": ("user",),
    "group": ("user",),
    "cluster": (),
    "timelimitraw": ("time_limit_seconds",),
    "suspended": ("suspended_seconds",),
    "constraints": ("constraint",),
    "reservation": ("reservation",),
    "feedback": ("id",),
    "wckey": ("wckey",),
    "avecpu": _TASK_CPU,
    "mincpu": _TASK_CPU,
    "mincpunode": (*_TASK_CPU, "nodes"),
    "mincputask": _TASK_CPU,
    "reserved": ("eligible_time", "start_time", "end_time"),
    "resvcpu": ("eligible_time", "start_time", "end_time", "cpus"),
    "resvcpuraw": ("eligible_time", "start_time", "end_time", "cpus"),
    "cost": ("cost",),
    "interrupted": ("interrupted_at",),
    "lostwork": ("lost_work_seconds",),
}


def asked_fields(titles: list[str]) -> list[str]:
    """The fields to ask for of each job for columns titled ``titles`` (sacct's, any
    case: ``JobID``)."""
    fields = set(BASE_FIELDS)
    for title in titles:
        fields.update(COLUMN_FIELDS[title.lower()])
    return sorted(fields)
