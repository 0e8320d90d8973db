"""``srun`` inside a batch job: job steps, on the batch node or across the job's nodes.

Inside a job (``SLURM_JOB_ID`` set) ``srun [options] CMD ARGS`` runs CMD as Slurm's srun
does, its tasks laid out by ``hal.core.steps.step_layout`` from ``-N``, ``-n``,
``--ntasks-per-node`` and ``-w`` (without them: the job's whole allocation with
``SLURM_NTASKS`` tasks, which srun reads as ``-n``, srun.1 INPUT ENVIRONMENT VARIABLES):

- a step that stays on the batch node (a one-node job; ``-N1``, ``-n1``) runs here, its
  tasks srun's children with ``SLURM_PROCID``/``SLURM_LOCALID`` set, and srun exits with
  the highest exit code. It is recorded as a job step all the same (``JOB.N`` in sacct,
  ``hal.compat.local_step``): one request to the server before, one after; a server out
  of reach is said on stderr and the command runs regardless. Workflow tools that wrap
  their in-job command in ``srun -n1 ...`` (Snakemake's Slurm executor does) keep
  working.
- a step that needs other nodes is a **job step** (ADR 0012): srun asks the control plane
  (``POST /v1/jobs/{id}/steps``), whose agents start each node's tasks with Slurm's step
  variables; srun writes the tasks' stdout and stderr to its own as they come (``-l``:
  each line prefixed ``RANK: ``), forwards SIGINT/SIGTERM/... to the step, and exits
  with the highest task's exit code (128+N for a signal N). A step the allocation cannot
  hold is refused as Slurm's srun refuses it ("srun: error: Unable to create step ...").

Under ``salloc`` (``HAL_SALLOC_JOB_ID`` equal to ``SLURM_JOB_ID``) srun runs on the host
salloc was started on, not on the allocation's first node: every step, one-node ones
too, is a job step created through the control plane.

``srun --jobid=N`` from elsewhere (a login shell, or another job) runs the step in
running job N, the caller's own, as srun under salloc does: every step through the
control plane, laid out within N's allocation (``hal.compat.steps.run_in_job``). A job
that is not running, not found or another user's is refused as Slurm's srun refuses it
(``Unable to confirm allocation for job N: ...``).

Without ``--jobid``, outside a job (or an allocation) it refuses: it does not make an
allocation of its own; ``salloc`` does (``salloc --no-shell`` leaves one to use with
``--jobid``).

Options are parsed as srun's getopt does (``-ln2``, ``--ntasks 2``, ``--`` before the
command). Values HAL does not act on (``--time``, ``--mem``, ``--gres``...) are still
checked as sbatch checks them, so a typo is an error rather than silently ignored. Signals
srun receives while local tasks run (SIGINT, SIGTERM, SIGUSR1...) are passed on to every
task, as Slurm's srun forwards them, so no task outlives it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from hal.compat.names import SALLOC_JOB_VARIABLE
from hal.compat.options import RESOURCE_OPTIONS, Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError, InvalidRequest
from hal.core.slurm_syntax import (
    expand_hostlist,
    parse_gpus,
    parse_gres,
    parse_memory,
    parse_nodes,
    parse_time_limit,
)
from hal.core.steps import StepRequest, step_layout

# dest → how its value is checked; every value is checked even where HAL ignores it
_CHECKS: dict[str, Callable[[str], object]] = {
    "time": parse_time_limit,
    "mem": lambda v: parse_memory(v, field="mem"),
    "mem_per_cpu": lambda v: parse_memory(v, field="mem-per-cpu"),
    "mem_per_gpu": lambda v: parse_memory(v, field="mem-per-gpu"),
    "gres": parse_gres,
    "gpus": parse_gpus,
    "gpus_per_node": lambda v: parse_gpus(v, field="gpus-per-node"),
    "gpus_per_task": lambda v: parse_gpus(v, field="gpus-per-task"),
}

OPTIONS = (
    *RESOURCE_OPTIONS,
    Opt("mpi", ("mpi",)),
    Opt("cpu_bind", ("cpu-bind",)),
    Opt("label", ("label",), "l", Arg.NONE),
    Opt("unbuffered", ("unbuffered",), "u", Arg.NONE),
    Opt("exclusive", ("exclusive",), arg=Arg.OPTIONAL),
    Opt("kill_on_bad_exit", ("kill-on-bad-exit",), "K", Arg.OPTIONAL),
    Opt("quiet", ("quiet",), "Q", Arg.NONE),
    Opt("overlap", ("overlap",), arg=Arg.NONE),
    Opt("exact", ("exact",), arg=Arg.NONE),
    Opt("pty", ("pty",), arg=Arg.NONE),  # known, to refuse it with a reason
    Opt("nodelist", ("nodelist",), "w"),
    Opt("jobid", ("jobid",)),
)
_COUNTS = frozenset({"ntasks", "cpus_per_task", "ntasks_per_node"})  # positive integers


@dataclass(frozen=True, slots=True)
class Invocation:
    request: StepRequest
    command: list[str]
    label: bool  # -l: prefix each line with its task's rank
    node_range: tuple[int, int] | None = None  # -N MIN-MAX
    jobid: int | None = None  # --jobid: the running job to run the step in

    def within(self, allocated: int) -> StepRequest:
        """The request with ``-N MIN-MAX`` made a count: as many of the job's nodes as
        the range allows (MIN when the job has fewer, which is then refused)."""
        if self.node_range is None:
            return self.request
        low, high = self.node_range
        count = min(high, allocated) if allocated >= low else low
        return dataclasses.replace(self.request, nodes=count)


def parse_command(argv: list[str]) -> Invocation:
    """What srun was asked; raises ``OptionError`` or ``InvalidRequest``."""
    parsed = parse_options(argv, OPTIONS, stop_at_positional=True)
    counts: dict[str, int] = {}
    node_range: tuple[int, int] | None = None
    nodelist: tuple[str, ...] = ()
    label = False
    jobid: int | None = None
    for dest, value, spelled in parsed.values:
        if dest == "pty":
            raise InvalidRequest(
                "--pty is not supported: HAL's srun has no interactive terminal sessions; "
                "run the command without --pty"
            )
        if dest == "label":
            label = True
        if value is None:
            continue
        if dest in _COUNTS or dest == "jobid":
            if not value.strip().isdigit() or int(value) < 1:
                raise InvalidRequest(f"{spelled} needs a positive integer, got {value!r}")
            if dest == "jobid":
                jobid = int(value)
            else:
                counts[dest] = int(value)
        elif dest == "nodes":
            node_range = parse_nodes(value)
        elif dest == "nodelist":
            nodelist = tuple(expand_hostlist(value, field="nodelist"))
        elif dest in _CHECKS:
            _CHECKS[dest](value)
    command = list(parsed.positionals)
    if not command:
        raise InvalidRequest(
            "no command to run: write srun [options] COMMAND [ARGS], e.g. srun -n2 hostname"
        )
    request = StepRequest(
        nodes=node_range[0] if node_range else None,
        ntasks=counts.get("ntasks"),
        ntasks_per_node=counts.get("ntasks_per_node"),
        nodelist=nodelist,
    )
    return Invocation(request, command, label, node_range, jobid)


def srun(argv: list[str], console: Console) -> int:
    env = console.environ
    try:
        call = parse_command(argv)
    except OptionError as err:
        return console.error(err.for_command("srun"))
    except HalError as err:
        return console.error(err.message)
    if call.jobid is not None and env.get("SLURM_JOB_ID") != str(call.jobid):
        # another job than the one srun runs in (if any): a step of it from outside
        from hal.compat.steps import run_in_job

        return run_in_job(call.jobid, call, console)
    if "SLURM_JOB_ID" not in env:
        return console.error(
            "HAL's srun runs a command inside a batch job or an allocation only (it "
            "makes none of its own): run it under `salloc -N2 ...`, in a running job of "
            "yours with `srun --jobid=N ...` (`salloc --no-shell` makes one), or submit "
            "the work with `sbatch`"
        )
    under_salloc = env.get(SALLOC_JOB_VARIABLE) == env["SLURM_JOB_ID"]
    job_tasks = env.get("SLURM_NTASKS", "")
    here = env.get("SLURMD_NODENAME", "")
    try:
        job_id = int(env["SLURM_JOB_ID"])
        nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST", ""), field="SLURM_JOB_NODELIST")
        nodes = nodes or [here]
        layout = step_layout(
            call.within(len(nodes)),
            job_id,
            nodes,
            int(job_tasks) if job_tasks.isdigit() and int(job_tasks) > 0 else 1,
        )
    except ValueError:
        return console.error(f"SLURM_JOB_ID={env['SLURM_JOB_ID']!r} is no job id")
    except HalError as err:
        return console.error(err.message)
    if under_salloc or (len(nodes) > 1 and layout.nodes != (here,)):
        from hal.compat.steps import run_step

        return run_step(job_id, call.within(len(nodes)), call, console)
    from hal.compat.local_step import run_local

    return run_local(job_id, layout.nodes[0], layout.ntasks, call.command, console)
