"""``srun`` running a step on the batch node itself (a one-node job's ``srun cmd``, ``-n1``,
``-N1``), recorded as a job step (ADR 0012).

srun asks the server for a step number first (``open_local_step``: one request), runs the
tasks here as its children, and reports their end (``end_local_step``: one more), so the
step shows in ``sacct -j JOB`` as ``JOB.N``, numbered with the job's other steps, and in
``squeue -s`` while it runs. The record is not a gate: a server that cannot be reached
(or refuses) is said once on stderr and the command runs all the same, srun's exit code
always the tasks'.

srun waits beside its tasks (it no longer becomes a lone task by ``exec``), so that it can
report the end: it passes SIGINT, SIGTERM, SIGUSR1... on to every task, as Slurm's srun
forwards them, and takes ~10 MB of the job's memory while it waits. A task the job's
cgroup killed for memory (its ``oom_kill`` count rose while the step ran and the task died
of SIGKILL) makes the step ``OUT_OF_MEMORY`` (ExitCode 0:125), with srun's "task N: Out Of
Memory", slurmstepd's line and srun's exit code 1, as Slurm's. srun reaps each task with
``wait4``, and its end report carries what each used (sacct's MaxRSS, TotalCPU of
``JOB.N``): its most resident memory, when above what it inherited of srun
(``own_max_rss``), and its CPU seconds with those of the children it waited for.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from dataclasses import dataclass, field
from types import FrameType

from hal.compat.seam import Console
from hal.compat.steps import FORWARDED
from hal.core.errors import HalError
from hal.core.steps import (
    EXEC_FAILED,
    StepLayout,
    oom_message,
    own_max_rss,
    step_environment,
)

CANCELLING = (signal.SIGINT, signal.SIGTERM)  # forwarded, they make the step CANCELLED


@dataclass(frozen=True, slots=True)
class TasksEnd:
    exit_code: int  # the highest task's: its exit code, or 128+N for a signal N
    exit_signal: int  # the signal N that ended that task (0: it exited)
    rank: int  # that task's
    cancelled: bool  # srun passed SIGINT/SIGTERM on to the tasks
    # what each task used: (rank, most resident bytes (0: unknown), CPU seconds)
    tasks: list[tuple[int, int, float]] = field(default_factory=list)


def run_local(
    job_id: int,
    layout: StepLayout,
    command: list[str],
    console: Console,
    *,
    commands: list[list[str]] | None = None,
) -> int:
    """Run the step's tasks here (``layout``: one node, this one), recorded as step
    ``job_id``.N; the highest task's exit code (128+N for a signal N). ``commands``:
    each rank's own (``--multi-prog``)."""
    node, ntasks = layout.nodes[0], layout.ntasks
    name = os.path.basename(command[0])
    step_id: int | None = None
    try:
        step_id = console.client.open_local_step(
            job_id, node=node, ntasks=ntasks, name=name, argv=command
        )
    except HalError as err:
        _not_recorded(console, err)
    step_env = step_environment(step_id, layout)
    oom_before = oom_kills(job_id)
    end = run_tasks(commands or [command] * ntasks, console, step_env)
    kills = oom_kills(job_id) - oom_before if end.exit_signal == signal.SIGKILL else 0
    if kills:  # Slurm's srun and slurmstepd, and srun's exit code 1 (docs/slurm-checks.md)
        console.err(f"srun: error: {node}: task {end.rank}: Out Of Memory")
        console.err(oom_message(node, kills, f"{job_id}.{step_id}").rstrip("\n"))
    elif end.exit_signal:
        console.err(f"srun: error: {node}: task {end.rank}: {_signal_name(end.exit_signal)}")
    if step_id is not None:
        _report(console, job_id, step_id, end, oom=kills > 0)
    return 1 if kills else end.exit_code


def run_tasks(commands: list[list[str]], console: Console, step_env: dict[str, str]) -> TasksEnd:
    """Start a task per rank (``commands[rank]``), pass srun's signals on to them, wait
    for all. A command that cannot start is said on stderr, those started are killed,
    and it ends as a task that exits ``EXEC_FAILED``."""
    ntasks = len(commands)
    procs: list[subprocess.Popen[bytes]] = []
    forwarded: set[int] = set()

    def forward(signum: int, _frame: FrameType | None) -> None:
        forwarded.add(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (own_max_rss)
    try:
        for rank in range(ntasks):
            env = {
                **console.environ,
                **step_env,
                "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank),
            }
            command = commands[rank]
            try:
                procs.append(subprocess.Popen(command, env=env, cwd=console.cwd or None))
            except OSError as err:
                for p in procs:
                    p.kill()
                    p.wait()
                console.error(f"cannot run {command[0]}: {err.strerror}")
                return TasksEnd(EXEC_FAILED, 0, rank, False)
        reaped = [_reap(p) for p in procs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    codes = [code for code, _ in reaped]
    # the highest code (128+N for a signal N), the first task of it
    code, signum, rank = max(
        (c if c >= 0 else 128 - c, max(-c, 0), -r) for r, c in enumerate(codes)
    )
    tasks = [
        (r, own_max_rss(usage.ru_maxrss, inherited), usage.ru_utime + usage.ru_stime)
        for r, (_, usage) in enumerate(reaped)
        if usage is not None
    ]
    return TasksEnd(code, signum, -rank, bool(forwarded & set(CANCELLING)), tasks)


def _reap(proc: subprocess.Popen[bytes]) -> tuple[int, resource.struct_rusage | None]:
    """Wait for a task: its exit code (-N for a signal N) and its rusage (``None``
    when a forwarded signal's ``send_signal`` reaped it first, which keeps none)."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return proc.wait(), None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


def oom_kills(job_id: int) -> int:
    """How many processes the kernel has killed for memory in srun's own cgroup, when
    that is the job's (``job_<id>.<n>``, the agent's cgroup backend); 0 otherwise."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if f"/job_{job_id}." not in path + "/":
            continue
        if controllers == "":  # cgroup2
            return _keyed(f"/sys/fs/cgroup{path}/memory.events").get("oom_kill", 0)
        if "memory" in controllers.split(","):
            return _keyed(f"/sys/fs/cgroup/memory{path}/memory.oom_control").get("oom_kill", 0)
    return 0


def _keyed(path: str) -> dict[str, int]:
    try:
        with open(path) as f:
            pairs = (line.split() for line in f)
            return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}
    except OSError:
        return {}


def _report(console: Console, job_id: int, step_id: int, end: TasksEnd, *, oom: bool) -> None:
    try:
        console.client.end_local_step(
            job_id,
            step_id,
            exit_code=min(end.exit_code, 255),
            exit_signal=end.exit_signal,
            oom=oom,
            cancelled=end.cancelled,
            tasks=end.tasks,
        )
    except HalError as err:
        _not_recorded(console, err, f"{job_id}.{step_id}")


def _not_recorded(console: Console, err: HalError, step: str = "") -> None:
    if step:
        console.err(f"srun: warning: the end of step {step} was not recorded ({err.message})")
    else:
        console.err(
            f"srun: warning: job step not recorded ({err.message}); running the command "
            "all the same"
        )


def _signal_name(signum: int) -> str:
    try:
        return signal.strsignal(signum) or f"Signal {signum}"
    except ValueError:
        return f"Signal {signum}"
