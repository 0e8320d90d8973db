"""``srun`` running a step on the batch node itself (a one-node job's ``srun cmd``, ``-n1``,
``-N1``), recorded as a job step (ADR 0012).

srun asks the server for a step number first (``open_local_step``: one request), runs the
tasks here as its children, and reports their end (``end_local_step``: one more), so the
step shows in ``sacct -j JOB`` as ``JOB.N``, numbered with the job's other steps, and in
``squeue -s`` while it runs. The record is a gate for the job's CPUs, memory and GPUs:
while its other steps hold what the step asks for (all the CPUs without ``--exact``,
nothing with ``--overlap``), srun waits and asks again, as Slurm's; one that asks for
more than the job has is refused, srun's exit code 1, as Slurm's. Otherwise a
server that cannot be reached (or refuses for another reason) is said once on stderr and
the command runs all the same, srun's exit code the tasks'.

srun waits beside its tasks (it no longer becomes a lone task by ``exec``), so that it can
report the end: it passes SIGINT, SIGTERM, SIGUSR1... on to every task, as Slurm's srun
forwards them, and takes ~10 MB of the job's memory while it waits. The tasks run in the
step's own cgroup where srun may make one (``step_cgroup``); an OOM kill counted there
(or, without one, in srun's cgroup while a task died of SIGKILL) makes the step
``OUT_OF_MEMORY`` (ExitCode 0:125), with srun's "task N: Out Of Memory", slurmstepd's
line and srun's exit code 1, as Slurm's. srun reaps each task with ``wait4``, and its
end report carries what each used (sacct's MaxRSS, TotalCPU of ``JOB.N``): its most
resident memory, when above what it inherited of srun (``own_max_rss``), and its CPU
seconds with those of the children it waited for.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from types import FrameType
from typing import IO, TYPE_CHECKING, NamedTuple

from hal.compat import step_cgroup
from hal.compat.seam import Console, TaskUse
from hal.compat.srun_output import TaskFiles, step_fields
from hal.compat.step_cgroup import job_cgroup
from hal.compat.steps import (
    FORWARDED,
    GOT_SIGCONT,
    CtrlC,
    OutputWriter,
    kill_wait,
    once_free,
    srun_identity,
)
from hal.core.errors import HalError, InvalidRequest, Unavailable
from hal.slurm.filenames import FilenameFields, expand_filename
from hal.slurm.steps import (
    EXEC_FAILED,
    FORCING_TERMINATION,
    TIME_LIMIT,
    LocalStep,
    StepLayout,
    StepRequest,
    cancelled_message,
    force_terminated,
    oom_message,
    own_max_rss,
    stamp,
    step_aborted,
    step_environment,
    task_errors,
    terminating,
    worst_exit,
)

if TYPE_CHECKING:
    from hal.compat.srun import Invocation

CANCELLING = (signal.SIGINT, signal.SIGTERM)  # forwarded, they make the step CANCELLED
PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclass(frozen=True, slots=True)
class TasksEnd:
    exit_code: int  # the highest task's: its exit code, or 128+N for a signal N
    exit_signal: int  # the signal N that ended that task (0: it exited)
    cancelled: bool  # srun passed SIGINT/SIGTERM on to the tasks
    # what each task used: (rank, most resident bytes (0: unknown), CPU seconds, and
    # their user and system parts)
    tasks: list[TaskUse] = field(default_factory=list)
    codes: dict[int, int] = field(default_factory=dict)  # rank → exit code, -N: signal N
    timed_out: bool = False  # its own time limit (srun -t) ended it
    failed_first: int | None = None  # -K: the task whose failure ended the others


class BadExit(NamedTuple):
    """srun -K (``--kill-on-bad-exit``): the first task to fail ends the others (SIGTERM,
    SIGKILL ``kill_wait`` later), with srun's and slurmstepd's lines for ``step`` on
    ``node`` (Slurm 22.05.8)."""

    node: str
    step: str
    kill_wait: int


class TimeLimit(NamedTuple):  # (a NamedTuple: cheaper than a dataclass at srun's start)
    """A local step's own time limit (srun ``-t``): at ``seconds`` its tasks get SIGTERM
    and slurmstepd's line for ``step`` on ``node`` is said; SIGKILL ``kill_wait`` later."""

    seconds: int
    kill_wait: int
    step: str
    node: str


def run_local(
    job_id: int,
    layout: StepLayout,
    call: Invocation,
    console: Console,
    *,
    commands: list[list[str]] | None = None,
    request: StepRequest | None = None,
) -> int:
    """Run ``call``'s command as the step's tasks here (``layout``: one node, this one),
    recorded as step ``job_id``.N, once the job's CPUs and memory ``request`` asks for
    are free; the highest task's exit code (128+N for a signal N). ``commands``: each
    rank's own (``--multi-prog``). ``call`` names the step (-J), its tasks' files (-o,
    -e, -i), labels (-l) and whether one failing ends the rest (-K)."""
    node, ntasks = layout.nodes[0], layout.ntasks
    command, name = call.command, call.step_name
    step_id: int | None = None

    def opened() -> LocalStep:
        return console.client.open_local_step(
            job_id,
            node=node,
            ntasks=ntasks,
            name=name,
            argv=command,
            request=request,
            srun=srun_identity(os.getpid()),
        )

    places: tuple[int, ...] = ()
    memory = 0  # the step's memory limit (0: the job's)
    try:
        step_id, places, memory = once_free(job_id, console, opened)
    except InvalidRequest as err:  # more CPUs or memory than the job has: as Slurm's
        return console.error(err.message)
    except HalError as err:
        _not_recorded(console, err)
    # the step is open: a scancel of it may come now, before srun can pass it on; held
    # until run_tasks can (its tasks then get it as they start)
    signal.pthread_sigmask(signal.SIG_BLOCK, CANCELLING)
    step_env = step_environment(step_id, layout)
    step_env["SLURM_GTIDS"] = ",".join(str(rank) for rank in range(ntasks))
    if job_gpus := console.environ.get("SLURM_JOB_GPUS"):  # (a step asking none: the job's)
        step_env["SLURM_STEP_GPUS"] = job_gpus
    cgroup = job_cgroup(job_id)
    own = cgroup.make_step(step_id, memory) if step_id is not None else ""
    counted = own or cgroup.own  # the step's own cgroup, else srun's (shared)
    before = cgroup.oom_kills(counted)
    cpus = bound_cpus(places, console.environ)
    fence = cgroup.fence_step(step_id, own, cpus) if step_id is not None else ""
    where = f"{job_id}.{step_id}" if step_id is not None else str(job_id)  # its lines'
    limit = None
    if request is not None and request.time_limit_s:
        limit = TimeLimit(request.time_limit_s, kill_wait(console), where, node)
    groups = tuple(g for g in (own, fence) if g)
    bad_exit = BadExit(node, where, kill_wait(console)) if call.kill_on_bad_exit else None
    outputs = None
    if call.files is not None:
        outputs = call.files.files(console.environ, console.cwd, step_id, node)
    try:
        end = run_tasks(
            commands or [command] * ntasks,
            console,
            step_env,
            groups,
            cpus,
            limit,
            files=outputs,
            bad_exit=bad_exit,
            label=call.label,
            stdin=call.input,
            fields=step_fields(console.environ, step_id, node),
            step=where,
        )
    except InvalidRequest as err:  # an output file that cannot be opened: no task ran
        end = TasksEnd(EXEC_FAILED, 0, False)
        console.error(err.message)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CANCELLING)
        if outputs is not None:
            outputs.close()
    kills = cgroup.oom_kills(counted) - before
    if not own and end.exit_signal != signal.SIGKILL:
        kills = 0  # srun's cgroup is the batch script's too: the kill was not a task's
    for group in groups:
        step_cgroup.remove(group)
    if step_id is not None and any(code < 0 for code in end.codes.values()):
        for line in _cancel_lines(console, job_id, step_id, node):  # scancel JOB.STEP
            console.err(line)
    later = {r: c for r, c in end.codes.items() if r != end.failed_first}  # (said at once)
    for line in task_errors(node, later, oom=kills > 0):
        console.err(line)
    if end.timed_out or end.failed_first is not None:
        console.err(force_terminated(where))
    if kills:  # slurmstepd's line, and srun's exit code 1 (docs/slurm-checks.md)
        console.err(oom_message(node, kills, where))
    if step_id is not None:
        _report(console, job_id, step_id, end, oom=kills > 0)
    return 1 if kills else end.exit_code


def _cancel_lines(console: Console, job_id: int, step_id: int, node: str) -> list[str]:
    """srun's and slurmstepd's lines for a step whose tasks a signal ended, where
    ``scancel JOB.STEP`` or its job's end (cancelled, out of time) did it (Slurm
    22.05.8's, docs/slurm-checks.md); [] otherwise. (The step may have ended already
    on the server, with its job: its page is there a while after.)"""
    try:
        page = console.client.step_output(job_id, step_id, after=0, wait=0)
    except HalError:
        return []
    if page.cancelled_at is None:
        return []
    where, when = f"{job_id}.{step_id}", stamp(page.cancelled_at)
    line = cancelled_message(node, where, when, page.cancel_reason, kind="STEP")
    forcing = [FORCING_TERMINATION] if page.job_cancelled else []
    return [step_aborted(page.kill_wait_seconds), *forcing, line]


def bound_cpus(places: tuple[int, ...], env: Mapping[str, str]) -> tuple[int, ...]:
    """The CPUs a local step's tasks are bound to: of the job's (srun's own affinity, where
    its agent bound the job: as many CPUs as ``SLURM_CPUS_ON_NODE``), those at the
    ``places`` the control plane gave the step (srun --exact); () to leave the tasks on
    all of srun's."""
    if not places:
        return ()
    try:
        own = sorted(os.sched_getaffinity(0))
    except OSError:
        return ()
    if env.get("SLURM_CPUS_ON_NODE") != str(len(own)):
        return ()  # the job is not bound (binding off): its CPUs are not srun's
    picked = tuple(own[p] for p in places if p < len(own))
    return picked if len(picked) < len(own) else ()


def _enter(cgroups: tuple[str, ...], cpus: tuple[int, ...], prctl: Callable[..., int]) -> None:
    """A task, between fork and exec: killed if srun dies (SIGKILL'd, it cannot end its
    tasks, which slurmstepd would; they ran on, holding the job's CPUs), into the step's
    cgroups (its memory one, and on cgroup1 its cpuset one), onto its CPUs, with its own
    pid in ``SLURM_TASK_PID``, as slurmstepd sets it (Slurm 22.05.8: the task's ``$$``)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # (into the environment the task inherits: it is forked with srun's, ``_environment``)
    os.putenv("SLURM_TASK_PID", str(os.getpid()))
    for cgroup in cgroups:
        step_cgroup.join(cgroup)
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)


def run_tasks(
    commands: list[list[str]],
    console: Console,
    step_env: dict[str, str],
    cgroups: tuple[str, ...] = (),
    cpus: tuple[int, ...] = (),
    limit: TimeLimit | None = None,
    *,
    files: TaskFiles | None = None,
    bad_exit: BadExit | None = None,
    label: bool = False,
    stdin: str = "all",
    fields: FilenameFields | None = None,
    step: str = "",
) -> TasksEnd:
    """Start a task per rank (``commands[rank]``), in ``cgroups`` and bound to ``cpus`` if
    given, pass srun's signals on to them, wait for all, ending them at ``limit``. A
    command that cannot start is said on stderr, those started are killed, and it ends
    as a task that exits ``EXEC_FAILED``. ``files``: each task's stdout and stderr (srun
    -o/-e; its files are opened before any task starts, ``InvalidRequest`` if one cannot
    be). ``bad_exit``: srun -K. ``label``: srun -l, each line of a task's output that goes
    to srun's own prefixed with its rank (read from pipes, a thread each). ``stdin``
    (srun -i): ``all`` srun's own input (one task inherits it; several get a copy each,
    ``_copy_input``), ``none`` nothing, a rank that task alone, else a file name pattern
    (``%t``...: -o's rules, with the step's ``fields``). ``step``: ``J.S``, for srun's
    lines (a SIGINT's: ``steps.CtrlC``)."""
    streams = _task_streams(len(commands), files, label)
    fields = fields or FilenameFields(0, "", "", "")
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # (loaded before any fork)
    inputs, copied = _task_inputs(len(commands), stdin, fields, console.cwd)
    # (srun's client is idle while it waits for its tasks: it may ask for KillWait)
    tasks = _Tasks(console, CtrlC(console, step, partial(kill_wait, console)), limit)
    relays: list[threading.Thread] = []
    previous = _catch_signals(tasks)
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (own_max_rss)
    try:
        join = partial(_enter, cgroups, cpus, prctl)
        if not _start(tasks, commands, step_env, join, inputs, streams):
            return TasksEnd(EXEC_FAILED, 0, False)
        _all_started(tasks, inputs)
        if label:  # (threads only now: every task is forked)
            relays = _relay_labelled(tasks.procs, console)
        if copied:
            _copy_input(tasks.procs)
        if limit is not None:
            signal.setitimer(signal.ITIMER_REAL, limit.seconds)
        failed_first: int | None = None
        if bad_exit is None:
            reaped = [_reap(p) for p in tasks.procs]
        else:
            reaped, failed_first = _reap_ending_the_rest(tasks.procs, console, bad_exit)
    finally:
        for relay in relays:
            relay.join()
        if limit is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return _collect(tasks, reaped, inherited, failed_first)


Reaped = tuple[int, resource.struct_rusage | None]
_Handler = Callable[[int, FrameType | None], object] | int | None  # (what signal.signal takes)


class _Tasks:  # (a plain class: a dataclass costs srun ~1 ms more to import)
    """A local step's tasks while srun starts and waits for them, and what its signal
    handlers (``forward``, ``time_out``: they run between any two lines of srun's) have
    done to them."""

    __slots__ = ("console", "ctrl_c", "early", "expired", "forwarded", "limit", "procs", "spawning")

    def __init__(self, console: Console, ctrl_c: CtrlC, limit: TimeLimit | None) -> None:
        self.console = console
        self.ctrl_c = ctrl_c
        self.limit = limit
        self.procs: list[subprocess.Popen[bytes]] = []
        self.forwarded: set[int] = set()
        self.expired: list[int] = []  # the signals the time limit has sent
        # signals that came while the tasks were being started, and how many had started:
        # scancel of a step just opened reaches srun before its task exists (the task
        # then ran its whole course)
        self.early: list[tuple[int, int]] = []
        self.spawning = True

    def forward(self, signum: int, _frame: FrameType | None) -> None:
        """Whether and how srun's signal goes on to the tasks (a first SIGINT may not)."""
        if signum == signal.SIGINT:
            running = [r for r, p in enumerate(self.procs) if p.returncode is None]
            if not self.ctrl_c.passes_on(running):
                return
        self.forwarded.add(signum)
        if signum == signal.SIGCONT:
            self.console.err(GOT_SIGCONT)
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signum)
        if self.spawning:  # the tasks not started yet get it once they are
            self.early.append((signum, len(self.procs)))

    def time_out(self, _signum: int, _frame: FrameType | None) -> None:
        """Which signal the step's time limit sends now: SIGTERM, then SIGKILL."""
        # (a timer signal, not a thread: the tasks are forked with a preexec_fn)
        limit = self.limit
        assert limit is not None
        signum = signal.SIGKILL if self.expired else signal.SIGTERM
        if not self.expired:
            when = stamp(time.time())
            self.console.err(
                cancelled_message(limit.node, limit.step, when, TIME_LIMIT, kind="STEP")
            )
            signal.setitimer(signal.ITIMER_REAL, max(limit.kill_wait, 0.01))
        self.expired.append(signum)
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signum)


def _task_streams(
    ntasks: int, files: TaskFiles | None, label: bool
) -> list[tuple[int | None, int | None]]:
    """Where each task's stdout and stderr go: its -o/-e file, else a pipe (-l), else srun's."""
    pipe = subprocess.PIPE if label else None
    return [
        (
            (files.fd(rank, "stdout") if files else None) or pipe,
            (files.fd(rank, "stderr") if files else None) or pipe,
        )
        for rank in range(ntasks)
    ]


def _task_inputs(
    ntasks: int, stdin: str, fields: FilenameFields, cwd: str
) -> tuple[list[int | None], bool]:
    """Each task's stdin for srun -i, and whether srun copies its own input to every task."""
    inputs = [_task_input(stdin, rank, fields, cwd) for rank in range(ntasks)]
    copied = stdin.lower() == "all" and ntasks > 1  # srun's input to every task
    if copied:
        inputs = [subprocess.PIPE] * ntasks
    return inputs, copied


def _catch_signals(tasks: _Tasks) -> dict[int, _Handler]:
    """Which of srun's signals its tasks' handlers take over; the handlers they replace."""
    previous: dict[int, _Handler] = {sig: signal.signal(sig, tasks.forward) for sig in FORWARDED}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, CANCELLING)  # (held since the step opened)
    if tasks.limit is not None:
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, tasks.time_out)
    return previous


def _start(
    tasks: _Tasks,
    commands: list[list[str]],
    step_env: dict[str, str],
    join: Callable[[], None],
    inputs: list[int | None],
    streams: list[tuple[int | None, int | None]],
) -> bool:
    """Whether every rank's task started; when one cannot, the line is said and those
    started are killed."""
    console = tasks.console
    for rank, command in enumerate(commands):
        env = {**console.environ, **step_env, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)}
        try:
            # srun runs no other thread (sync httpx), so a preexec_fn is safe here
            with _environment(env):  # (the task's, and the PATH its command is found on)
                task = subprocess.Popen(
                    command,
                    env=None,  # srun's own: _enter adds the task's pid to it
                    cwd=console.cwd or None,
                    preexec_fn=join,  # noqa: PLW1509
                    stdin=inputs[rank],
                    stdout=streams[rank][0],
                    stderr=streams[rank][1],
                )
            tasks.procs.append(task)
        except OSError as err:
            for p in tasks.procs:
                p.kill()
                p.wait()
            console.error(f"cannot run {command[0]}: {err.strerror}")
            return False
    return True


def _all_started(tasks: _Tasks, inputs: list[int | None]) -> None:
    """Which tasks still get the signals that came while they were started (those that
    started after each), once all are; srun's copies of input files are closed."""
    tasks.spawning = False
    for signum, started in tasks.early:
        for proc in tasks.procs[started:]:
            if proc.poll() is None:
                proc.send_signal(signum)
    for fd in inputs:  # (each task has its own copy of an input file now)
        if fd is not None and fd >= 0:
            os.close(fd)


def _collect(
    tasks: _Tasks, reaped: list[Reaped], inherited: int, failed_first: int | None
) -> TasksEnd:
    """How the step's tasks ended: the worst exit, each rank's code and use, and whether
    srun cancelled them or their time limit ended them."""
    codes = {rank: code for rank, (code, _) in enumerate(reaped)}
    used = [
        (
            r,
            own_max_rss(usage.ru_maxrss, inherited),
            usage.ru_utime + usage.ru_stime,
            usage.ru_utime,
            usage.ru_stime,
        )
        for r, (_, usage) in enumerate(reaped)
        if usage is not None
    ]
    cancelled = bool(tasks.forwarded & set(CANCELLING))
    return TasksEnd(
        *worst_exit(codes.values()), cancelled, used, codes, bool(tasks.expired), failed_first
    )


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """srun's own environment is ``env`` while a task is forked, and is restored after.

    The task inherits it (``Popen`` without ``env``: ``execv``), so that between fork and
    exec it can add its own pid, ``SLURM_TASK_PID`` (``_enter``); an environment given
    to ``Popen`` is fixed before the fork. Only the variables that differ are changed."""
    saved = dict(os.environ)
    try:
        _replace_environment(saved, env)
        yield
    finally:
        _replace_environment(dict(os.environ), saved)


def _replace_environment(now: Mapping[str, str], wanted: Mapping[str, str]) -> None:
    for name in now.keys() - wanted.keys():
        os.environ.pop(name, None)
    for name, value in wanted.items():
        if now.get(name) != value:
            os.environ[name] = value


def _copy_input(procs: list[subprocess.Popen[bytes]]) -> None:
    """srun -i all (the default) of a step of several tasks: what srun reads on its stdin
    goes to every task, as Slurm's srun sends it (HAL's tasks shared srun's stdin, so one
    of them read it all), on a daemon thread until srun's input ends; each task's pipe is
    closed then, or when it stops reading."""
    pipes = [proc.stdin for proc in procs if proc.stdin is not None]

    def copy() -> None:
        try:
            while chunk := os.read(0, 65536):
                for pipe in list(pipes):
                    try:
                        pipe.write(chunk)
                        pipe.flush()
                    except OSError:  # (BrokenPipeError: the task has gone)
                        pipes.remove(pipe)
        except OSError:
            pass
        for pipe in pipes:
            with contextlib.suppress(OSError):
                pipe.close()

    threading.Thread(target=copy, name="srun-input", daemon=True).start()


def _task_input(mode: str, rank: int, fields: FilenameFields, cwd: str) -> int | None:
    """Task ``rank``'s stdin for srun ``-i MODE`` (None: srun's own, inherited)."""
    if mode.lower() == "all":
        return None
    if mode.lower() == "none" or (mode.isdigit() and int(mode) != rank):
        return subprocess.DEVNULL
    if mode.isdigit():
        return None
    path = os.path.join(cwd, expand_filename(mode, replace(fields, task=rank)))
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise InvalidRequest(f"Could not open stdin file {path}: {err.strerror}") from None


def _relay_labelled(
    procs: list[subprocess.Popen[bytes]], console: Console
) -> list[threading.Thread]:
    """srun -l: a thread per task pipe, writing whole lines prefixed ``RANK: `` to srun's
    stdout or stderr (``OutputWriter``, as for a step on other nodes)."""
    writer = OutputWriter(console, label=True)
    lock = threading.Lock()

    def relay(rank: int, stream: str, source: IO[bytes]) -> None:
        with source:
            for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]
                with lock:
                    writer.write(rank, stream, chunk)
        with lock:
            writer.flush(rank, stream)

    threads = []
    for rank, proc in enumerate(procs):
        for stream, source in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            if source is not None:
                thread = threading.Thread(target=relay, args=(rank, stream, source), daemon=True)
                thread.start()
                threads.append(thread)
    return threads


def _reap_ending_the_rest(
    procs: list[subprocess.Popen[bytes]], console: Console, bad: BadExit
) -> tuple[list[Reaped], int | None]:
    """srun -K: each task's end as it comes (polled every 50 ms, with its rusage); at the
    first that fails, its line and slurmstepd's are said and the rest get SIGTERM, then
    SIGKILL ``bad.kill_wait`` later. The ends by rank, and that first task's rank."""
    done: dict[int, Reaped] = {}
    failed: int | None = None
    kill_at = 0.0
    while True:
        for rank, proc in enumerate(procs):
            if rank in done:
                continue
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:  # a forwarded signal's send_signal reaped it
                done[rank] = (proc.wait(), None)
                continue
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                done[rank] = (proc.returncode, usage)
                if proc.returncode != 0 and failed is None:
                    failed, kill_at = rank, time.monotonic() + bad.kill_wait
                    for line in task_errors(bad.node, {rank: proc.returncode}):
                        console.err(line)
                    console.err(terminating(bad.step))
                    console.err(
                        cancelled_message(bad.node, bad.step, stamp(time.time()), kind="STEP")
                    )
                    _signal_running(procs, signal.SIGTERM)
        if len(done) == len(procs):
            return [done[r] for r in range(len(procs))], failed
        if failed is not None and time.monotonic() >= kill_at:
            _signal_running(procs, signal.SIGKILL)
        time.sleep(0.05)


def _signal_running(procs: list[subprocess.Popen[bytes]], signum: int) -> None:
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signum)


def _reap(proc: subprocess.Popen[bytes]) -> Reaped:
    """Wait for a task: its exit code (-N for a signal N) and its rusage (``None``
    when a forwarded signal's ``send_signal`` reaped it first, which keeps none)."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return proc.wait(), None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


# How long srun keeps trying to report its step's end to a server it cannot reach (one
# restarting): slurmstepd retries a step's completion until slurmctld answers; srun, in
# the batch script's way, stops after this and the restarted server ends the step with
# its job.
END_RETRY_S = 60.0


def _report(console: Console, job_id: int, step_id: int, end: TasksEnd, *, oom: bool) -> None:
    deadline = time.monotonic() + END_RETRY_S
    delay = 1.0
    while True:
        try:
            console.client.end_local_step(
                job_id,
                step_id,
                exit_code=min(end.exit_code, 255),
                exit_signal=end.exit_signal,
                oom=oom,
                cancelled=end.cancelled,
                timed_out=end.timed_out,
                tasks=end.tasks,
            )
            return
        except Unavailable as err:  # (a report the server took twice counts once)
            if time.monotonic() + delay > deadline:
                _not_recorded(console, err, f"{job_id}.{step_id}")
                return
            console.sleep(delay)
            delay = min(delay * 2, 10.0)
        except HalError as err:
            _not_recorded(console, err, f"{job_id}.{step_id}")
            return


def _not_recorded(console: Console, err: HalError, step: str = "") -> None:
    if step:
        console.err(f"srun: warning: the end of step {step} was not recorded ({err.message})")
    else:
        console.err(
            f"srun: warning: job step not recorded ({err.message}); running the command "
            "all the same"
        )
