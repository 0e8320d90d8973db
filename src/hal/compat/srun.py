"""``srun``: job steps, on the batch node or across the job's nodes; outside a job, in
an allocation of its own.

Inside a job (``SLURM_JOB_ID`` set) ``srun [options] CMD ARGS`` runs CMD as Slurm's srun
does, its tasks laid out by ``hal.slurm.steps.step_layout`` from ``-N``, ``-n``,
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

``--export`` (or ``SLURM_EXPORT_ENV``, which ``sbatch --export`` sets) picks which of
srun's variables the tasks get, as Slurm's srun reads it (``hal.compat.exports``).

``-m``/``--distribution`` (or ``SLURM_DISTRIBUTION``) deals the ranks to the nodes
(``hal.slurm.distribution``); ``--multi-prog CONF`` runs each rank's own line of CONF
(``hal.slurm.multi_prog``: a rank without one is refused before anything starts); in a
het job, ``--het-group=N`` runs the step in component N (``hal.compat.srun_inputs``).

Under ``salloc`` (``HAL_SALLOC_JOB_ID`` equal to ``SLURM_JOB_ID``) srun runs on the host
salloc was started on, not on the allocation's first node: every step, one-node ones
too, is a job step created through the control plane.

``srun --jobid=N`` from elsewhere (a login shell, or another job) runs the step in
running job N, the caller's own, as srun under salloc does: every step through the
control plane, laid out within N's allocation (``hal.compat.steps.run_in_job``). A job
that is not running, not found or another user's is refused as Slurm's srun refuses it
(``Unable to confirm allocation for job N: ...``).

Without ``--jobid``, outside a job (or an allocation), it makes an allocation of its own
and runs the command as its step, as Slurm's srun does (``hal.compat.srun_alloc``).

``--signal=[R:]SIG[@secs]`` (``SLURM_SIGNAL``), ``-k``/``--no-kill[=off]``
(``SLURM_NO_KILL``), ``--priority=N|TOP`` and ``--exclusive=user`` shape that
allocation as sbatch's do (SIG goes to the step secs before the allocation's time
limit); in a job they are checked and change nothing, as Slurm 22.05.8's srun takes
them there (docs/slurm-checks.md). ``B:`` is refused, as srun has no batch
shell.

Options are parsed as srun's getopt does (``-ln2``, ``--ntasks 2``, ``--`` before the
command). ``--gpus``, ``--gpus-per-node``, ``--gres=gpu:N`` and ``--gpus-per-task`` give
the step GPUs of its own among the job's: such a step is always a job step, on the batch
node too, so that its node's agent binds it to them (srun, the job's user, cannot), and
while the job's other steps hold them srun waits, as Slurm's ("step creation temporarily
disabled, retrying"). Every step holds the job's CPUs while it runs, as Slurm 22.05's:
all of them on its nodes, only its tasks' with ``--exact``, ``--exclusive`` or ``-c``
(``SRUN_CPUS_PER_TASK``), none with ``--overlap``; srun waits for them the same way,
on the batch node too (``hal.slurm.steps.step_cpu_counts``), and the job's memory
(``--mem``, ``--mem-per-cpu``, else all of it or the job's ``--mem-per-cpu`` for each of
its CPUs: ``step_memory_asks``), and ends at its own ``-t`` (SIGTERM, SIGKILL KillWait
later, slurmstepd's and srun's lines). Values HAL does not act on (``--mem-per-gpu``...)
are still checked as sbatch checks them, so a typo is an error rather than silently
ignored. Signals srun receives while local tasks run (SIGINT,
SIGTERM, SIGUSR1...) are passed on to every task, as Slurm's srun forwards them, so no
task outlives it.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hal.compat import job_options
from hal.compat.exports import EXPORT_VARIABLE, step_environment
from hal.compat.names import SALLOC_JOB_VARIABLE
from hal.compat.options import HINT_OPTIONS, RESOURCE_OPTIONS, Arg, Opt, OptionError, parse_options
from hal.compat.sbatch import nodes_for_tasks
from hal.compat.seam import Console
from hal.compat.srun_inputs import multi_prog_tasks, read_multi_prog, step_job
from hal.compat.srun_output import OutputRequest, parse_open_mode
from hal.compat.srun_pty import wants_terminal
from hal.compat.time_limits import command_time_limit
from hal.compat.version import VERSION_LINE, asks_version
from hal.core.errors import HalError, InvalidRequest
from hal.slurm.distribution import parse_distribution
from hal.slurm.multi_prog import MultiProg
from hal.slurm.steps import StepRequest, step_layout
from hal.slurm.syntax import (
    expand_hostlist,
    parse_gpus,
    parse_gres,
    parse_memory,
    parse_nodes,
    parse_signal,
)

# dest → how its value is checked; every value is checked even where HAL ignores it
# (the GPU options below too)
_CHECKS: dict[str, Callable[[str], object]] = {
    "mem_per_gpu": lambda v: parse_memory(v, field="mem-per-gpu"),
    "signal": lambda v: parse_signal(v, batch=False),  # (srun has no B:)
    "no_kill": job_options.no_kill,
    "priority": job_options.priority,
}

# the step's memory (``StepRequest``'s field of the same name), in bytes
_MEMORY_OPTIONS = {"mem": "mem_per_node", "mem_per_cpu": "mem_per_cpu"}

# options giving the step its own GPUs: dest → ``StepRequest``'s field (--gres is per
# node) and how the value reads, (GPU type, count)
_GPU_OPTIONS: dict[str, tuple[str, Callable[[str], tuple[str | None, int]]]] = {
    "gpus": ("gpus", parse_gpus),
    "gpus_per_node": ("gpus_per_node", lambda v: parse_gpus(v, field="gpus-per-node")),
    "gres": ("gpus_per_node", parse_gres),
    "gpus_per_task": ("gpus_per_task", lambda v: parse_gpus(v, field="gpus-per-task")),
}

# Accepted with no effect on a step in a job, for the MPI launchers and scripts that pass
# them (Slurm 22.05.8 takes each inside a job): what shapes a new allocation
# (HAL's srun makes none), srun's own chatter and status, and defaults HAL already has
# (tasks inherit srun's limits: --propagate; no task is ended for another's exit: -W 0).
NO_EFFECT = (
    Opt("partition", ("partition",), "p"),
    Opt("account", ("account",), "A"),
    Opt("qos", ("qos",), "q"),
    Opt("reservation", ("reservation",)),
    Opt("dependency", ("dependency",), "d"),
    Opt("begin", ("begin",), "b"),
    Opt("immediate", ("immediate",), "I", Arg.OPTIONAL),
    Opt("comment", ("comment",)),
    Opt("verbose", ("verbose",), "v", Arg.NONE),
    Opt("wait", ("wait",), "W"),
    Opt("disable_status", ("disable-status",), "X", Arg.NONE),
    *HINT_OPTIONS,
    Opt("overcommit", ("overcommit",), "O", Arg.NONE),
    Opt("network", ("network",)),
    Opt("contiguous", ("contiguous",), arg=Arg.NONE),
    # a step's CPUs are all of the job's on its nodes already (Slurm 22.05's default)
    Opt("whole", ("whole",), arg=Arg.NONE),
)

OPTIONS = (
    *RESOURCE_OPTIONS,
    *NO_EFFECT,
    Opt("mpi", ("mpi",)),
    Opt("cpu_bind", ("cpu-bind", "cpu_bind")),  # (Open MPI 4 spells it cpu_bind)
    Opt("chdir", ("chdir",), "D"),
    Opt("input", ("input",), "i"),
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
    Opt("distribution", ("distribution",), "m"),
    Opt("multi_prog", ("multi-prog",), arg=Arg.NONE),
    Opt("het_group", ("het-group",)),
    Opt("output", ("output",), "o"),
    Opt("error", ("error",), "e"),
    Opt("open_mode", ("open-mode",)),
    # what only srun's own allocation takes (outside a job: ``hal.compat.srun_alloc``)
    Opt("constraint", ("constraint",), "C"),
    Opt("exclude", ("exclude",), "x"),
    Opt("licenses", ("licenses",), "L"),
    Opt("artifact", ("artifact",)),
    Opt("container", ("container",)),
    Opt("python_env", ("python-env",)),
    Opt("near", ("near",)),
    Opt("apart", ("apart",)),
    Opt("burst_after", ("burst-after",)),
    Opt("latency_sensitive", ("latency-sensitive",), arg=Arg.NONE),
    # checked, and passed on to srun's own allocation; in a job they change nothing, as
    # Slurm 22.05.8's srun takes them there (docs/slurm-checks.md)
    Opt("signal", ("signal",)),
    Opt("no_kill", ("no-kill",), "k", Arg.OPTIONAL),
    Opt("priority", ("priority",)),
)
# srun.1's input variables of those options (a command-line option wins)
ENV_OPTIONS = {"SLURM_SIGNAL": "signal", "SLURM_NO_KILL": "no_kill"}
ALLOCATION_ONLY = frozenset(
    {
        "constraint",
        "exclude",
        "licenses",
        "artifact",
        "container",
        "python_env",
        "near",
        "apart",
        "latency_sensitive",
    }
)
_COUNTS = frozenset({"ntasks", "cpus_per_task", "ntasks_per_node"})  # positive integers


@dataclass(frozen=True, slots=True)
class Invocation:
    request: StepRequest
    command: list[str]
    label: bool  # -l: prefix each line with its task's rank
    node_range: tuple[int, int] | None = None  # -N MIN-MAX
    jobid: int | None = None  # --jobid: the running job to run the step in
    multi_prog: bool = False  # --multi-prog: command[0] is the file of each rank's program
    het_group: int | None = None  # --het-group: the het job component to run in
    programs: MultiProg | None = None  # --multi-prog's file, once read
    files: OutputRequest | None = None  # -o/-e: the tasks' output files (None: srun's)
    name: str = ""  # -J: the step's name (default: its command's)
    chdir: str = ""  # -D: the tasks' working directory (default: srun's)
    kill_on_bad_exit: bool = False  # -K: a task that fails ends the others
    pty: bool = False  # --pty: refused on a terminal, disregarded without one (as Slurm)
    input: str = "all"  # -i: all, none, a task's rank, or a file name pattern
    # --export (else SLURM_EXPORT_ENV): which of srun's variables the tasks get (None: all)
    export: str | None = None
    warning: str = ""  # said before the step starts (-N above -n: "Warning: can't run ...")
    # options given that shape a new allocation only (-C, -x, -L, --artifact), as typed
    allocation_only: tuple[str, ...] = ()

    @property
    def step_name(self) -> str:
        return self.name or os.path.basename(self.command[0])

    def within(self, allocated: int) -> StepRequest:
        """The request with ``-N MIN-MAX`` made a count: as many of the job's nodes as
        the range allows (MIN when the job has fewer, which is then refused)."""
        if self.node_range is None:
            return self.request
        low, high = self.node_range
        count = min(high, allocated) if allocated >= low else low
        return dataclasses.replace(self.request, nodes=count)


def parse_command(argv: list[str], env: Mapping[str, str] | None = None) -> Invocation:
    """What srun was asked; raises ``OptionError`` or ``InvalidRequest``. ``env``:
    srun's input variables (``SLURM_DISTRIBUTION``, ``SLURM_HOSTFILE``)."""
    env = env or {}
    parsed = parse_options(argv, OPTIONS, stop_at_positional=True)
    counts: dict[str, int] = {}
    gpus: dict[str, int] = {}  # the step's own GPUs, where it asks for them
    memory: dict[str, int] = {}  # its memory, where it asks for it
    time_limit = 0  # -t, seconds (0: the job's alone)
    node_range: tuple[int, int] | None = None
    nodelist = ""
    label = multi_prog = exact = overlap = False
    jobid: int | None = None
    het_group: int | None = None
    distribution = env.get("SLURM_DISTRIBUTION", "")
    files: dict[str, str] = {}
    extra: dict[str, Any] = {}
    extra["allocation_only"] = tuple(s for d, _, s in parsed.values if d in ALLOCATION_ONLY)
    for dest, value, spelled in (*env_values(env), *parsed.values):
        if dest == "pty":
            extra["pty"] = True
        label = label or dest == "label"
        multi_prog = multi_prog or dest == "multi_prog"
        # a step's --exclusive is --exact; =user (or =oversubscribe) shapes only srun's
        # own allocation, as Slurm's srun reads it
        exact = (
            exact
            or dest == "exact"
            or (dest == "exclusive" and job_options.exclusive(value).exclusive)
        )
        overlap = overlap or dest == "overlap"
        if value is None:
            continue
        if dest == "het_group":
            if not value.strip().isdigit():
                raise InvalidRequest(
                    f"--het-group={value}: HAL's srun runs a step in one component of a het "
                    "job; give its number (--het-group=1), one srun per component"
                )
            het_group = int(value)
        elif dest == "distribution":
            distribution = value
        elif dest in ("output", "error"):
            files[dest] = value
        elif dest == "open_mode":
            files[dest] = parse_open_mode(value)
        elif dest == "job_name":
            extra["name"] = value
        elif dest == "chdir":
            extra["chdir"] = value
        elif dest == "input":
            extra["input"] = value.strip() or "all"
        elif dest == "export":
            extra["export"] = value

        elif dest in _COUNTS or dest == "jobid":
            if not value.strip().isdigit() or int(value) < 1:
                raise InvalidRequest(f"{spelled} needs a positive integer, got {value!r}")
            if dest == "jobid":
                jobid = int(value)
            else:
                counts[dest] = int(value)
        elif dest == "nodes":
            node_range = parse_nodes(value)
        elif dest == "nodelist":
            nodelist = value
        elif dest in _GPU_OPTIONS:
            key, parse = _GPU_OPTIONS[dest]
            gpus[key] = parse(value)[1]
        elif dest == "time":
            time_limit = command_time_limit(value, env)
        elif dest in _MEMORY_OPTIONS:
            memory[_MEMORY_OPTIONS[dest]] = parse_memory(value, field=dest.replace("_", "-"))
        elif dest in _CHECKS:
            _CHECKS[dest](value)
    dist = parse_distribution(distribution)
    arbitrary = dist.kind == "arbitrary"
    if not arbitrary:  # (-m arbitrary: -w's names count the tasks)
        _inherit_ntasks(counts, node_range, env, extra)
    command = list(parsed.positionals)
    if not command:
        raise InvalidRequest(
            "no command to run: write srun [options] COMMAND [ARGS], e.g. srun -n2 hostname"
        )
    per_gpu = any(dest == "mem_per_gpu" for dest, _, _ in parsed.values)
    if len(memory) + per_gpu > 1:
        raise InvalidRequest("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
    if memory.get("mem_per_cpu") == 0:  # as --mem=0 (Slurm 22.05.8: all the job's memory
        memory = {"mem_per_node": 0}  # there, SLURM_MEM_PER_NODE the job's, none held)
    if node_range is not None and "ntasks" in counts:  # as sbatch: no node without a task
        low, high, warning = nodes_for_tasks(counts["ntasks"], *node_range)
        node_range = (low, high)
        if warning:
            extra["warning"] = warning
    if arbitrary and not nodelist and env.get("SLURM_HOSTFILE"):
        nodelist = _hostfile(env["SLURM_HOSTFILE"])
    request = StepRequest(
        nodes=node_range[0] if node_range else None,
        ntasks=counts.get("ntasks"),
        ntasks_per_node=counts.get("ntasks_per_node"),
        nodelist=tuple(expand_hostlist(nodelist, field="nodelist", duplicates=arbitrary)),
        distribution=dist,
        gpus=gpus.get("gpus"),
        gpus_per_node=gpus.get("gpus_per_node"),
        gpus_per_task=gpus.get("gpus_per_task"),
        cpus_per_task=counts.get("cpus_per_task", _srun_cpus_per_task(env)),
        exact=exact,
        overlap=overlap,
        mem_per_node=memory.get("mem_per_node"),
        mem_per_cpu=memory.get("mem_per_cpu"),
        time_limit_s=time_limit,
    )
    output = OutputRequest(**files) if "output" in files or "error" in files else None
    for dest, value, _ in parsed.values:
        if dest == "kill_on_bad_exit":  # -K, -K1; -K0 turns it off
            extra["kill_on_bad_exit"] = value is None or value.strip() != "0"
    return Invocation(
        request, command, label, node_range, jobid, multi_prog, het_group, files=output, **extra
    )


def env_values(env: Mapping[str, str]) -> tuple[tuple[str, str | None, str], ...]:
    """srun's input variables (``ENV_OPTIONS``) set in ``env``, as parsed options are."""
    return tuple((dest, env[var], var) for var, dest in ENV_OPTIONS.items() if env.get(var))


def _inherit_ntasks(
    counts: dict[str, int],
    node_range: tuple[int, int] | None,
    env: Mapping[str, str],
    extra: dict[str, Any],
) -> None:
    """Without ``-n``, srun's input variable ``SLURM_NTASKS`` is its task count, as Slurm's
    srun reads it: in a job of ``-n4`` (or ``-N2 --ntasks-per-node=2``) ``srun -N2 app``
    starts 4 tasks, not one a node (Slurm sets it only where the job asked a count; HAL's
    job of one task, or of ``-N2`` alone, has 1: left to the layout's one a node). A
    ``--ntasks-per-node`` that does not match it is dropped with Slurm's warning."""
    inherited = env.get("SLURM_NTASKS", "")
    if "ntasks" in counts or not inherited.isdigit() or int(inherited) < 2:
        return
    ntasks = counts["ntasks"] = int(inherited)
    per_node = counts.get("ntasks_per_node")
    if per_node is None:
        return
    nodes = node_range[0] if node_range else int(env.get("SLURM_NNODES", "1") or 1)
    if ntasks != nodes * per_node:
        del counts["ntasks_per_node"]
        extra["warning"] = (
            f"Warning: can't honor --ntasks-per-node set to {per_node} which doesn't match "
            f"the requested tasks {ntasks} with the number of requested nodes {nodes}. "
            "Ignoring --ntasks-per-node."
        )


def _srun_cpus_per_task(env: Mapping[str, str]) -> int | None:
    """``SRUN_CPUS_PER_TASK``, srun's input for ``-c`` (Slurm 22.05's srun no longer reads
    the job's ``SLURM_CPUS_PER_TASK``)."""
    value = env.get("SRUN_CPUS_PER_TASK", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise InvalidRequest(f"SRUN_CPUS_PER_TASK needs a positive integer, got {value!r}")
    return int(value)


def _as_step(call: Invocation, console: Console) -> str:
    """What --export, -J, -c and -D change for the tasks, as Slurm's srun: they get the
    variables --export keeps (``hal.compat.exports``), ``SLURM_JOB_NAME`` is the step's
    name, ``SLURM_CPUS_PER_TASK`` the step's -c, and they run in -D (relative to srun's
    directory). Why -D cannot be used, or ""."""
    env = dict(console.environ)
    if call.export is not None:
        env = step_environment(call.export, env)
    if call.name:
        env["SLURM_JOB_NAME"] = call.name
    if call.request.cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(call.request.cpus_per_task)
    console.environ = env
    if call.chdir:
        path = os.path.normpath(os.path.join(console.cwd or os.getcwd(), call.chdir))
        if not os.path.isdir(path):
            return f"--chdir={call.chdir}: {path} is not a directory"
        console.cwd = path
    return ""


def _hostfile(path: str) -> str:
    """``SLURM_HOSTFILE`` (``-m arbitrary`` without ``-w``): a node per task, one a line
    or comma-separated."""
    try:
        with open(path) as f:
            return ",".join(f.read().split())
    except OSError as err:
        raise InvalidRequest(f"cannot read SLURM_HOSTFILE {path}: {err.strerror}") from None


# srun --mpi=list: HAL starts tasks with no PMI server of its own (--mpi=pmi2 or pmix is
# taken and not acted on), so it names none other
MPI_TYPES = "MPI plugin types are...\n\tnone"


def srun(argv: list[str], console: Console) -> int:
    env = console.environ
    if "--mpi=list" in argv or ("--mpi", "list") in itertools.pairwise(argv):
        console.out(MPI_TYPES)
        return 0
    if asks_version(argv, OPTIONS):
        console.out(VERSION_LINE)
        return 0
    try:
        call = parse_command(argv, env)
    except OptionError as err:
        return console.error(err.for_command("srun"))
    except HalError as err:
        code = console.error(err.message)
        return 255 if err.field == "distribution" else code  # (as Slurm's srun exits)
    if call.export is None and EXPORT_VARIABLE in env:  # srun's input variable
        call = dataclasses.replace(call, export=env[EXPORT_VARIABLE])
    if call.warning:
        console.err(f"srun: {call.warning}")
    refused = _as_step(call, console)
    if refused:
        return console.error(refused)
    terminal = wants_terminal(call.pty)  # (its step runs through an agent: srun_pty)
    if call.pty and not terminal:
        # as Slurm 22.05.8's srun without a terminal: said, and run
        console.error("ioctl(TIOCGWINSZ): Inappropriate ioctl for device")
        console.error("Not using a pseudo-terminal, disregarding --pty option")
    env = console.environ
    jobid = call.jobid
    if jobid is None and "SLURM_JOB_ID" not in env:  # an allocation of its own
        from hal.compat.srun_alloc import run_allocated

        return run_allocated(argv, call, console)
    if call.allocation_only:
        software = any(o.startswith(("--python-env", "--container")) for o in call.allocation_only)
        return console.error(
            f"{', '.join(call.allocation_only)}: shapes the allocation srun makes outside a "
            f"job; a step runs on its job's nodes (-w names some of them)"
            + (
                ", with the job's --python-env and --container: give them to sbatch or salloc"
                if software
                else ""
            )
        )
    if jobid is not None and env.get("SLURM_JOB_ID") != str(jobid):
        # another job than the one srun runs in (if any): a step of it from outside
        from hal.compat.steps import run_in_job

        if call.het_group is not None:
            return console.error(
                "--het-group picks a component of the het job srun runs in; from outside "
                "it, name the component's own job id in --jobid (squeue -j N shows them)"
            )
        try:
            call = with_multi_prog(call, console, 1)
        except HalError as err:
            return console.error(err.message)
        return run_in_job(jobid, call, console)
    under_salloc = env.get(SALLOC_JOB_VARIABLE) == env["SLURM_JOB_ID"]
    here = env.get("SLURMD_NODENAME", "")
    try:
        job = step_job(env, call.het_group)
        call = with_multi_prog(call, console, job.ntasks)
        request = call.within(len(job.nodes))
        layout = step_layout(request, job.job_id, job.nodes, job.ntasks)
        commands = None
        if call.programs is not None:  # (every rank covered, before anything starts)
            commands = call.programs.argv(layout.ntasks, call.command[1:])
    except ValueError:
        return console.error(f"SLURM_JOB_ID={env['SLURM_JOB_ID']!r} is no job id")
    except HalError as err:
        return console.error(err.message)
    away = len(job.nodes) > 1 and layout.nodes != (here,)
    # a step with GPUs of its own is bound to them by its node's agent, here too
    if under_salloc or away or job.component or request.asks_gpus or terminal:
        from hal.compat.steps import run_step

        return run_step(job.job_id, request, call, console)
    from hal.compat.local_step import run_local

    return run_local(job.job_id, layout, call, console, commands=commands, request=request)


def with_multi_prog(call: Invocation, console: Console, job_ntasks: int) -> Invocation:
    """``call`` with ``--multi-prog``'s file read (and the task count it implies)."""
    if not call.multi_prog:
        return call
    programs = read_multi_prog(call.command[0], console)
    ntasks = multi_prog_tasks(programs, call.request.ntasks, job_ntasks)
    request = dataclasses.replace(call.request, ntasks=ntasks)
    return dataclasses.replace(call, request=request, programs=programs)
