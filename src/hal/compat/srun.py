"""``srun`` inside a batch job: a pass-through that runs the command once per task.

HAL has no job steps yet, so this is deliberately small and says so: inside a job
(``SLURM_JOB_ID`` set) ``srun [options] CMD ARGS`` starts CMD ``--ntasks`` times on this
node with ``SLURM_PROCID``/``SLURM_LOCALID`` set per task and exits with the highest exit
code. Without ``--ntasks`` it starts the job's task count, ``SLURM_NTASKS``, which Slurm's
srun reads as ``-n`` (srun.1, INPUT ENVIRONMENT VARIABLES). Workflow tools that wrap
their in-job command in ``srun -n1 ...`` (Snakemake's Slurm executor does) work unchanged.
Outside a job it refuses: interactive allocations and MPI launch across nodes are not
implemented.

Options are parsed as srun's getopt does (``-ln2``, ``--ntasks 2``, ``--`` before the
command). Values HAL does not act on (``--time``, ``--mem``, ``--gres``...) are still
checked as sbatch checks them, so a typo is an error rather than silently ignored. Signals
srun receives while several tasks run (SIGINT, SIGTERM, SIGUSR1...) are passed on to every
task, as Slurm's srun forwards them, so no task outlives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from types import FrameType

from hal.compat.options import RESOURCE_OPTIONS, Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError, InvalidRequest
from hal.core.slurm_syntax import (
    parse_gpus,
    parse_gres,
    parse_memory,
    parse_nodes,
    parse_time_limit,
)

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
)
_COUNTS = frozenset({"ntasks", "cpus_per_task", "ntasks_per_node"})  # positive integers
# signals srun passes on to its tasks (Slurm's srun forwards these too)
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)


def parse_command(argv: list[str], default_tasks: int = 1) -> tuple[int, list[str]]:
    """(tasks to start, the command); raises ``OptionError`` or ``InvalidRequest``."""
    parsed = parse_options(argv, OPTIONS, stop_at_positional=True)
    ntasks = default_tasks
    for dest, value, spelled in parsed.values:
        if dest == "pty":
            raise InvalidRequest(
                "--pty is not supported: HAL's srun has no interactive terminal sessions; "
                "run the command without --pty"
            )
        if value is None:
            continue
        if dest in _COUNTS:
            if not value.strip().isdigit() or int(value) < 1:
                raise InvalidRequest(f"{spelled} needs a positive integer, got {value!r}")
            if dest == "ntasks":
                ntasks = int(value)
        elif dest == "nodes":
            if parse_nodes(value)[0] != 1:
                raise InvalidRequest(
                    f"HAL's srun runs on the batch node only: {spelled} {value} asks for "
                    "more; use --nodes=1 or leave it out"
                )
        elif dest in _CHECKS:
            _CHECKS[dest](value)
    command = list(parsed.positionals)
    if not command:
        raise InvalidRequest(
            "no command to run: write srun [options] COMMAND [ARGS], e.g. srun -n2 hostname"
        )
    return ntasks, command


def srun(argv: list[str], console: Console) -> int:
    if "SLURM_JOB_ID" not in console.environ:
        return console.error(
            "HAL's srun runs a command inside a batch job only (no interactive allocations "
            "or multi-node MPI launch yet); submit the work with `hal sbatch`"
        )
    job_tasks = console.environ.get("SLURM_NTASKS", "")
    try:
        ntasks, command = parse_command(
            argv, int(job_tasks) if job_tasks.isdigit() and int(job_tasks) > 0 else 1
        )
    except OptionError as err:
        return console.error(err.for_command("srun"))
    except HalError as err:
        return console.error(err.message)
    if ntasks == 1:
        # one task: become the command, so the job's memory limit holds the command alone
        # (a Python srun waiting beside it would take ~50 MB of the job's allowance)
        env = {
            **console.environ,
            "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0",
            "SLURM_STEP_NUM_TASKS": "1",
        }
        console.close()
        console.stdout.flush()
        console.stderr.flush()
        try:
            os.chdir(console.cwd)
            os.execvpe(command[0], command, env)  # noqa: S606 - srun runs what it is given
        except OSError as err:
            return console.error(f"cannot run {command[0]}: {err.strerror}")
    return run_tasks(command, ntasks, console)


def run_tasks(command: list[str], ntasks: int, console: Console) -> int:
    """Start ``ntasks`` copies, pass srun's signals on to them, and return the highest exit
    code (128 + N for a task a signal ended)."""
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        for rank in range(ntasks):
            env = {
                **console.environ,
                "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank),
                "SLURM_STEP_NUM_TASKS": str(ntasks),
            }
            try:
                procs.append(subprocess.Popen(command, env=env, cwd=console.cwd))
            except OSError as err:
                for p in procs:
                    p.kill()
                    p.wait()
                return console.error(f"cannot run {command[0]}: {err.strerror}")
        codes = [p.wait() for p in procs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return max((c if c >= 0 else 128 - c) for c in codes)
