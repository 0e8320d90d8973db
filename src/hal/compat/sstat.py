"""The ``sstat`` command: what a running job's steps use now.

Each node's agent samples the batch step's processes and every job step task's with
every heartbeat (resident memory summed over a task's processes, as Slurm's
``jobacct_gather/linux``, and their CPU time), so the figures are at most a heartbeat
old. As Slurm's, ``sstat -j 123`` shows the job's lowest-numbered running step (``srun``
across the job's nodes, ADR 0012), ``-a`` every running step with the batch step, and
``123.4`` or ``123.batch`` that one; a job running no numbered step shows its batch step
(Slurm's shows nothing there). A step srun ran on the batch node itself (a one-node
job's ``srun cmd``) is measured within the batch step, not apart. A step's figures are
over its tasks: the most memory and the task and node that used it, the least CPU time
and whose, the averages, the number of tasks. The fields are those of Slurm's sstat that
HAL measures; VM size, pages, disk, energy and CPU frequency are not measured and are
refused by name. An ended job's figures are in ``sacct``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from hal.client.records import Record
from hal.compat.formats import cpu_time, memory_kib, tres_usage
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.sacct import parse_columns, table_lines
from hal.compat.seam import Console
from hal.core.errors import HalError, InvalidRequest, NotFound

TYPE_CHECKING = False  # (the wire schemas, for annotations: commands read records)
if TYPE_CHECKING:
    from hal.wire.jobs import JobInfo
    from hal.wire.steps import StepInfo, TaskUsage

DEFAULT_FIELDS = (
    "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks"
)
_ID = re.compile(r"^(\d+(?:_\d+|\+\d+)?)(?:\.(batch|\d+|extern))?$")  # 123, 123_4.batch


@dataclass(frozen=True, slots=True)
class Line:
    """One step's line: its id, its tasks' latest samples (none yet: blank figures)."""

    jobid: str
    ntasks: int
    tasks: list[TaskUsage]


LineColumn = Callable[[Line], str]


def _sampled(get: Callable[[list[TaskUsage]], str]) -> LineColumn:
    """A figure of the agents' samples: blank until the first one came."""
    return lambda line: get(line.tasks) if line.tasks else ""


def _most_rss(tasks: list[TaskUsage]) -> TaskUsage:
    return max(tasks, key=lambda t: (t.max_rss_bytes, -t.rank))


def _least_cpu(tasks: list[TaskUsage]) -> TaskUsage:
    return min(tasks, key=lambda t: (t.cpu_seconds, t.rank))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _usage_max(tasks: list[TaskUsage]) -> str:
    """TRESUsageInMax: each TRES's most over the tasks (and over the samples)."""
    gpus = [t.gpu for t in tasks if t.gpu is not None]
    return tres_usage(
        max(t.cpu_seconds for t in tasks),
        max(t.max_rss_bytes for t in tasks),
        max(g.max_mem_bytes for g in gpus) if gpus else None,
        max(g.max_util for g in gpus) if gpus else None,
    )


def _usage_ave(tasks: list[TaskUsage]) -> str:
    """TRESUsageInAve: each TRES's mean over the tasks (the batch step's one task: its
    most memory, as Slurm's); a task's GPU utilisation is the mean of its samples (how
    busy its GPUs were since it started; Slurm averages over tasks only)."""
    gpus = [t.gpu for t in tasks if t.gpu is not None]
    return tres_usage(
        _mean([t.cpu_seconds for t in tasks]),
        int(_mean([float(t.rss_bytes) for t in tasks])),
        int(_mean([float(g.max_mem_bytes) for g in gpus])) if gpus else None,
        _mean([g.ave_util for g in gpus]) if gpus else None,
    )


FIELDS: dict[str, tuple[str, int, LineColumn]] = {
    "jobid": ("JobID", -12, lambda line: line.jobid),
    "maxrss": ("MaxRSS", 10, _sampled(lambda t: memory_kib(_most_rss(t).max_rss_bytes))),
    "maxrssnode": ("MaxRSSNode", -10, _sampled(lambda t: _most_rss(t).node)),
    "maxrsstask": ("MaxRSSTask", 10, _sampled(lambda t: str(_most_rss(t).rank))),
    "averss": (
        "AveRSS",
        10,
        _sampled(lambda t: memory_kib(int(_mean([float(u.rss_bytes) for u in t])))),
    ),
    "mincpu": ("MinCPU", 10, _sampled(lambda t: cpu_time(_least_cpu(t).cpu_seconds))),
    "mincpunode": ("MinCPUNode", -10, _sampled(lambda t: _least_cpu(t).node)),
    "mincputask": ("MinCPUTask", 10, _sampled(lambda t: str(_least_cpu(t).rank))),
    "avecpu": ("AveCPU", 10, _sampled(lambda t: cpu_time(_mean([u.cpu_seconds for u in t])))),
    "ntasks": ("NTasks", 8, lambda line: str(line.ntasks)),
    "tresusageinmax": ("TRESUsageInMax", 14, _sampled(_usage_max)),
    "tresusageinave": ("TRESUsageInAve", 14, _sampled(_usage_ave)),
}

OPTIONS = (
    Opt("jobs", ("jobs",), "j"),
    Opt("format", ("format", "fields"), "o"),
    Opt("allsteps", ("allsteps",), "a", Arg.NONE),  # every running step, batch too
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
    fields_text, parsable, header, every = DEFAULT_FIELDS, "", True, False
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
        elif dest == "allsteps":
            every = True
    ids += parsed.positionals
    try:
        fields = parse_columns(fields_text, FIELDS, "sstat")
        asked = [_parse(item) for item in ids]
        if not asked:
            raise InvalidRequest("--jobs is required: sstat -j 123 (a running job)", field="jobs")
        ids_asked = list(dict.fromkeys(base for base, _ in asked))
        jobs = console.client.jobs(ids=ids_asked, validate=False)
    except NotFound:
        jobs = []
    except HalError as err:
        return console.error(err.message)
    lines: list[Line] = []
    for job in sorted(jobs, key=lambda j: j.id):
        if job.state not in ("RUNNING", "SUSPENDED"):
            continue
        wanted = {step for base, step in asked if base in (job.display_id, str(job.id))}
        try:
            lines += _lines(job, wanted, every, console)
        except HalError as err:
            return console.error(err.message)
    if not lines:
        return console.error(
            f"no running job or step among {','.join(ids)}: sstat reads running ones "
            "(`sacct -j ID -o JobID,MaxRSS,TotalCPU` has ended ones)"
        )
    rows = [[column(line) for _, _, column in fields] for line in lines]
    for text in table_lines(fields, rows, parsable=parsable, header=header):
        console.out(text)
    return 0


def _lines(job: JobInfo, wanted: set[str], every: bool, console: Console) -> list[Line]:
    """The lines ``wanted`` of ``job`` ("": the job as a whole; "batch"; a step id)."""
    # (a step srun runs on the batch node itself is not sampled apart: its tasks are
    # the batch script's children, counted in the batch step's figures)
    found = console.client.job_steps(job.id, validate=False) if job.id else []
    steps = {str(s.step_id): s for s in found if not s.local}
    batch = _batch(job)
    picked: dict[str, Line] = {}
    for want in sorted(wanted, key=lambda w: (w != "batch", int(w) if w.isdigit() else -1)):
        if want == "batch":
            picked["batch"] = batch
        elif want:
            if want in steps:
                picked[want] = _step(job, steps[want])
        elif every:  # -a: the batch step and every running step
            picked["batch"] = batch
            picked.update((n, _step(job, s)) for n, s in steps.items())
        elif steps:  # Slurm's: the lowest-numbered running step
            low = min(steps, key=int)
            picked[low] = _step(job, steps[low])
        else:  # HAL's: a job running no step shows its batch step (Slurm's: nothing)
            picked["batch"] = batch
    order = sorted(picked, key=lambda n: (n != "batch", int(n) if n.isdigit() else -1))
    return [picked[n] for n in order]


def _batch(job: JobInfo) -> Line:
    node = job.nodes[0] if job.nodes else ""
    tasks: list[TaskUsage] = []
    if job.usage_time is not None:  # one task: its maximum, minimum and average its own
        tasks = [
            cast(  # (a record of a TaskUsage's attributes, as the steps' records are)
                "TaskUsage",
                Record(
                    rank=0,
                    node=node,
                    rss_bytes=job.max_rss_bytes,
                    max_rss_bytes=job.max_rss_bytes,
                    cpu_seconds=job.cpu_seconds,
                    gpu=job.gpu_usage,
                ),
            )
        ]
    return Line(f"{job.display_id}.batch", 1, tasks)


def _step(job: JobInfo, step: StepInfo) -> Line:
    return Line(f"{job.display_id}.{step.step_id}", sum(step.tasks), list(step.usage))


def _parse(item: str) -> tuple[str, str]:
    """``123``, ``123.batch``, ``123.4``, ``123_4``, ``123+1`` → (the job to ask for, the
    step: "" for the job's default)."""
    match = _ID.match(item)
    if match is None:
        raise InvalidRequest(
            f"Bad job/step specified: {item}; write 123, 123_4 (an array element), "
            "123.batch or 123.4 (a step)",
            field="jobs",
        )
    if match.group(2) == "extern":
        raise InvalidRequest(
            f"job step {item} does not exist: HAL runs no extern step; use "
            f"{match.group(1)}.batch or a numbered step",
            field="jobs",
        )
    return match.group(1), match.group(2) or ""
