"""The ``sacct`` command, answered from HAL's own job history (no slurmdbd needed).

Pinned for Snakemake: ``sacct -X --parsable2 --clusters all --noheader
--format=JobIdRaw,State --starttime ... --endtime now --name <uuid>`` prints ``id|STATE``
lines. Fixed-width output cuts long values with ``+`` (``CANCELLED+``) exactly as sacct
does, and every column is followed by one space. Each job that started gets one
``<id>.batch`` step line unless ``-X``, and one ``<id>.N`` line per job step srun ran,
on the batch node itself or across the job's nodes (ADR 0012).
"""

from __future__ import annotations

import functools
import grp
import pwd
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from hal.client.records import replaced
from hal.compat.formats import (
    cpu_time,
    duration_long,
    limit_long,
    memory_kib,
    memory_mib,
    parse_print_fields,
    print_fields,
    timestamp,
    tres_usage,
)
from hal.compat.job_fields import (
    cpu_parts,
    reason_name,
    time_used,
    total_cpu_parts,
    total_cpu_seconds,
)
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.sacct_fields import asked_fields
from hal.compat.sacct_names import full_names
from hal.compat.sacct_runs import SUSPENSION_UNKNOWN, records
from hal.compat.sacct_style import TimeStyle, in_unit, parse_units, time_style
from hal.compat.seam import Console
from hal.compat.version import VERSION_LINE
from hal.core.cloud_costs import money
from hal.core.errors import HalError, InvalidRequest, NotFound
from hal.core.states import OTHER_SLURM_STATES, STATES_BY_CODE, JobState
from hal.slurm.syntax import (
    compress_hostlist,
    expand_hostlist,
    parse_begin,
    parse_time_limit,
)

if TYPE_CHECKING:  # (the jobs are records: see ``hal.compat``)
    from hal.wire.jobs import JobInfo, StepRecord

DEFAULT_FIELDS = "jobid,jobname,partition,account,alloccpus,state,exitcode"
BRIEF_FIELDS = "jobid,state,exitcode"
LONG_FIELDS = (
    "jobid,jobidraw,jobname,partition,account,alloccpus,state,exitcode,elapsed,start,end,"
    "submit,reqmem,maxrss,nodelist,user,timelimit,nnodes,reqcpus"
)

_JOB_ID = re.compile(r"^\d+(?:_\d+|\+\d+)?$")  # 123, 123_4, 123+1
_STEP = re.compile(r"^(?:\d+|batch|extern|interactive)$")  # 123.0, 123.batch...

OPTIONS = (
    Opt("allocations", ("allocations",), "X", Arg.NONE),
    Opt("brief", ("brief",), "b", Arg.NONE),
    Opt("long", ("long",), "l", Arg.NONE),
    Opt("parsable", ("parsable",), "p", Arg.NONE),
    Opt("parsable2", ("parsable2",), "P", Arg.NONE),
    Opt("noheader", ("noheader",), "n", Arg.NONE),
    Opt("delimiter", ("delimiter",), arg=Arg.REQUIRED),  # with -p/-P, for the "|"
    Opt("units", ("units",), arg=Arg.REQUIRED),
    Opt("format", ("format", "fields"), "o"),
    Opt("jobs", ("jobs",), "j"),
    Opt("user", ("user", "uid"), "u"),
    Opt("allusers", ("allusers",), "a", Arg.NONE),
    Opt("starttime", ("starttime",), "S"),
    Opt("endtime", ("endtime",), "E"),
    Opt("state", ("state",), "s"),
    Opt("name", ("name",), arg=Arg.REQUIRED),
    Opt("partition", ("partition",), "r"),
    Opt("accounts", ("accounts",), "A"),
    Opt("qos", ("qos",), "q"),
    Opt("nodelist", ("nodelist",), "N"),
    Opt("group", ("gid", "group"), "g"),
    Opt("nnodes", ("nnodes",), "i"),
    Opt("ncpus", ("ncpus",), "I"),
    Opt("timelimit_min", ("timelimit-min",), "k"),
    Opt("timelimit_max", ("timelimit-max",), "K"),
    Opt("truncate", ("truncate",), "T", Arg.NONE),
    Opt("batch_script", ("batch-script",), "B", Arg.NONE),
    # refused with a reason (``_REFUSED``): HAL keeps no such data, or Slurm 22.05.8 has no
    # such option
    Opt("associations", ("associations",), "x"),
    Opt("completion", ("completion",), "c", Arg.NONE),
    Opt("json", ("json",), arg=Arg.NONE),
    Opt("array", ("array",), arg=Arg.NONE),
    Opt("clusters", ("clusters",), "M"),  # HAL is one cluster; `--clusters all` selects it
    Opt("allclusters", ("allclusters",), "L", Arg.NONE),
    Opt("duplicates", ("duplicates",), "D", Arg.NONE),
    Opt("helpformat", ("helpformat",), "e", Arg.NONE),
    Opt("help", ("help",), "h", Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)

_REFUSED = {
    "associations": "-x/--associations selects by association id, which HAL does not "
    "keep: select with -A/--accounts and -u/--user instead",
    "completion": "-c/--completion reads a job completion log (JobCompType), which HAL "
    "does not keep: its sacct always reads HAL's own job history",
    "json": "--json is not supported by HAL's sacct: use -P/--parsable2 with "
    "--format=... for machine-readable output",
    "array": "unrecognized option '--array': Slurm 22.05.8's sacct has no --array either; "
    "HAL already prints each array element on its own line (123_4)",
}
# Slurm's INFINITE time limit, in minutes (-k/-K compare TimelimitRaw's minutes)
_NO_LIMIT_MINUTES = 0xFFFFFFFE

# (job, the step of the line: "" for the job's, "batch", or a step id "0"..., now); a
# numbered step's line gets a copy of its job with the step's values (``_step_view``)
Column = Callable[["JobInfo", str, float], str]
ColumnT = TypeVar("ColumnT")


# ends that Slurm 22.05.8 records for the job before its script has exited, with 0:0
# (docs/slurm-checks.md)
# (a run a requeue ended, ``sacct -D``: REQUEUED, or PREEMPTED; Slurm 22.05.8's slurmdbd)
_ENDED_FROM_OUTSIDE = (JobState.CANCELLED, JobState.TIMEOUT, JobState.PREEMPTED, "REQUEUED")
# job states whose batch step, ended by a signal, reads CANCELLED in Slurm's sacct
_SIGNALLED_BATCH = (*_ENDED_FROM_OUTSIDE, JobState.FAILED)


def _state(job: JobInfo, step: str, now: float) -> str:
    """The state; a job cancelled, or a step scancel'd alone (``JOB.N``: the step's view
    carries who did it), says by whom, as Slurm 22.05.8's accounting."""
    if job.state == JobState.CANCELLED and job.cancelled_by and step != "batch":
        return f"CANCELLED by {_uid(job.cancelled_by)}"
    if step == "batch" and job.exit_signal and job.state in _SIGNALLED_BATCH:
        return JobState.CANCELLED.value  # a step a signal ended, as Slurm records it
    return job.state


def _exit_code(job: JobInfo, step: str, now: float) -> str:
    """``code:signal``; a job's own line of a cancelled or timed-out job reads 0:0 (its
    batch step's line has the signal), as Slurm's accounting records it."""
    if not step and job.state in _ENDED_FROM_OUTSIDE:
        return "0:0"
    return f"{job.exit_code}:{job.exit_signal}"


def _derived_exit_code(job: JobInfo) -> str:
    """DerivedExitCode: the highest exit code of the job's srun steps (not its batch
    script's), compared as wait statuses, so an exit code outranks a signal: steps
    ending 2:0 and 0:15 give 2:0, 0:15 alone 0:15, none 0:0 (Slurm 22.05.8's
    ``scontrol -d show job``, docs/slurm-checks.md). A step its job's end ended (a
    cancel, the time limit) does not count: Slurm's ends after the job's record."""
    ended = [s for s in job.steps if s.end_time is not None and not s.with_job]
    if not ended:
        return "0:0"
    worst = max(ended, key=lambda s: s.exit_signal or s.exit_code << 8)
    return f"0:{worst.exit_signal}" if worst.exit_signal else f"{worst.exit_code}:0"


def _uid(user: str) -> str:
    found = _passwd(user)
    return str(found.pw_uid) if found else user


def _user_name(text: str, request: Request) -> str:
    """``-u`` takes user names or numeric uids (sacct.1); jobs carry names. A uid this
    machine does not know is refused, as Slurm 22.05.8's sacct refuses it; so is a name,
    once the server has shown it no job of that user either (``_unknown_user``): HAL's
    users need not be accounts on the machine sacct runs on."""
    found = _passwd(text)
    if found:
        return found.pw_name
    if text.isdigit():
        raise InvalidRequest(f"Invalid user id: {text}", field="user")
    request.unknown_users.append(text)
    return text


def _unknown_user(request: Request, jobs: list[JobInfo], console: Console) -> str | None:
    """The first ``-u`` name that neither this machine, the caller, nor a job knows."""
    seen = {job.user for job in jobs}
    unknown = [name for name in request.unknown_users if name not in seen]
    if unknown and console.current_user() in unknown:
        unknown.remove(console.current_user())
    return unknown[0] if unknown else None


def _started(job: JobInfo) -> bool:
    return job.start_time is not None


def _feedback_unset(job: JobInfo, step: str, now: float) -> str:
    return ""  # replaced by ``_with_feedback`` once the jobs are known


def _job_only(get: Callable[[JobInfo], str]) -> Column:
    return lambda job, step, now: "" if step else get(job)


def _alloc_cpus(job: JobInfo, step: str) -> int:
    """The CPUs the job (or its batch step, on the first node; or a numbered step, those
    it was given) was given; 0 unstarted."""
    if not _started(job):
        return 0
    if given := _given(job, step):
        return given.cpus
    return job.cpus // max(job.node_count, 1) if step == "batch" else job.cpus


def _record(job: JobInfo, step: str) -> StepRecord | None:
    """The record of the job's numbered step ``step`` (None: the job, its batch step)."""
    return next((r for r in job.steps if str(r.step_id) == step), None)


def _given(job: JobInfo, step: str) -> StepRecord | None:
    """A numbered step's record where it says what the step was given (a step recorded
    before HAL kept that does not: the job's figures stand in)."""
    record = _record(job, step)
    return record if record is not None and record.cpus else None


def _cpu_time(job: JobInfo, step: str, now: float) -> float:
    """CPUTime: the allocated CPUs times the time they were held."""
    return _alloc_cpus(job, step) * time_used(job, now)


def _measured(job: JobInfo, step: str, value: str) -> str:
    """A memory figure of the batch step, once its agent measured it at its end, or of a
    numbered step, once it ended with its tasks' measured (blank elsewhere, as sacct's)."""
    if step and step != "batch":
        return value if _step_used(job, step) is not None else ""
    return value if step == "batch" and job.max_rss_bytes and job.end_time is not None else ""


def _usage(job: JobInfo, step: str, *, mean: bool) -> str:
    """TRESUsageInMax (``mean``: TRESUsageInAve) of the batch step (its one task's) or of
    an ended numbered step (over its tasks): CPU time, most memory and, where its tasks
    were read for GPUs, their GPU memory and utilisation (``_gpu_figures``)."""
    gpu_mem, gpu_util = _gpu_figures(job, step, mean=mean)
    cpu, memory = job.cpu_seconds, job.max_rss_bytes
    record = _step_used(job, step) if step != "batch" else None
    if record is not None and mean:  # a step's mean task (its Max cpu: all its tasks')
        cpu, memory = record.total_cpu_seconds / max(record.ntasks, 1), record.ave_rss_bytes
    return _measured(job, step, tres_usage(cpu, memory, gpu_mem, gpu_util))


def _gpu_figures(job: JobInfo, step: str, *, mean: bool) -> tuple[int | None, float | None]:
    """(GPU memory, utilisation) of a step's line: the batch step's samples (its most
    memory; the most utilisation, or their mean), or a numbered step's tasks' (the most
    of one task, or the mean over them); (None, None) where none were read."""
    if step and step != "batch":
        record = _step_used(job, step)
        used = record.gpu if record is not None else None
        if used is None:
            return None, None
        return (used.ave_mem_bytes, used.ave_util) if mean else (used.max_mem_bytes, used.max_util)
    gpu = job.gpu_usage
    if gpu is None:
        return None, None
    return gpu.max_mem_bytes, gpu.ave_util if mean else gpu.max_util


def _step_used(job: JobInfo, step: str) -> StepRecord | None:
    """A numbered step's record, once it ended with its tasks' memory measured."""
    record = _record(job, step)
    ended = record is not None and record.end_time is not None and record.max_rss_bytes > 0
    return record if ended else None


def _ave_rss(job: JobInfo, step: str, now: float) -> str:
    return _measured(job, step, memory_kib(int(_ave_rss_kib(job, step) * 1024)))


def _ave_rss_kib(job: JobInfo, step: str) -> float:
    record = _step_used(job, step)
    return (record.ave_rss_bytes if record is not None else job.max_rss_bytes) / 1024


def _req_mem_mib(job: JobInfo) -> int:
    """ReqMem: the memory asked per node, in whole MiB as Slurm counts it."""
    return job.memory_bytes // max(job.node_count, 1) // (1024 * 1024)


def _max_rss_node(job: JobInfo, step: str, now: float) -> str:
    record = _step_used(job, step)
    return _measured(job, step, record.max_rss_node if record else ",".join(job.nodes[:1]))


def _max_rss_task(job: JobInfo, step: str, now: float) -> str:
    record = _step_used(job, step)
    return _measured(job, step, str(record.max_rss_task) if record else "0")


def _tres(job: JobInfo, *, step: str) -> str:
    """ReqTRES/AllocTRES as sacct prints them: ``billing=4,cpu=4,mem=8G,node=2``; a
    batch step holds the first node's share and no billing."""
    nodes = max(job.node_count, 1)
    if step == "batch":
        cpus, memory, count = job.cpus // nodes, job.memory_bytes // nodes, 1
    elif given := _given(job, step):  # as scontrol show step's TRES
        cpus, memory = given.cpus, given.memory_bytes
        count = len(expand_hostlist(given.nodelist, field="nodelist"))
    else:
        cpus, memory, count = job.cpus, job.memory_bytes, job.node_count
    items = [] if step else [f"billing={cpus}"]
    items.append(f"cpu={cpus}")
    if job.gpus and not step:
        items.append(f"gres/gpu={job.gpus}")
    if memory:
        items.append(f"mem={memory_mib(memory)}")
    items.append(f"node={count}")
    return ",".join(items)


@functools.cache  # (a listing asks it for every line's UID, GID and Group)
def _passwd(user: str) -> pwd.struct_passwd | None:
    """The job's user in this machine's user database, as ``-u`` reads it (None: unknown
    here)."""
    try:
        return pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        return None


def _uid_of(job: JobInfo) -> str:
    """UID: the job's user's number (blank for a name this machine does not know)."""
    found = _passwd(job.user)
    return str(found.pw_uid) if found else job.user if job.user.isdigit() else ""


def _gid_of(job: JobInfo) -> str:
    """GID: the group the job ran under: its agent starts it with the user's primary
    group (``state.launch``), which this machine's user database names too."""
    found = _passwd(job.user)
    return str(found.pw_gid) if found else ""


def _group_of(job: JobInfo) -> str:
    gid = _gid_of(job)
    return _group_name(int(gid)) if gid else ""


@functools.cache
def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)  # a group without a name: its number


def _cluster_unset(job: JobInfo, step: str, now: float) -> str:
    """Cluster, before ``sacct`` asked the server its name (``_with_cluster``)."""
    return ""


def _limit_minutes(job: JobInfo) -> str:
    """TimelimitRaw: the limit in whole minutes, as Slurm keeps it (a limit in seconds
    rounds up, as sbatch's ``-t 0:30`` is 1 minute); UNLIMITED without one."""
    if job.time_limit_seconds <= 0:
        return "UNLIMITED"
    return str(-(-job.time_limit_seconds // 60))


def _suspended(job: JobInfo, step: str, now: float) -> str:
    """Suspended: the time the job (and its batch step, which runs through it) spent
    suspended, as Slurm 22.05.8's sacct counts it (a job suspended now: so far). HAL
    keeps the sum, not when: a numbered step of a job ever suspended, or one run of a
    requeued job suspended in some run (``sacct_runs``), reads blank, not a guess."""
    seconds = job.suspended_seconds
    if seconds == SUSPENSION_UNKNOWN or (seconds and step not in ("", "batch")):
        return ""
    return duration_long(seconds)


def _task_cpu(job: JobInfo, step: str, *, least: bool) -> float | None:
    """The CPU seconds of the step's mean task (``least``: of its least task) once
    measured: the batch step's one task, a numbered step's tasks' sum over their count.
    HAL records a step's sum, not each task's: the least of several is unknown (None)."""
    if not _measured(job, step, "x"):
        return None
    if step == "batch":
        return job.cpu_seconds
    if least and job.ntasks > 1:
        return None
    return job.cpu_seconds / max(job.ntasks, 1)  # a step's view: its tasks' (_step_view)


def _cpu_part(part: int) -> Column:
    """UserCPU (``part`` 0) or SystemCPU (1): TotalCPU's parts, of the line's step (the
    job's: the sums over its steps, as TotalCPU's), in TotalCPU's format; blank where
    they are not known (an older agent or srun recorded only the sum)."""

    def column(job: JobInfo, step: str, now: float) -> str:
        if step == "":
            parts = total_cpu_parts(job)
        else:
            parts = cpu_parts(job.cpu_seconds, job.user_cpu_seconds, job.system_cpu_seconds)
        return "" if parts is None else cpu_time(parts[part])

    return column


def _cpu_column(least: bool, show: Callable[[JobInfo, float], str]) -> Column:
    def column(job: JobInfo, step: str, now: float) -> str:
        seconds = _task_cpu(job, step, least=least)
        return "" if seconds is None else show(job, seconds)

    return column


_INT32 = 1 << 32


def _reserved(job: JobInfo, now: float) -> int | None:
    """Reserved, as Slurm 22.05.8's sacct computes it: from when the job became eligible
    to its start, or to now while it waits (negative while a --begin is ahead, which
    Slurm prints INVALID); 0 for a job never eligible (held). None: ended without
    starting, whose figure Slurm takes from a start of 0 (INVALID, and an overflowed
    ResvCPU HAL does not copy)."""
    if job.eligible_time is None:
        return 0
    if job.start_time is None and job.end_time is not None:
        return None
    until = job.start_time if job.start_time is not None else now
    return int(until) - int(job.eligible_time)


def _int32_time(value: int) -> str:
    """A time Slurm holds in 32 bits: INVALID where it reads negative."""
    signed = (value + _INT32 // 2) % _INT32 - _INT32 // 2
    return "INVALID" if signed < 0 else duration_long(signed)


def _reserved_text(job: JobInfo, step: str, now: float) -> str:
    if step:
        return ""
    seconds = _reserved(job, now)
    return "INVALID" if seconds is None else _int32_time(seconds)


def _resv_cpu(job: JobInfo, step: str, now: float) -> str:
    seconds = _reserved(job, now)
    return "" if step or seconds is None else _int32_time(seconds * job.cpus)


def _resv_cpu_raw(job: JobInfo, step: str, now: float) -> str:
    seconds = _reserved(job, now)
    return "" if step or seconds is None else str(seconds * job.cpus % _INT32)


def _lost_work(job: JobInfo) -> str:
    seconds = job.lost_work_seconds
    return "" if seconds is None else duration_long(seconds)


# name (lower case) → (title, width, column); a negative width aligns left, as sacct.c.
FIELDS: dict[str, tuple[str, int, Column]] = {
    "jobid": ("JobID", -12, lambda j, s, n: j.display_id + (f".{s}" if s else "")),
    "jobidraw": ("JobIDRaw", -12, lambda j, s, n: str(j.id) + (f".{s}" if s else "")),
    "jobname": ("JobName", 10, lambda j, s, n: "batch" if s == "batch" else j.name),
    "partition": ("Partition", 10, _job_only(lambda j: j.partition)),
    "account": ("Account", 10, lambda j, s, n: j.account or ""),
    "alloccpus": ("AllocCPUS", 10, lambda j, s, n: str(_alloc_cpus(j, s))),
    "reqcpus": ("ReqCPUS", 8, lambda j, s, n: str(j.cpus)),
    "state": ("State", 10, _state),
    "exitcode": ("ExitCode", 8, _exit_code),
    "derivedexitcode": ("DerivedExitCode", 15, _job_only(_derived_exit_code)),
    "elapsed": ("Elapsed", 10, lambda j, s, n: duration_long(time_used(j, n))),
    "elapsedraw": ("ElapsedRaw", 10, lambda j, s, n: str(int(time_used(j, n)))),
    # a job that ended without starting (cancelled while pending): "None", as Slurm's
    "start": ("Start", 19, lambda j, s, n: timestamp(j.start_time, _unstarted(j))),
    "end": ("End", 19, lambda j, s, n: timestamp(j.end_time, "Unknown")),
    "submit": ("Submit", 19, lambda j, s, n: timestamp(j.submit_time, "Unknown")),
    "eligible": ("Eligible", 19, lambda j, s, n: timestamp(j.eligible_time, "Unknown")),
    "reqmem": ("ReqMem", 10, _job_only(lambda j: memory_mib(_req_mem_mib(j) * 1024 * 1024))),
    # Usage is measured by the agent for the batch step when it ends, and for a numbered
    # step by its nodes (or srun) when it ends (the job line's memory fields are blank,
    # as sacct's; its TotalCPU is the sum over its steps, the batch step's included).
    "maxrss": ("MaxRSS", 10, lambda j, s, n: _measured(j, s, memory_kib(j.max_rss_bytes))),
    "averss": ("AveRSS", 10, _ave_rss),
    "maxrssnode": ("MaxRSSNode", 10, _max_rss_node),
    "maxrsstask": ("MaxRSSTask", 10, _max_rss_task),
    "totalcpu": (
        "TotalCPU",
        10,
        lambda j, s, n: cpu_time(total_cpu_seconds(j) if s == "" else j.cpu_seconds),
    ),
    # its user and system parts, as TotalCPU is taken and printed
    "usercpu": ("UserCPU", 10, _cpu_part(0)),
    "systemcpu": ("SystemCPU", 10, _cpu_part(1)),
    "tresusageinmax": ("TRESUsageInMax", 14, lambda j, s, n: _usage(j, s, mean=False)),
    "tresusageinave": ("TRESUsageInAve", 14, lambda j, s, n: _usage(j, s, mean=True)),
    "cputime": ("CPUTime", 10, lambda j, s, n: duration_long(_cpu_time(j, s, n))),
    "cputimeraw": ("CPUTimeRAW", 10, lambda j, s, n: str(int(_cpu_time(j, s, n)))),
    "reqtres": ("ReqTRES", 10, _job_only(lambda j: _tres(j, step=""))),
    "alloctres": ("AllocTRES", 10, lambda j, s, n: _tres(j, step=s) if _started(j) else ""),
    "ncpus": ("NCPUS", 10, lambda j, s, n: str(_alloc_cpus(j, s))),
    "reqnodes": ("ReqNodes", 8, _job_only(lambda j: str(j.node_count))),
    "allocnodes": (
        "AllocNodes",
        10,
        lambda j, s, n: ("1" if s == "batch" else str(j.node_count)) if _started(j) else "0",
    ),
    "nodelist": (  # the batch step's: its node alone, as Slurm's batch step runs there
        "NodeList",
        15,
        lambda j, s, n: (
            (j.nodes[0] if s == "batch" else compress_hostlist(j.nodes))
            if j.nodes
            else "None assigned"
        ),
    ),
    "nnodes": ("NNodes", 8, lambda j, s, n: "1" if s == "batch" else str(j.node_count)),
    # tasks of a step (the batch step runs one); blank on the job's line, as sacct's
    "ntasks": ("NTasks", 8, lambda j, s, n: "1" if s == "batch" else str(j.ntasks) if s else ""),
    "user": ("User", 9, _job_only(lambda j: j.user)),
    "timelimit": ("Timelimit", 10, _job_only(lambda j: limit_long(j.time_limit_seconds))),
    "reason": ("Reason", 20, _job_only(lambda j: reason_name(j.reason))),
    "priority": ("Priority", 10, _job_only(lambda j: str(j.priority))),
    "qos": ("QOS", 10, _job_only(lambda j: j.qos or "")),
    "comment": ("Comment", 15, _job_only(lambda j: j.comment)),
    "workdir": ("WorkDir", -15, _job_only(lambda j: j.workdir)),
    # the job's user and the group it ran under, as this machine's user database says
    "uid": ("UID", 6, _job_only(_uid_of)),
    "gid": ("GID", 6, _job_only(_gid_of)),
    "group": ("Group", 9, _job_only(_group_of)),
    "cluster": ("Cluster", 10, _cluster_unset),  # every line (``_with_cluster``)
    "timelimitraw": ("TimelimitRaw", 10, _job_only(_limit_minutes)),
    "suspended": ("Suspended", 10, _suspended),
    "constraints": ("Constraints", 19, _job_only(lambda j: "&".join(j.constraint))),
    "reservation": ("Reservation", 20, _job_only(lambda j: j.reservation)),
    # HAL's: the latest values the job reported (hal feedback), ``name=value,...``
    "feedback": ("Feedback", -30, _feedback_unset),
    "wckey": ("WCKey", 10, _job_only(lambda j: j.wckey)),
    # CPU time of a step's tasks (HH:MM:SS, as Slurm's TRES cpu), the job line blank
    "avecpu": ("AveCPU", 10, _cpu_column(False, lambda j, t: duration_long(t))),
    "mincpu": ("MinCPU", 10, _cpu_column(True, lambda j, t: duration_long(t))),
    "mincpunode": ("MinCPUNode", 10, _cpu_column(True, lambda j, t: ",".join(j.nodes[:1]))),
    "mincputask": ("MinCPUTask", 10, _cpu_column(True, lambda j, t: "0")),
    # the time the job waited once eligible, alone and times its CPUs: the job line
    "reserved": ("Reserved", 10, _reserved_text),
    "resvcpu": ("ResvCPU", 10, _resv_cpu),
    "resvcpuraw": ("ResvCPURAW", 10, _resv_cpu_raw),
    # HAL's: what the run's cloud nodes cost in USD (so far while it runs; blank: none)
    "cost": ("Cost", 10, _job_only(lambda j: "" if j.cost is None else money(j.cost))),
    # HAL's, spot interruptions (docs/admin/cloud.md): when a provider's notice ended the
    # run, and the work a run ended PREEMPTED or NODE_FAIL lost (blank: none)
    "interrupted": ("Interrupted", 19, _job_only(lambda j: timestamp(j.interrupted_at, ""))),
    "lostwork": ("LostWork", 10, _job_only(_lost_work)),
}


def styled_fields(units: str, times: TimeStyle) -> dict[str, tuple[str, int, Column]]:
    """``FIELDS`` with sizes in ``units`` ("": each in its own, as sacct's default) and
    times in ``times`` (``SLURM_TIME_FORMAT``; module ``sacct_style``)."""

    def when(get: Callable[[JobInfo], float | None]) -> Column:
        return lambda j, s, n: times.text(get(j), "Unknown", n)

    def size(text: str, value: float, base: str) -> str:  # blank stays blank (unmeasured)
        return in_unit(value, base, units) if units and text else text

    rss = FIELDS["maxrss"][2]
    ave = FIELDS["averss"][2]
    req = FIELDS["reqmem"][2]
    return FIELDS | {
        "start": ("Start", 19, lambda j, s, n: times.text(j.start_time, _unstarted(j), n)),
        "end": ("End", 19, when(lambda j: j.end_time)),
        "submit": ("Submit", 19, when(lambda j: j.submit_time)),
        "eligible": ("Eligible", 19, when(lambda j: j.eligible_time)),
        "maxrss": ("MaxRSS", 10, lambda j, s, n: size(rss(j, s, n), j.max_rss_bytes / 1024, "K")),
        "averss": ("AveRSS", 10, lambda j, s, n: size(ave(j, s, n), _ave_rss_kib(j, s), "K")),
        "reqmem": ("ReqMem", 10, lambda j, s, n: size(req(j, s, n), _req_mem_mib(j), "M")),
    }


@dataclass
class Request:
    fields: list[tuple[str, int, Column]] = field(default_factory=list)
    delimiter: str = "|"  # --delimiter, between the values of -p/-P lines
    version: bool = False
    steps: bool = True
    duplicates: bool = False  # -D: a requeued job's earlier runs too (``sacct_runs``)
    parsable: str = ""  # "", "trailing" (--parsable) or "plain" (--parsable2)
    header: bool = True
    ids: list[str] = field(default_factory=list)
    # job id → steps asked for with ``-j 12.batch`` / ``-j 12.3`` ("*" = the whole job)
    job_steps: dict[str, set[str]] = field(default_factory=dict)
    users: list[str] = field(default_factory=list)
    unknown_users: list[str] = field(default_factory=list)  # -u names this host lacks
    all_users: bool = False
    names: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    states: set[str] = field(default_factory=set)
    start: float | None = None
    end: float | None = None
    qos: set[str] = field(default_factory=set)  # -q, lower case (Slurm's QoS names are)
    nodes: set[str] = field(default_factory=set)  # -N: jobs that ran on any of these
    gids: set[str] = field(default_factory=set)  # -g: numeric, as ``_gid_of``
    nnodes: tuple[int, int] | None = None  # -i min[-max]: allocated nodes
    ncpus: tuple[int, int] | None = None  # -I min[-max]: allocated CPUs
    limit_min: int | None = None  # -k, minutes (-K alone is ignored, as Slurm's)
    limit_max: int | None = None  # -K
    truncate: bool = False  # -T: start and end cut to the -S/-E window
    batch_script: bool = False  # -B: print the scripts of the -j jobs instead


def sacct(argv: list[str], console: Console) -> int:
    now = console.clock()
    times, bad_format = time_style(console.environ.get("SLURM_TIME_FORMAT"))
    if bad_format:  # Slurm says so and prints the standard form
        console.error(bad_format)
    try:
        request = parse_request(argv, now, console.environ.get("SACCT_FORMAT"), times)
    except OptionError as err:
        return console.error(err.for_command("sacct"))
    except HalError as err:
        return console.error(err.message)
    if request is None:
        console.out(" ".join(title for title, _, _ in FIELDS.values()))
        return 0
    if request.version:  # as HAL's other commands print it (compat.version)
        console.out(VERSION_LINE)
        return 0
    try:
        if not request.users and not request.all_users and not request.ids:
            me = console.client.whoami(validate=False)
            if not me.admin:
                request.users = [me.name]
        request.fields = _with_cluster(request.fields, console)
        jobs = console.client.jobs(
            history=True,
            ids=request.ids or None,
            users=request.users or None,
            names=request.names or None,
            partitions=request.partitions or None,
            validate=False,  # (records: the server's JSON is JobInfo's, ADR 0027)
            fields=request_fields(request),
        )
        unknown = _unknown_user(request, jobs, console) if request.unknown_users else None
    except NotFound:  # unknown ids: sacct prints just the header
        jobs, unknown = [], None
    except HalError as err:
        return console.error(err.message)
    if unknown is not None:
        return console.error(f"Invalid user id: {unknown}")
    jobs = sorted(jobs, key=lambda j: j.id)
    try:
        request.fields = _with_feedback(request.fields, jobs, console)
    except HalError as err:
        return console.error(err.message)
    if request.batch_script:
        return _print_scripts(request, jobs, now, console)
    for line in sacct_lines(request, jobs, now):
        console.out(line)
    return 0


_RULE = "-" * 80


def request_fields(request: Request) -> list[str]:
    """The ``JobInfo`` fields ``request`` reads of each job (``sacct_fields``)."""
    return asked_fields([title for title, _, _ in request.fields])


def _print_scripts(request: Request, jobs: list[JobInfo], now: float, console: Console) -> int:
    """``sacct -B -j ...``: each selected job's batch script under ``Batch Script for
    ID`` and a rule of 80 dashes, then a blank line (Slurm 22.05.8 prints the script
    with a newline after it); ``NONE`` for a job without one (salloc's, srun's)."""
    for job in (j for j in jobs if _wanted(j, request, now)):
        try:
            script = console.client.job_script(job.id)
        except NotFound:
            script = ""
        except HalError as err:
            return console.error(err.message)
        console.out(f"Batch Script for {job.display_id}")
        console.out(_RULE)
        console.out(script or "NONE")
    return 0


def _with_cluster(
    fields: list[tuple[str, int, Column]], console: Console
) -> list[tuple[str, int, Column]]:
    """``fields`` with the server's cluster name (``scontrol show config``'s ClusterName)
    in any Cluster column, asked only when one is wanted."""
    if all(column is not _cluster_unset for _, _, column in fields):
        return fields
    name = console.client.cluster_config().cluster_name

    def cluster(job: JobInfo, step: str, now: float) -> str:
        return name

    return [(t, w, cluster if c is _cluster_unset else c) for t, w, c in fields]


def _with_feedback(
    fields: list[tuple[str, int, Column]], jobs: list[JobInfo], console: Console
) -> list[tuple[str, int, Column]]:
    """``fields`` with the jobs' latest feedback (``samples_per_s=1830,loss=0.25``, by
    name) in any Feedback column, asked only when one is wanted."""
    if all(column is not _feedback_unset for _, _, column in fields) or not jobs:
        return fields
    found = console.client.feedback_latest([j.id for j in jobs])
    texts = {
        job_id: ",".join(f"{m.name}={m.latest:g}" for m in f.metrics) for job_id, f in found.items()
    }

    def feedback(job: JobInfo, step: str, now: float) -> str:
        return "" if step else texts.get(job.id, "")

    return [(t, w, feedback if c is _feedback_unset else c) for t, w, c in fields]


def parse_request(
    argv: list[str], now: float, env_format: str | None, times: TimeStyle | None = None
) -> Request | None:
    """The request ``argv`` makes; None for --help, --usage or --helpformat (the field
    list). Fields: every -o/--format, in order (Slurm joins them), then -b's or -l's;
    none of these: SACCT_FORMAT or the default."""
    parsed = parse_options(argv, OPTIONS)
    request = Request()
    formats: list[str] = []
    preset = ""
    units = ""
    for dest, value, _spelled in parsed.values:
        text = value or ""
        items = [item.strip() for item in text.split(",") if item.strip()]
        if dest in ("help", "usage", "helpformat"):
            return None
        if dest == "version":
            request.version = True
        elif dest == "allocations":
            request.steps = False
        elif dest == "duplicates":
            request.duplicates = True
        elif dest == "brief":
            preset = BRIEF_FIELDS
        elif dest == "long":
            preset = LONG_FIELDS
        elif dest == "parsable":
            request.parsable = "trailing"
        elif dest == "parsable2":
            request.parsable = "plain"
        elif dest == "delimiter":
            request.delimiter = text
        elif dest == "units":
            units = parse_units(text)
        elif dest == "noheader":
            request.header = False
        elif dest == "format":
            formats.append(text)
        elif dest == "jobs":
            for item in items:  # 123, 123.batch or 123.4
                base, _, step = item.partition(".")
                if not _JOB_ID.match(base) or (step and not _STEP.match(step)):
                    raise InvalidRequest(
                        f"Bad job/step specified: {item}; write 123, 123_4 (an array "
                        "element), 123+1 (a het job component), or add a step: 123.batch",
                        field="jobs",
                    )
                request.ids.append(base)
                request.job_steps.setdefault(base, set()).add(step or "*")
        elif dest == "user":
            request.users += [_user_name(item, request) for item in items]
        elif dest == "allusers":
            request.all_users = True
        elif dest == "starttime":
            request.start = parse_begin(text, now, field="starttime", past=True)
        elif dest == "endtime":
            request.end = parse_begin(text, now, field="endtime", past=True)
        elif dest == "state":
            request.states |= {_state_name(item) for item in items}
        elif dest == "name":
            request.names += items
        elif dest == "partition":
            request.partitions += items
        elif dest == "accounts":
            request.accounts += items
        elif dest in _REFUSED:
            raise InvalidRequest(_REFUSED[dest], field=dest)
        elif dest == "qos":
            request.qos |= {item.lower() for item in items}
        elif dest == "nodelist":
            request.nodes |= set(expand_hostlist(text, field="nodelist"))
        elif dest == "group":
            request.gids |= {_group_id(item) for item in items}
        elif dest == "nnodes":
            request.nnodes = _count_range(text, "node")
        elif dest == "ncpus":
            request.ncpus = _count_range(text, "cpu")
        elif dest == "timelimit_min":
            request.limit_min = _limit_minutes_of(text)
        elif dest == "timelimit_max":
            request.limit_max = _limit_minutes_of(text)
        elif dest == "truncate":
            request.truncate = True
        elif dest == "batch_script":
            request.batch_script = True
    if parsed.positionals:
        raise InvalidRequest(f"Unrecognized option: {parsed.positionals[0]}")
    if request.batch_script and not request.ids:
        raise InvalidRequest(
            "When requesting job scripts you must also request specific jobs with the '-j' option.",
            field="jobs",
        )
    if formats and preset == LONG_FIELDS:
        raise InvalidRequest(
            "Options -o(--format) and -l(--long) are mutually exclusive. Please remove one "
            "and retry.",
            field="format",
        )
    fields_text = ",".join(
        [*formats, preset] if formats or preset else [env_format or DEFAULT_FIELDS]
    )
    request.fields = parse_fields(fields_text, styled_fields(units, times or TimeStyle()))
    if not request.fields:
        raise InvalidRequest(
            "No fields requested: --format needs field names, e.g. --format=JobID,State",
            field="format",
        )
    if "REQUEUED" in request.states:  # a requeued run is an earlier record: Slurm's -D
        request.duplicates = True
    if request.states:
        # Slurm 22.05.8 (docs/slurm-checks.md): with -s the window is the moment -S
        # unless -E widens it; -S defaults to now (`sacct -s R` is the jobs running now),
        # with -j to the beginning of time and -E then to now (`sacct -j 9 -s PD`: did 9
        # ever wait)
        if request.start is None:
            request.start = 0.0 if request.ids else now
            default_end = now if request.ids else request.start
        else:
            default_end = request.start
        if request.end is None:
            request.end = default_end
    if request.start is None and not request.ids:
        # sacct's default window starts at 00:00 today
        midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
        request.start = midnight.timestamp()
    end = request.end if request.end is not None else now  # sacct's default end: now
    if request.start is not None and request.start > end:
        raise InvalidRequest(
            f"Start time ({timestamp(request.start)}) requested is after end time "
            f"({timestamp(end)}).",
            field="starttime",
        )
    return request


def _group_id(text: str) -> str:
    """A ``-g`` group name or gid, as the gid ``_gid_of`` gives a job; one this machine's
    group database does not know is refused, as Slurm 22.05.8's sacct refuses it."""
    try:
        return str(grp.getgrgid(int(text)).gr_gid if text.isdigit() else grp.getgrnam(text).gr_gid)
    except (KeyError, OverflowError):
        raise InvalidRequest(f"Invalid group id: {text}", field="group") from None


def _count_range(text: str, what: str) -> tuple[int, int]:
    """``-i``/``-I``'s ``min[-max]``: ``2`` is exactly 2, ``1-4`` from 1 to 4."""
    low, dash, high = text.strip().partition("-")
    if not low.isdigit() or (dash and not high.isdigit()):
        raise InvalidRequest(
            f'Invalid numeric value "{text}" for requested {what} range.', field=f"n{what}s"
        )
    return int(low), int(high) if dash else int(low)


def _limit_minutes_of(text: str) -> int:
    """``-k``/``-K``'s time limit in whole minutes (seconds round up, as Slurm keeps
    limits); UNLIMITED/INFINITE is Slurm's INFINITE."""
    if text.strip().lower() in ("unlimited", "infinite", "-1"):
        return _NO_LIMIT_MINUTES
    try:
        seconds = parse_time_limit(text, field="timelimit")
    except InvalidRequest:
        raise InvalidRequest(
            f"Invalid time limit specification: {text!r}; write minutes, MM:SS, HH:MM:SS, "
            "D-HH, D-HH:MM or D-HH:MM:SS",
            field="timelimit",
        ) from None
    return -(-seconds // 60)


def _state_name(text: str) -> str:
    upper = text.upper()
    if upper in STATES_BY_CODE:
        return STATES_BY_CODE[upper].value
    if upper == "RQ":  # (a run a requeue ended: sacct -D)
        return "REQUEUED"
    if upper in JobState.__members__ or upper in OTHER_SLURM_STATES:
        return upper
    raise InvalidRequest(
        f"Invalid job state specified: {text}; use codes or names such as PD, R, CD, F, CA, "
        "TO, OOM or PENDING, RUNNING, COMPLETED, comma-separated",
        field="state",
    )


def parse_fields(
    text: str, known: dict[str, tuple[str, int, Column]] = FIELDS, command: str = "sacct"
) -> list[tuple[str, int, Column]]:
    """``JobID,JobName%30,State`` → columns of ``known``; names as Slurm's sacct reads
    them, any prefix (``sacct_names``); ``%N`` sets the width, ``%-N`` left-aligns it."""
    return parse_columns(full_names(text, known), known, command, exact=True)


def parse_columns(
    text: str, known: dict[str, tuple[str, int, ColumnT]], command: str, *, exact: bool = False
) -> list[tuple[str, int, ColumnT]]:
    """``parse_fields`` for any kind of column (sstat's read its own lines); ``exact``:
    widths as sacct's (``parse_print_fields``)."""
    titles = ", ".join(title for title, _, _ in known.values())
    try:
        found = parse_print_fields(
            text,
            lambda name: known.get(name.lower()),
            lambda spec: spec[1],
            unknown=lambda name: (
                f'Invalid field requested: "{name}" (HAL\'s {command} knows: {titles})'
            ),
            exact=exact,
        )
    except ValueError as err:
        raise InvalidRequest(str(err), field="format") from err
    return [(title, width, column) for (title, _, column), width in found]


def _was_in(job: JobInfo, state: str, start: float, end: float) -> bool:
    """Whether ``job`` was in ``state`` at some moment of [start, end]: waiting from its
    submission to its start, running from its start to its end, an end state at its
    end (Slurm's ``sacct -s X -S start -E end``)."""
    if state == JobState.PENDING:  # a job held or waiting on a dependency was not eligible
        started = _start(job)  # a job cancelled while pending waited until then
        return (
            job.eligible_time is not None
            and job.eligible_time < end
            and (started is None or started >= start)
        )
    if state == JobState.SUSPENDED and not _was_suspended(job):
        return False
    if state in (JobState.RUNNING, JobState.SUSPENDED):
        return (
            job.start_time is not None
            and job.start_time <= end
            and (job.end_time is None or job.end_time >= start)
        )
    return job.state == state and job.end_time is not None and start <= job.end_time <= end


def _was_suspended(job: JobInfo) -> bool:
    """Whether the job is suspended or ever was (Slurm's ``-s S`` lists no other job; HAL
    keeps how long, not when, so the window is that of its run)."""
    return job.state == JobState.SUSPENDED or job.suspended_seconds != 0  # (or unknown: -1)


def _start(job: JobInfo) -> float | None:
    """When the job stopped pending: its start, or for a job that ended without starting
    (cancelled while pending) its end. Slurm 22.05.8 shows such a job's Start as
    ``None`` and lists it under ``-s PD`` only in windows before its end (checked with
    slurmdbd); HAL listed it in every window."""
    return job.start_time if job.start_time is not None else job.end_time


def _unstarted(job: JobInfo) -> str:
    return "None" if job.end_time is not None else "Unknown"


def _selected(job: JobInfo, request: Request) -> bool:
    """What the job is, as -q, -N, -g, -i, -I and -k/-K select it: its QoS, the nodes,
    node and CPU counts it was allocated (none before it started: a pending job is
    ``-i 0``, as Slurm's accounting), its user's group (``_gid_of``), its limit in whole
    minutes (-k alone: exactly that; -K alone is ignored, as Slurm 22.05.8's sacct)."""
    if request.qos and (job.qos or "").lower() not in request.qos:
        return False
    if request.nodes and not request.nodes.intersection(job.nodes):
        return False
    if request.gids and _gid_of(job) not in request.gids:
        return False
    if request.nnodes and not _within(job.node_count if _started(job) else 0, request.nnodes):
        return False
    if request.ncpus and not _within(_alloc_cpus(job, ""), request.ncpus):
        return False
    if request.limit_min is not None:
        high = request.limit_min if request.limit_max is None else request.limit_max
        return _within(_limit_of(job), (request.limit_min, high))
    return True


def _within(value: int, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def _limit_of(job: JobInfo) -> int:
    """The job's limit in whole minutes, as -k/-K compare it (Slurm's INFINITE: none)."""
    limit = _limit_minutes(job)
    return _NO_LIMIT_MINUTES if limit == "UNLIMITED" else int(limit)


def _wanted(job: JobInfo, request: Request, now: float) -> bool:
    if request.accounts and (job.account or "") not in request.accounts:
        return False
    if not _selected(job, request):
        return False
    if request.names and job.name not in request.names:
        return False
    if request.users and job.user not in request.users:
        return False
    if request.states:  # the state's own window stands for the job's
        assert request.start is not None and request.end is not None  # (parse_request)
        return any(_was_in(job, s, request.start, request.end) for s in request.states)
    # A job belongs to the window [start, end] if it existed at any moment of it: from
    # its submission when -j names it, else from when it became eligible, as Slurm's
    # accounting, which lists no job held, waiting on a dependency or on its --begin
    end = request.end if request.end is not None else now
    since = job.submit_time if request.ids else job.eligible_time
    if since is None or since >= end:
        return False
    return not (
        request.start is not None and job.end_time is not None and job.end_time < request.start
    )


def _steps_asked(request: Request, job: JobInfo) -> set[str] | None:
    """The steps ``-j`` asks of ``job`` ("*": the whole job), by its own id, its raw id or
    the id of its array or het job: ``-j 12.batch`` on an array is every element's batch
    step, as ``-j 12`` is every element. None: ``-j`` did not name it."""
    keys = {job.display_id, str(job.id)}
    keys.update(str(p) for p in (job.array_job_id, job.het_job_id) if p is not None)
    found = [request.job_steps[k] for k in keys if k in request.job_steps]
    return set().union(*found) if found else None


def sacct_lines(request: Request, jobs: list[JobInfo], now: float) -> list[str]:
    """The lines of the records of ``jobs`` the request selects (each run of a requeued
    job on its own with ``-D``: ``-s PR`` finds a preempted run, ``-S``/``-E`` its times)."""
    rows: list[list[str]] = []
    every = (r for j in jobs for r in records(j, duplicates=request.duplicates))
    for record in (r for r in every if _wanted(r, request, now)):
        job = _truncated(record, request, now)
        wanted = _steps_asked(request, job)
        whole = wanted is None or "*" in wanted
        if whole:
            rows.append([column(job, "", now) for _, _, column in request.fields])
        batch = request.steps if whole else "batch" in (wanted or ())
        # a het job's script runs in component 0; salloc's allocation has no batch step
        # (its command runs on the submit host), as Slurm 22.05.8 lists it
        batch = batch and not job.het_job_offset and not job.interactive
        if batch and _step_in_window(record.start_time, request, now):
            rows.append([column(job, "batch", now) for _, _, column in request.fields])
        for step in record.steps:
            if not _step_in_window(step.start_time, request, now):
                continue
            if (request.steps and whole) or str(step.step_id) in (wanted or ()):
                view = _truncated(_step_view(record, step), request, now)
                rows.append(
                    [column(view, str(step.step_id), now) for _, _, column in request.fields]
                )
    return table_lines(
        request.fields,
        rows,
        parsable=request.parsable,
        header=request.header,
        delimiter=request.delimiter,
    )


def _step_in_window(start: float | None, request: Request, now: float) -> bool:
    """Whether a step that started at ``start`` gets a line: one that started, and with
    -T not after the window's end (Slurm 22.05.8 leaves such steps out)."""
    if start is None:
        return False
    return not request.truncate or start <= (request.end if request.end is not None else now)


def _truncated(job: JobInfo, request: Request, now: float) -> JobInfo:
    """``job`` (or a step's view) with -T: its start raised to -S and its end (a running
    one's too) lowered to -E (now without -E), as Slurm 22.05.8's accounting cuts them,
    so Elapsed and CPUTime count only the window (0 where the job started after it
    ended). A job that never started keeps its times (Slurm prints the window's end as
    both: a difference HAL leaves)."""
    if not request.truncate or job.start_time is None:
        return job
    end = request.end if request.end is not None else now
    start = job.start_time
    if request.start is not None and start < request.start:
        start = request.start
    stop = end if job.end_time is None or job.end_time > end else job.end_time
    return replaced(job, {"start_time": start, "end_time": stop})


def _step_view(job: JobInfo, step: StepRecord) -> JobInfo:
    """``job`` with a numbered step's values, for that step's line."""
    nodes = expand_hostlist(step.nodelist)
    return replaced(
        job,
        {
            "name": step.name,
            "state": step.state,
            # a signalled step reads 0:N, as a job does (its 128+N is srun's exit code)
            "exit_code": 0 if step.exit_signal else step.exit_code,
            "exit_signal": step.exit_signal,
            "cancelled_by": step.cancelled_by,  # scancel JOB.N's
            "nodes": nodes,
            "node_count": len(nodes),
            "ntasks": step.ntasks,
            "start_time": step.start_time,
            "end_time": step.end_time,
            "max_rss_bytes": step.max_rss_bytes,
            "cpu_seconds": step.total_cpu_seconds,
            "user_cpu_seconds": step.user_cpu_seconds,
            "system_cpu_seconds": step.system_cpu_seconds,
            "gpu_usage": None,  # the job's GPU samples are its batch step's (the step's: _usage)
        },
    )


def table_lines(
    fields: Sequence[tuple[str, int, object]],
    rows: list[list[str]],
    *,
    parsable: str,
    header: bool,
    delimiter: str = "|",
) -> list[str]:
    """sacct's (and sstat's) output: Slurm's print_fields, the titles aligned and cut
    as the values are and a blank after every column."""
    columns = [(title, width) for title, width, _ in fields]
    return print_fields(
        columns,
        rows,
        header=header,
        parsable=parsable,
        titles_as_values=True,
        trailing_blank=True,
        delimiter=delimiter,
    )
