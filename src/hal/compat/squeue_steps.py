"""``squeue -s`` (``--steps[=LIST]``) and ``scontrol show step``: the running job steps.

Every running step is listed (``GET /v1/steps``): those srun runs on the batch node itself
and those the agents run across the job's nodes (ADR 0012). The default layout is Slurm's
for steps, ``%.15i %.8j %.9P %.8u %.9M %N`` (squeue.1), whose ``%i`` is the step id
``JOB.N``; ``-o`` takes those letters. ``-j``, ``-u``, ``-p`` and ``-w`` filter as for
jobs, ``--steps=12.0,13.1`` names steps. A step's partition and user are its job's, its
TIME runs from its start (a suspended job's time counts, as Slurm's squeue says of steps).
"""

from __future__ import annotations

from collections.abc import Callable

from hal.compat.formats import Field, duration_short, memory_mib, render_rows, timestamp
from hal.compat.job_fields import print_records, user_field
from hal.compat.seam import Console
from hal.slurm.syntax import compress_hostlist
from hal.wire.jobs import JobInfo
from hal.wire.steps import StepInfo

STEP_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"

StepColumn = Callable[[StepInfo, JobInfo, float], str]
STEP_LETTERS: dict[str, tuple[str, StepColumn]] = {
    "i": ("STEPID", lambda s, j, n: f"{j.display_id}.{s.step_id}"),
    "j": ("NAME", lambda s, j, n: s.name),
    "P": ("PARTITION", lambda s, j, n: j.partition),
    "u": ("USER", lambda s, j, n: j.user),
    "M": ("TIME", lambda s, j, n: duration_short(max(n - s.start_time, 0.0))),
    "N": ("NODELIST", lambda s, j, n: compress_hostlist(s.nodes)),
    "D": ("NODES", lambda s, j, n: str(len(s.nodes))),  # (squeue's %D, for steps too)
    "A": ("TASKS", lambda s, j, n: str(sum(s.tasks))),  # squeue's %A: a step's tasks
    "T": ("STATE", lambda s, j, n: s.state),
}


def step_lines(
    layout: list[Field | str],
    steps: list[tuple[StepInfo, JobInfo]],
    now: float,
    *,
    header: bool,
) -> list[str]:
    letters = {part.letter for part in layout if isinstance(part, Field)}
    titles = {letter: STEP_LETTERS[letter][0] for letter in letters}
    rows = [
        {letter: STEP_LETTERS[letter][1](step, job, now) for letter in letters}
        for step, job in steps
    ]
    return render_rows(layout, titles, rows, header=header, uncut=_uncut, whole_titles=("N",))


def _uncut(letter: str, value: str) -> bool:
    """A right-aligned node list or run time is padded, never cut (``%.3N``, ``%.2M``), as
    Slurm 22.05.8's squeue prints a step's (print.c passes them with cut_output false)."""
    return letter == "N" or (letter == "M" and value[:1].isdigit())


def running_steps(console: Console) -> list[tuple[StepInfo, JobInfo]]:
    """Every running step with its job, by job and step id."""
    client = console.client
    steps = client.running_steps()
    if not steps:
        return []
    ids = sorted({str(s.job_id) for s in steps})
    jobs = {j.id: j for j in client.jobs(ids=ids, include_finished=True)}
    return [(s, jobs[s.job_id]) for s in steps if s.job_id in jobs]


def show_step(target: str | None, console: Console, *, oneliner: bool) -> int:
    """``scontrol show step [JOB.N]``: the running step's record (all running ones
    without an id); an id that names no running step is said, exit 1."""
    found = running_steps(console)
    if target:
        found = [(s, j) for s, j in found if target in (f"{j.display_id}.{s.step_id}",
                                                          f"{j.id}.{s.step_id}", j.display_id,
                                                          str(j.id))]  # fmt: skip
        if not found:
            console.out(f"Job step {target} not found")
            return 1
    if not found:
        console.out("No job steps in the system")
        return 0
    print_records([step_record(step, job) for step, job in found], console, oneliner=oneliner)
    return 0


def step_record(step: StepInfo, job: JobInfo) -> list[str]:
    """A step as ``scontrol show step`` prints it, a line each: the fields HAL knows
    (Slurm's also has Network, ResvPorts, CPUFreqReq, Dist, SrunHost:Pid). ``CPUs`` and
    ``TRES`` count the job's CPUs and memory the step holds (with ``--overlap``: would
    hold), as Slurm 22.05.8's."""
    nodes = len(step.nodes)
    return [
        f"StepId={job.display_id}.{step.step_id} UserId={user_field(job.user)} "
        f"StartTime={timestamp(step.start_time, 'Unknown')} TimeLimit=UNLIMITED",
        f"State={step.state} Partition={job.partition} NodeList={compress_hostlist(step.nodes)}",
        f"Nodes={nodes} CPUs={step.cpu_count} Tasks={sum(step.tasks)} Name={step.name}",
        f"TRES=cpu={step.cpu_count},mem={memory_mib(step.memory_bytes)},node={nodes}",
    ]
