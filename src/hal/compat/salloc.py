"""The ``salloc`` command: get an allocation, run a command here with it, give it back.

As Slurm's salloc: it submits the allocation (an ordinary job whose batch script only
holds its nodes, ``salloc_options.HOLD_SCRIPT``) and says so on stderr::

    salloc: Pending job allocation 12
    salloc: job 12 queued and waiting for resources
    salloc: job 12 has been allocated resources
    salloc: Granted job allocation 12
    salloc: Nodes node[1-2] are ready for job

then runs the command on this host (default ``$SHELL``) with ``SLURM_JOB_ID``,
``SLURM_JOB_NODELIST``, ... (``allocation_environment``); ``srun`` in it creates job
steps on the allocation's nodes through the control plane (ADR 0012, ADR 0013). The
command gets the terminal (its own process group, in the foreground), and the signals
salloc receives meanwhile go to that group. When it exits salloc prints ``Relinquishing
job allocation 12``, ends the job with the command's exit status (COMPLETED for 0,
FAILED otherwise; sacct's ExitCode ``CODE:0``, ``0:N`` for a signal N) and exits with
the command's exit code (128+N for a signal N). ``--no-shell`` runs no command: salloc
exits 0 once granted and the allocation runs until its time limit or ``scancel``
(``srun --jobid=N`` runs steps in it). ``-I[SECONDS]`` gives up (the request cancelled,
exit 1) unless granted within SECONDS, or for none (or 0) at the scheduler's first look.

Ctrl-C (or SIGTERM/SIGHUP) while the job is pending cancels it: ``Job allocation 12 has
been revoked.``, exit 1. An allocation that ends first (scancel, its time limit, a node
failure) is revoked: salloc says so, sends the command SIGHUP (SIGTERM without a
terminal; ``-K SIG`` chooses), SIGKILL after ``KILL_GRACE_SECONDS``, and exits non-zero.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from hal.compat.salloc_options import (
    HELP,
    Granted,
    SallocRequest,
    allocation_environment,
    default_kill_signal,
    parse_salloc,
)
from hal.compat.sbatch import process_umask
from hal.compat.seam import Console
from hal.compat.steps import FORWARDED as STEP_FORWARDED
from hal.compat.version import VERSION_LINE
from hal.core.errors import HalError, InvalidRequest, NotFound, PermissionDenied
from hal.core.states import JobState, PendingReason
from hal.wire.submit import non_defaults

if TYPE_CHECKING:
    from hal.wire.jobs import JobInfo

POLL_FIRST_SECONDS = 0.05  # while pending: the first wait, doubled up to POLL_MAX_SECONDS
POLL_MAX_SECONDS = 5.0
# -I (at once): how long to wait for the scheduler's first look at the job at most
IMMEDIATE_VERDICT_SECONDS = 10.0
_UNSEEN = PendingReason.WAITING_FOR_SCHEDULING.value  # a job no cycle has looked at yet
QUEUED_AFTER_SECONDS = 0.5  # pending longer than this: "queued and waiting for resources"
WATCH_SECONDS = 2.0  # how often the allocation is checked while the command runs
# SIGINT or SIGTERM to salloc while its command runs revokes the allocation, and salloc
# exits 0 (Slurm 22.05.8); other signals go to the command's group
REVOKING = (signal.SIGINT, signal.SIGTERM)
USER_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGKILL)
KILL_GRACE_SECONDS = 10.0  # a revoked command's time to end before SIGKILL
RELINQUISH_SECONDS = 10.0  # how long the holding script may take to end before scancel
RESEND_SECONDS = 0.5  # its signal again (the first may come before its traps are set)
ENDED_POLL_SECONDS = 0.05  # how often the ending allocation is looked at meanwhile
# signals salloc passes on to its command's process group while it runs (srun's less
# SIGCONT: a stopped salloc and its command are continued together by the shell)
FORWARDED = tuple(s for s in STEP_FORWARDED if s is not signal.SIGCONT)
_HOLDING = (JobState.RUNNING, JobState.SUSPENDED)


class _NotGranted(Exception):
    """``-I``: the allocation was not granted in time."""


class _Interrupted(Exception):
    """SIGTERM or SIGHUP while the allocation is pending (Ctrl-C is KeyboardInterrupt)."""


def salloc(argv: list[str], console: Console) -> int:
    hostname = socket.gethostname()
    try:
        request = parse_salloc(
            argv,
            environ=console.environ,
            cwd=console.cwd,
            now=console.clock(),
            hostname=hostname,
            umask=process_umask(),
        )
    except HalError as err:
        return console.error(err.message)
    if request.help:
        console.stdout.write(HELP)
        return 0
    if request.version:
        console.out(VERSION_LINE)
        return 0

    def info(line: str) -> None:
        if not request.quiet:
            console.err(f"salloc: {line}")
            console.stderr.flush()

    for warning in request.warnings:
        info(warning)
    if request.verbose:
        for key, value in non_defaults(request.job, exclude=("script", "environment")).items():
            console.err(f"salloc: {key:<20}: {value}")
    try:
        job_id = console.client.submit(request.job).job_id
    except HalError as err:
        return console.error(f"Job submit/allocate failed: {err.message}")
    # "Pending job allocation N" only for an allocation that is not granted at once (as
    # Slurm 22.05.8's salloc says it only when it must wait), or before saying
    # that it never was
    pending = Pending(job_id, info)
    granted = await_allocation(job_id, request, console, pending)
    if isinstance(granted, int):
        return granted
    if request.no_shell:  # the allocation stays until its time limit or scancel
        info(f"Granted job allocation {job_id}")
        return 0
    interrupted: list[int] = []  # SIGINT/SIGTERM from now on revoke the allocation
    original = {sig: signal.signal(sig, lambda n, _f: interrupted.append(n)) for sig in REVOKING}
    info(f"Granted job allocation {job_id}")
    try:
        env = granted_environment(console, granted, request, hostname)
        return _run_command(job_id, request, env, console, info, interrupted)
    finally:
        for sig, handler in original.items():
            signal.signal(sig, handler)


def await_allocation(
    job_id: int, request: SallocRequest, console: Console, pending: Pending
) -> Granted | int:
    """The allocation once granted, or the command's exit code when it never is: Ctrl-C
    (or SIGTERM, SIGHUP) while it waits cancels it, and so does ``-I`` running out;
    each said as Slurm's salloc and srun say it (``console.command`` names which)."""
    hangups = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, _interrupt) for sig in hangups}
    revoked = f"{console.command}: Job allocation {job_id} has been revoked."
    try:
        granted = _wait_granted(job_id, console, pending, request.immediate)
    except (KeyboardInterrupt, _Interrupted):
        _cancel(job_id, console)
        pending.say()
        console.err(revoked)
        return 1
    except _NotGranted:
        _cancel(job_id, console)
        pending.say()
        return console.error("Unable to allocate resources: Requested nodes are busy")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if granted is None:  # cancelled (or failed) before it ran
        pending.say()
        console.err(revoked)
        return 1
    return granted


def granted_environment(
    console: Console, granted: Granted, request: SallocRequest, hostname: str
) -> dict[str, str]:
    """What a command run in the allocation gets: ``SLURM_JOB_ID``, the nodes, ..."""
    try:
        cluster_name = console.client.cluster_config().cluster_name
    except HalError:
        cluster_name = ""
    return allocation_environment(
        console.environ,
        granted,
        request.job,
        cluster_name=cluster_name,
        submit_dir=console.cwd,
        hostname=hostname,
    )


class Pending:
    """salloc's "Pending job allocation N", said once, when it is known to wait."""

    def __init__(self, job_id: int, info: Callable[[str], None]) -> None:
        self.job_id, self.info, self.said = job_id, info, False

    def say(self, then: str = "") -> None:
        if not self.said:
            self.said = True
            self.info(f"Pending job allocation {self.job_id}")
        if then:
            self.info(then)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise _Interrupted


def _wait_granted(
    job_id: int, console: Console, info: Pending, immediate: float | None
) -> Granted | None:
    """Poll until the job runs (its allocation) or ends without running (None). With
    ``immediate`` (``-I``) raise ``_NotGranted`` once that many seconds have gone by,
    or, for 0, once the scheduler has looked at the job and left it pending."""
    delay, queued = POLL_FIRST_SECONDS, False
    start = console.clock()
    deadline = None if immediate is None else start + (immediate or IMMEDIATE_VERDICT_SECONDS)
    while True:
        state, job = _state(job_id, console)
        if job is not None and state is JobState.RUNNING:
            if queued:
                info.say(f"job {job_id} has been allocated resources")
            return Granted(
                job_id=job_id,
                name=job.name,
                nodes=tuple(job.nodes),
                partition=job.partition,
                cpus=job.cpus,
                ntasks=job.ntasks,
                account=job.account,
                qos=job.qos,
            )
        if state is not None and state.is_terminal:
            return None
        now = console.clock()
        if deadline is not None and (
            now >= deadline or (immediate == 0 and job is not None and job.reason != _UNSEEN)
        ):
            raise _NotGranted
        if not queued and now - start >= QUEUED_AFTER_SECONDS:
            info.say(f"job {job_id} queued and waiting for resources")
            queued = True
        wait = delay if deadline is None else max(0.0, min(delay, deadline - now))
        console.sleep(wait)
        delay = min(delay * 2, POLL_MAX_SECONDS)


def _state(job_id: int, console: Console) -> tuple[JobState | None, JobInfo | None]:
    """The job's state and record; (None, None) while the server cannot say (a restart:
    the allocation goes on); a job the server no longer knows has ended."""
    try:
        job = console.client.job(job_id)
    except NotFound:
        return JobState.CANCELLED, None
    except HalError:
        return None, None
    try:
        return JobState(job.state), job
    except ValueError:
        return None, None


def _cancel(job_id: int, console: Console) -> None:
    try:
        console.client.cancel(job_id)
    except HalError as err:
        console.error(f"could not cancel job {job_id}: {err.message}; run scancel {job_id}")


def _run_command(
    job_id: int,
    request: SallocRequest,
    env: dict[str, str],
    console: Console,
    info: Callable[[str], None],
    interrupted: list[int],
) -> int:
    """Run the command in the allocation; salloc's exit code. SIGINT or SIGTERM to salloc
    (``interrupted``, also before the command started) revokes the allocation."""
    tty = _terminal(console)
    kill_signal = request.kill_signal or default_kill_signal(interactive=tty is not None)
    console.stdout.flush()
    console.stderr.flush()
    try:
        proc = _start(list(request.command), env, request.job.workdir, tty)
    except OSError as err:
        console.error(f"Unable to exec command {request.command[0]!r}: {err.strerror}")
        info(f"Relinquishing job allocation {job_id}")
        relinquish(job_id, (1, 0), console)
        return 1

    def forward(signum: int, _frame: FrameType | None) -> None:
        if signum in REVOKING:  # salloc's own: it gives the allocation up (Slurm's does)
            interrupted.append(signum)
        else:
            _signal_group(proc, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    revoked: JobState | None = None
    cancelling = False
    try:
        while True:
            try:
                code = proc.wait(timeout=0.2 if interrupted else WATCH_SECONDS)
                break
            except subprocess.TimeoutExpired:
                pass
            if interrupted and not cancelling:  # (once)
                cancelling = True
                _cancel(job_id, console)
            state, _ = _state(job_id, console)
            if state is not None and state not in _HOLDING:
                revoked = state
                code = _revoke(job_id, state, proc, kill_signal, console)
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if tty is not None:
            _take_terminal(tty)
    # a command ended by a signal: 0 for those a user sends (HUP, INT, QUIT, KILL), else
    # 1, as Slurm's salloc exits (HAL exited 128+N)
    rc = code if code >= 0 else (0 if -code in USER_SIGNALS else 1)
    if revoked is not None:
        if not revoked.is_terminal:  # requeued: it must not run again without salloc
            _cancel(job_id, console)
        return 0 if interrupted else rc or 1
    info(f"Relinquishing job allocation {job_id}")
    relinquish(job_id, (code, 0) if code >= 0 else (0, -code), console)
    return rc


def _revoke(
    job_id: int,
    state: JobState,
    proc: subprocess.Popen[bytes],
    kill_signal: int,
    console: Console,
) -> int:
    """The allocation ended under the command: say so, end the command, its exit code."""
    if state is JobState.TIMEOUT:
        console.err(
            f"salloc: Job {job_id} has exceeded its time limit and its allocation has been revoked."
        )
    else:
        console.err(f"salloc: Job allocation {job_id} has been revoked.")
    console.stderr.flush()
    _signal_group(proc, kill_signal)
    try:
        return proc.wait(KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        return proc.wait()


def relinquish(job_id: int, status: tuple[int, int], console: Console) -> None:
    """Record the command's (exit code, signal) as the allocation's (sacct's ExitCode,
    ``hal.state.command_exit``), then end the holding script: SIGWINCH (the command
    succeeded) or SIGURG (it failed: a server that keeps no status ends the job FAILED,
    exit code 1) to the batch shell, again until the job has ended; a job that does not
    end in ``RELINQUISH_SECONDS``, or is suspended, is cancelled."""
    sig = signal.SIGWINCH if status == (0, 0) else signal.SIGURG
    deadline = console.clock() + RELINQUISH_SECONDS
    recorded = False
    resend_at = 0.0  # the signal is sent again from then on
    while True:
        state, _ = _state(job_id, console)
        if state is not None and state.is_terminal:
            return
        now = console.clock()
        if state in (JobState.RUNNING, None) and now < deadline:
            if state is JobState.RUNNING and now >= resend_at:
                recorded = recorded or _record(job_id, status, console)
                # (an error: it has just ended, or the server is away; asked again)
                with contextlib.suppress(HalError):
                    if recorded:
                        console.client.cancel(job_id, signal=sig, batch_only=True)
                        resend_at = now + RESEND_SECONDS
            console.sleep(ENDED_POLL_SECONDS)  # (its end is seen as soon as it comes)
            continue
        _cancel(job_id, console)
        return


def _record(job_id: int, status: tuple[int, int], console: Console) -> bool:
    """Whether the allocation's exit status is settled: recorded, or refused for good
    (a server without the call: the job then ends COMPLETED or FAILED, exit code 1);
    False while the server cannot be reached (asked again)."""
    try:
        console.client.set_command_exit(job_id, *status)
    except (NotFound, InvalidRequest, PermissionDenied):
        return True
    except HalError:
        return False
    return True


def _terminal(console: Console) -> int | None:
    """salloc's terminal when it is in the terminal's foreground (an interactive salloc,
    not ``salloc ... &`` or one reading a pipe): the command gets it."""
    try:
        fd = console.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError):
        pass
    return None


def _start(
    command: list[str], env: dict[str, str], cwd: str, tty: int | None
) -> subprocess.Popen[bytes]:
    """The command in a process group of its own (what a revoked allocation kills),
    made the terminal's foreground group where salloc has a terminal, as Slurm's
    salloc does, so Ctrl-C and job control reach the command and not salloc."""
    if tty is None:
        return subprocess.Popen(command, env=env, cwd=cwd, process_group=0)
    # setpgid and tcsetpgrp must run in the child before it execs; salloc has no threads
    child = functools.partial(_foreground, tty)
    return subprocess.Popen(command, env=env, cwd=cwd, preexec_fn=child)  # noqa: PLW1509


def _foreground(tty: int) -> None:
    os.setpgid(0, 0)
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group's call
    os.tcsetpgrp(tty, os.getpgrp())
    signal.signal(signal.SIGTTOU, previous)


def _take_terminal(tty: int) -> None:
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(tty, os.getpgrp())
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, previous)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)
