"""squeue's field letters (``-o %i``) and long names (``-O JobArrayID``) over ``JobInfo``,
and what scontrol's records share with squeue's steps (``user_field``, ``print_records``).

Each letter has Slurm's column title and a function of (job, now). Times shown for pending
jobs come from HAL's planner (``expected_start``), which is what Slurm's backfill estimate
would show in ``%S``.

Quantities: ``JobInfo.cpus``, ``memory_bytes`` and ``gpus`` are read as totals over the
job's nodes, so per-node columns (``%m``, ``%b``) divide by ``node_count``.
"""

from __future__ import annotations

import pwd

from hal.compat.formats import (
    UNLIMITED,
    duration_short,
    limit_short,
    memory_mib,
    timestamp,
)
from hal.compat.seam import Console
from hal.slurm.syntax import compress_hostlist

TYPE_CHECKING = False  # (squeue's start-up: no pydantic, see ``hal.compat``)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hal.wire.jobs import JobInfo

# States whose NODELIST(REASON) column shows "(reason)" rather than nodes (squeue print.c).
_REASON_STATES = frozenset({"PENDING", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"})


def time_used(job: JobInfo, now: float) -> float:
    """Run time so far, without the time spent suspended (Slurm's TIME and Elapsed)."""
    if job.start_time is None:
        return 0.0
    end = job.end_time if job.end_time is not None else now
    return max(0.0, end - job.start_time - job.suspended_seconds)


def total_cpu_seconds(job: JobInfo) -> float:
    """The job's CPU time over all its steps, the batch script's and every srun's: sacct's
    TotalCPU on the job line and seff's "CPU Utilized", as Slurm 22.05.8's (checked:
    docs/slurm-checks.md, "sacct: states and ExitCode")."""
    return job.cpu_seconds + sum(step.total_cpu_seconds for step in job.steps)


def cpu_parts(
    cpu_seconds: float, user: float | None, system: float | None
) -> tuple[float, float] | None:
    """The (user, system) parts of a batch step's or step's CPU seconds: as measured,
    (0, 0) for none used, None where they are not known (an older agent or srun
    measured only their sum; parts that are not this sum's, as a copy of the job for an
    earlier run of it holds, its latest run's)."""
    import math  # (an extension module: not squeue's start-up, which never asks)

    if (
        user is not None
        and system is not None
        and math.isclose(user + system, cpu_seconds, rel_tol=1e-9, abs_tol=1e-6)
    ):
        return user, system
    return (0.0, 0.0) if cpu_seconds == 0 else None


def total_cpu_parts(job: JobInfo) -> tuple[float, float] | None:
    """The job line's UserCPU and SystemCPU: the sums over its steps, the batch
    script's and every srun's, as ``total_cpu_seconds`` sums TotalCPU; None where a
    step's parts are not known (a sum without them would not be the job's)."""
    parts = [cpu_parts(job.cpu_seconds, job.user_cpu_seconds, job.system_cpu_seconds)]
    parts += [
        cpu_parts(s.total_cpu_seconds, s.user_cpu_seconds, s.system_cpu_seconds) for s in job.steps
    ]
    known = [p for p in parts if p is not None]
    if len(known) < len(parts):
        return None
    return sum(p[0] for p in known), sum(p[1] for p in known)


def batch_command(job: JobInfo) -> str:
    """Slurm's job command (``scontrol show job``'s ``Command=``, squeue's ``%o``): the batch
    script's full path and its arguments, spaces between (unquoted, as Slurm joins them);
    ``(null)`` for a script from stdin or ``--wrap``."""
    if not job.script_path:
        return "(null)"
    return " ".join([job.script_path, *job.script_args])


def _per_node(total: int, job: JobInfo) -> int:
    return total // max(job.node_count, 1)


def _min_memory(job: JobInfo) -> str:
    """squeue's MIN_MEMORY: the memory per node, ``0`` for ``--mem=0`` (all of it), as
    Slurm 22.05.8 shows what was asked (its TRES the node's memory)."""
    return "0" if job.memory_whole_node else memory_mib(_per_node(job.memory_bytes, job))


def over_subscribe(job: JobInfo) -> str:
    """Slurm's OverSubscribe of a job: ``NO`` (--exclusive), ``USER`` (--exclusive=user),
    ``OK`` (shared), as ``scontrol show job`` and squeue's ``%h`` print it."""
    return "NO" if job.exclusive else "USER" if job.exclusive_user else "OK"


def _null(value: str | None) -> str:
    return value if value else "(null)"


def _dependency(job: JobInfo) -> str:
    """Slurm's ``%E``: what is left of a pending job's dependency, each condition with its
    status (``afterok:5(unfulfilled),afterok:6(failed)``, the server's); ``(null)`` once
    it holds."""
    return job.dependency_state or "(null)"


def reason_name(reason: str) -> str:
    """Slurm's reason of a HAL reason text. A reason with a description ("ReqNodeNotAvail,
    Reserved for maintenance": Slurm's state_reason and its state_desc) is named by its
    first part: the reason columns show one word, which tools split lines on (PSI/J asserts
    exactly three columns); only %R shows the description."""
    return reason.split(",", 1)[0]


def _reason_list(job: JobInfo, now: float) -> str:
    if job.state == "CANCELLED" and not job.nodes:
        return ""  # cancelled while pending: nothing, as Slurm 22.05.8's squeue -t all
    if job.state in _REASON_STATES or not job.nodes:
        return f"({job.reason})"
    return compress_hostlist(job.nodes)


def _start(job: JobInfo, now: float) -> str:
    if job.start_time is not None:
        return timestamp(job.start_time)
    return timestamp(job.expected_start)


def planned_end(job: JobInfo, start: float | None) -> float | None:
    """When the job ended, else when it must end if it starts (started) at ``start``: then
    plus its time limit, as Slurm's EndTime; None without a start or a limit."""
    if job.end_time is not None:
        return job.end_time
    if start is not None and job.time_limit_seconds > 0:
        return start + job.time_limit_seconds
    return None


def _end(job: JobInfo, now: float) -> str:
    if job.end_time is None and job.start_time is not None and job.time_limit_seconds <= 0:
        return "NONE"  # running without a limit: Slurm 22.05.8's squeue %e
    return timestamp(planned_end(job, job.start_time))


def _time_left(job: JobInfo, now: float) -> str:
    if job.time_limit_seconds <= 0:
        return UNLIMITED
    return duration_short(max(0.0, job.time_limit_seconds - time_used(job, now)))


def _gres(job: JobInfo, now: float) -> str:
    if not job.gpus:
        return "N/A"
    return f"gres/gpu:{_per_node(job.gpus, job)}"


def _array_task(job: JobInfo, now: float) -> str:
    if "_[" in job.display_id:  # a folded pending array: the index ranges
        return job.display_id.split("_[", 1)[1].rstrip("]")
    return "N/A" if job.array_task_id is None else str(job.array_task_id)


def _het(value: int | str | None) -> str:
    return "N/A" if value is None else str(value)


if TYPE_CHECKING:
    JobColumn = Callable[[JobInfo, float], str]


class _Timestamp:
    """A column that shows the job's ``field`` as a timestamp (``TIME_LETTERS``)."""

    __slots__ = ("field",)

    def __init__(self, field: str) -> None:
        self.field = field

    def __call__(self, job: JobInfo, now: float) -> str:
        value: float | None = getattr(job, self.field)
        return timestamp(value)


NO_VAL = "4294967294"  # Slurm's: an id it does not know


_UNIX_SEEN: dict[str, tuple[str, str, str]] = {}  # (squeue's start-up: no functools)


def _unix(user: str) -> tuple[str, str, str]:
    """The user's uid, gid and group name on this host (Slurm's NO_VAL where it has
    none); each user looked up once, until 256 have been."""
    found = _UNIX_SEEN.get(user)
    if found is None:
        if len(_UNIX_SEEN) >= 256:
            _UNIX_SEEN.clear()
        found = _UNIX_SEEN[user] = _unix_lookup(user)
    return found


def _unix_lookup(user: str) -> tuple[str, str, str]:
    import grp  # (an extension module: only %U, %G and %g read groups)

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return NO_VAL, NO_VAL, NO_VAL
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = str(entry.pw_gid)
    return str(entry.pw_uid), str(entry.pw_gid), group


JOB_LETTERS: dict[str, tuple[str, JobColumn]] = {
    "i": ("JOBID", lambda j, n: j.display_id),
    "A": ("JOBID", lambda j, n: str(j.id)),
    "F": ("ARRAY_JOB_ID", lambda j, n: str(j.array_job_id or j.id)),
    "K": ("ARRAY_TASK_ID", _array_task),
    "j": ("NAME", lambda j, n: j.name),
    "u": ("USER", lambda j, n: j.user),
    "P": ("PARTITION", lambda j, n: j.partition),
    "a": ("ACCOUNT", lambda j, n: _null(j.account)),
    "q": ("QOS", lambda j, n: _null(j.qos)),
    "t": ("ST", lambda j, n: j.state_code),
    "T": ("STATE", lambda j, n: j.state),
    "M": ("TIME", lambda j, n: duration_short(time_used(j, n))),
    "l": ("TIME_LIMIT", lambda j, n: limit_short(j.time_limit_seconds)),
    "L": ("TIME_LEFT", _time_left),
    "D": ("NODES", lambda j, n: str(j.node_count)),
    "C": ("CPUS", lambda j, n: str(j.cpus)),
    "m": ("MIN_MEMORY", lambda j, n: _min_memory(j)),
    "b": ("TRES_PER_NODE", _gres),
    "N": ("NODELIST", lambda j, n: compress_hostlist(j.nodes)),
    "n": ("REQ_NODES", lambda j, n: compress_hostlist(j.req_nodes)),
    "x": ("EXC_NODES", lambda j, n: compress_hostlist(j.exc_nodes)),
    "R": ("NODELIST(REASON)", _reason_list),
    "r": ("REASON", lambda j, n: reason_name(j.reason)),
    "S": ("START_TIME", _start),
    "e": ("END_TIME", _end),
    "V": ("SUBMIT_TIME", _Timestamp("submit_time")),
    "E": ("DEPENDENCY", lambda j, n: _dependency(j)),
    "Q": ("PRIORITY", lambda j, n: str(j.priority)),
    "y": ("NICE", lambda j, n: str(j.nice)),
    "k": ("COMMENT", lambda j, n: _null(j.comment)),
    "Z": ("WORK_DIR", lambda j, n: j.workdir),
    "f": ("FEATURES", lambda j, n: _null("&".join(j.constraint))),
    "Y": ("SCHEDNODES", lambda j, n: "(null)"),  # HAL's planner does not expose nodes yet
    "o": ("COMMAND", lambda j, n: batch_command(j)),
    "B": ("EXEC_HOST", lambda j, n: j.nodes[0] if j.nodes else "n/a"),
    "h": ("OVER_SUBSCRIBE", lambda j, n: over_subscribe(j)),
    "v": ("RESERVATION", lambda j, n: _null(j.reservation)),
    "W": ("LICENSES", lambda j, n: _null(j.licenses)),
    # as Slurm 22.05.8 prints them (docs/slurm-checks.md): %p is %Q / 2^32
    "p": ("PRIORITY", lambda j, n: f"{j.priority / 2**32:.14f}"),
    "c": ("MIN_CPUS", lambda j, n: str(max(j.cpus_per_task, j.min_cpus_per_node))),
    "d": ("MIN_TMP_DISK", lambda j, n: "0"),  # (HAL takes no --tmp)
    "U": ("UID", lambda j, n: _unix(j.user)[0]),
    "G": ("GROUP", lambda j, n: _unix(j.user)[1]),
    "g": ("GROUP", lambda j, n: _unix(j.user)[2]),
    "H": ("SOCKETS_PER_NODE", lambda j, n: "*"),
    "I": ("CORES_PER_SOCKET", lambda j, n: "*"),
    "J": ("THREADS_PER_CORE", lambda j, n: "*"),
    "z": ("S:C:T", lambda j, n: "*:*:*"),
    "O": ("CONTIGUOUS", lambda j, n: "0"),
    "w": ("WCKEY", lambda j, n: _null(j.wckey)),
    "X": ("CORE_SPEC", lambda j, n: "N/A"),
    "s": ("", lambda j, n: ""),  # the select plugin's data: none with cons_tres
    # -O names without a -o letter: keyed by their -O name
    "stdout": ("STDOUT", lambda j, n: j.stdout),
    "stderr": ("STDERR", lambda j, n: j.stderr),
    "stdin": ("STDIN", lambda j, n: "/dev/null"),
    "hetjobid": ("HET_JOB_ID", lambda j, n: _het(j.het_job_id)),
    "hetjoboffset": ("HET_JOB_OFFSET", lambda j, n: _het(j.het_job_offset)),
    "hetjobidset": ("HET_JOB_ID_SET", lambda j, n: _het(j.het_job_id_set)),
    "numtasks": ("TASKS", lambda j, n: str(j.ntasks)),
    "cpus-per-task": ("CPUS_PER_TASK", lambda j, n: str(j.cpus_per_task)),
    "eligibletime": ("ELIGIBLE_TIME", _Timestamp("eligible_time")),
    "restartcnt": ("RESTARTCNT", lambda j, n: str(j.restarts)),
    "requeue": ("REQUEUE", lambda j, n: str(int(j.requeue))),
    "preempttime": ("PREEMPT_TIME", _Timestamp("preempt_time")),
    # --time-min; 0:00 without one, as squeue's _print_job_time_min prints Slurm's 0;
    # -O MinTime, titled TIME_MIN (checked with Slurm 22.05.8: docs/slurm-checks.md)
    "mintime": ("TIME_MIN", lambda j, n: duration_short(j.time_min_seconds or 0)),
}

# The ``JobInfo`` fields each column reads: squeue asks the server for these alone
# (``GET /v1/jobs?fields=``), so a column added above needs its fields here
# (test_squeue_fields.py checks every column against a record of just these)
_TIME = ("start_time", "end_time", "suspended_seconds")
_USER = ("user",)
LETTER_FIELDS: dict[str, tuple[str, ...]] = {
    "i": ("display_id",),
    "A": ("id",),
    "F": ("array_job_id", "id"),
    "K": ("display_id", "array_task_id"),
    "j": ("name",),
    "u": _USER,
    "P": ("partition",),
    "a": ("account",),
    "q": ("qos",),
    "t": ("state_code",),
    "T": ("state",),
    "M": _TIME,
    "l": ("time_limit_seconds",),
    "L": ("time_limit_seconds", *_TIME),
    "D": ("node_count",),
    "C": ("cpus",),
    "m": ("memory_whole_node", "memory_bytes", "node_count"),
    "b": ("gpus", "node_count"),
    "N": ("nodes",),
    "n": ("req_nodes",),
    "x": ("exc_nodes",),
    "R": ("state", "nodes", "reason"),
    "r": ("reason",),
    "S": ("start_time", "expected_start"),
    "e": ("start_time", "end_time", "time_limit_seconds"),
    "V": ("submit_time",),
    "E": ("dependency_state",),
    "Q": ("priority",),
    "y": ("nice",),
    "k": ("comment",),
    "Z": ("workdir",),
    "f": ("constraint",),
    "Y": (),
    "o": ("script_path", "script_args"),
    "B": ("nodes",),
    "h": ("exclusive", "exclusive_user"),
    "v": ("reservation",),
    "W": ("licenses",),
    "p": ("priority",),
    "c": ("cpus_per_task", "min_cpus_per_node"),
    "d": (),
    "U": _USER,
    "G": _USER,
    "g": _USER,
    "H": (),
    "I": (),
    "J": (),
    "z": (),
    "O": (),
    "w": ("wckey",),
    "X": (),
    "s": (),
    "stdout": ("stdout",),
    "stderr": ("stderr",),
    "stdin": (),
    "hetjobid": ("het_job_id",),
    "hetjoboffset": ("het_job_offset",),
    "hetjobidset": ("het_job_id_set",),
    "numtasks": ("ntasks",),
    "cpus-per-task": ("cpus_per_task",),
    "eligibletime": ("eligible_time",),
    "restartcnt": ("restarts",),
    "requeue": ("requeue",),
    "preempttime": ("preempt_time",),
    "mintime": ("time_min_seconds",),
}

# The columns that show one field as it is, a string: laid out without a call a job
# (test_squeue_fields.py checks each against its column)
PLAIN_LETTERS: dict[str, str] = {
    "i": "display_id",
    "j": "name",
    "u": "user",
    "P": "partition",
    "t": "state_code",
    "T": "state",
    "Z": "workdir",
    "stdout": "stdout",
    "stderr": "stderr",
}

# The columns that show one field as a timestamp (the ``_Timestamp`` columns above):
# laid out by ``formats.timestamps``, each whole second formatted once
TIME_LETTERS: dict[str, str] = {
    letter: show.field for letter, (_, show) in JOB_LETTERS.items() if isinstance(show, _Timestamp)
}

# -O/--Format names (case-insensitive) → letter (or the key of a column -o has no letter
# for). Every -O column defaults to 20 characters, left-aligned, as squeue's.
LONG_FIELDS: dict[str, str] = {
    "jobarrayid": "i",
    "jobid": "A",
    "arrayjobid": "F",
    "arraytaskid": "K",
    "name": "j",
    "username": "u",
    "partition": "P",
    "account": "a",
    "qos": "q",
    "statecompact": "t",
    "state": "T",
    "timeused": "M",
    "timelimit": "l",
    "timeleft": "L",
    "numnodes": "D",
    "numcpus": "C",
    "minmemory": "m",
    "tres-per-node": "b",
    "nodelist": "N",
    "reqnodes": "n",  # (22.05.8 has no -O name for %x: it refuses ExcNodes)
    "reasonlist": "R",
    "reason": "r",
    "starttime": "S",
    "endtime": "e",
    "submittime": "V",
    "dependency": "E",
    "prioritylong": "Q",
    "priority": "Q",
    "nice": "y",
    "comment": "k",
    "workdir": "Z",
    "feature": "f",
    "schednodes": "Y",
    "exechost": "B",
    "batchhost": "B",
    "command": "o",
    "oversubscribe": "h",
    "reservation": "v",
    "licenses": "W",
    "mincpus": "c",
    "mintmpdisk": "d",
    "userid": "U",
    "groupid": "G",
    "groupname": "g",
    "sockets": "H",
    "cores": "I",
    "threads": "J",
    "contiguous": "O",
    "wckey": "w",
    "corespec": "X",
    "timemin": "mintime",  # HAL's first name for MinTime (Slurm refuses this one)
    **{name: name for name in JOB_LETTERS if len(name) > 1},
}
LONG_FIELD_WIDTH = 20


def user_field(name: str) -> str:
    """``UserId=`` of scontrol's records: ``alice(1000)``."""
    try:
        entry = pwd.getpwnam(name)
        return f"{name}({entry.pw_uid})"
    except KeyError:
        return f"{name}(4294967294)"  # Slurm's NO_VAL: the name is not a local account


def group_field(user: str) -> str:
    """``GroupId=`` of scontrol's job records: the user's group here, ``root(0)``."""
    _, gid, group = _unix(user)
    return "N/A" if gid == NO_VAL else f"{group}({gid})"


def print_records(records: Sequence[list[str]], console: Console, *, oneliner: bool) -> None:
    """scontrol's ``show`` records: the first line of each flush left, the rest indented
    by three, a blank line after each record, the last too, as Slurm 22.05.8 prints them
    (HAL printed none after the last); ``-o``: each record on one line."""
    for record in records:
        if oneliner:
            console.out(" ".join(record))
            continue
        console.out(record[0])
        for line in record[1:]:
            console.out("   " + line)
        console.out("")
