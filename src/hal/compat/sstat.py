"""The ``sstat`` command: what a running job uses now.

Each job's agent samples the batch step's processes with every heartbeat (resident
memory summed over them, as Slurm's ``jobacct_gather/linux``, and their CPU time), so the
figures are at most a heartbeat old. HAL runs one step per job, the batch step, so
``sstat -j 123`` shows ``123.batch`` (Slurm's would look for a numbered step and show
nothing for a job without one). The fields are those of Slurm's sstat that HAL measures;
VM size, pages, disk, energy and CPU frequency are not measured and are refused by name.
An ended job's figures are in ``sacct``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from hal.compat.formats import cpu_time, memory_kib
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.sacct import Column, parse_fields, table_lines
from hal.compat.seam import Console
from hal.core.errors import HalError, InvalidRequest, NotFound
from hal.wire.jobs import JobInfo

DEFAULT_FIELDS = (
    "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks"
)
_ID = re.compile(r"^(\d+(?:_\d+|\+\d+)?)(?:\.(batch|\d+|extern))?$")  # 123, 123_4.batch


def _sampled(get: Callable[[JobInfo], str]) -> Column:
    """A figure of the agent's sample: blank until the first one came."""
    return lambda job, step, now: get(job) if job.usage_time is not None else ""


def _first_node(job: JobInfo) -> str:
    return job.nodes[0] if job.nodes else ""


# one task per batch step: its maximum, minimum and average are the task's own
FIELDS: dict[str, tuple[str, int, Column]] = {
    "jobid": ("JobID", -12, lambda j, s, n: f"{j.display_id}.batch"),
    "maxrss": ("MaxRSS", 10, _sampled(lambda j: memory_kib(j.max_rss_bytes))),
    "maxrssnode": ("MaxRSSNode", -10, _sampled(_first_node)),
    "maxrsstask": ("MaxRSSTask", 10, _sampled(lambda j: "0")),
    "averss": ("AveRSS", 10, _sampled(lambda j: memory_kib(j.max_rss_bytes))),
    "mincpu": ("MinCPU", 10, _sampled(lambda j: cpu_time(j.cpu_seconds))),
    "mincpunode": ("MinCPUNode", -10, _sampled(_first_node)),
    "mincputask": ("MinCPUTask", 10, _sampled(lambda j: "0")),
    "avecpu": ("AveCPU", 10, _sampled(lambda j: cpu_time(j.cpu_seconds))),
    "ntasks": ("NTasks", 8, lambda j, s, n: "1"),
}

OPTIONS = (
    Opt("jobs", ("jobs",), "j"),
    Opt("format", ("format", "fields"), "o"),
    Opt("allsteps", ("allsteps",), "a", Arg.NONE),  # every step: HAL's one batch step
    Opt("noheader", ("noheader",), "n", Arg.NONE),
    Opt("parsable", ("parsable",), "p", Arg.NONE),
    Opt("parsable2", ("parsable2",), "P", Arg.NONE),
    Opt("helpformat", ("helpformat",), "e", Arg.NONE),
    Opt("help", ("help",), "h", Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
)


def sstat(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sstat"))
    ids: list[str] = []
    fields_text, parsable, header = DEFAULT_FIELDS, "", True
    for dest, value, _spelled in parsed.values:
        if dest in ("help", "usage", "helpformat"):
            console.out(" ".join(title for title, _, _ in FIELDS.values()))
            return 0
        if dest == "jobs":
            ids += [item.strip() for item in (value or "").split(",") if item.strip()]
        elif dest == "format":
            fields_text = value or ""
        elif dest == "noheader":
            header = False
        elif dest in ("parsable", "parsable2"):
            parsable = "trailing" if dest == "parsable" else "plain"
    ids += parsed.positionals
    try:
        fields = parse_fields(fields_text, FIELDS, "sstat")
        bases = [_job_of(item) for item in ids]
        if not bases:
            raise InvalidRequest("--jobs is required: sstat -j 123 (a running job)", field="jobs")
        jobs = console.client.jobs(ids=bases)
    except NotFound:
        jobs = []
    except HalError as err:
        return console.error(err.message)
    now = console.clock()
    running = sorted((j for j in jobs if j.state in ("RUNNING", "SUSPENDED")), key=lambda j: j.id)
    rows = [[column(job, "batch", now) for _, _, column in fields] for job in running]
    if not rows:
        return console.error(
            f"no running job among {','.join(ids)}: sstat reads running jobs "
            "(`sacct -j ID -o JobID,MaxRSS,TotalCPU` has ended ones)"
        )
    for line in table_lines(fields, rows, parsable=parsable, header=header):
        console.out(line)
    return 0


def _job_of(item: str) -> str:
    """``123``, ``123.batch``, ``123_4``, ``123+1`` → the job to ask for; HAL's jobs run
    no numbered steps."""
    match = _ID.match(item)
    if match is None:
        raise InvalidRequest(
            f"Bad job/step specified: {item}; write 123, 123_4 (an array element) or 123.batch",
            field="jobs",
        )
    if match.group(2) not in (None, "batch"):
        raise InvalidRequest(
            f"job step {item} does not exist: HAL runs one step per job, {match.group(1)}.batch",
            field="jobs",
        )
    return match.group(1)
