"""How the step launcher starts what it forks, and how those start their job's processes.

The launcher (``forkserver``) forks two kinds of children, each slurmstepd's part for
one thing: a batch job's **step supervisor** (``supervisor``) and a job step's **step
keeper** on this node (``stepkeeper``). Both start through this one handshake::

    launcher ──fork──▶ child: setsid; subreaper; the agent's stop signals ignored;
       │                      every inherited descriptor closed but "go" and "started"
       │ records "<pid> <start ticks>" in the folder (SUPERVISOR_FILE)
       └─ GO ───────▶ child: runs its body (``supervisor.supervise``/``stepkeeper.keep``),
                             which says on "started" what it started; _exit

A child is never started unrecorded: without GO (the launcher or the agent died before
the pid was written) it exits at once and starts nothing. Its own processes (the batch
script, the step's tasks) it starts through a second, smaller handshake, ``fork_exec``:
a close-on-exec pipe whose EOF says the exec happened and whose bytes say why it did not.

What differs between the two is named where each is defined, not written twice: the plan
the launcher reads for it (``forkserver.KINDS``), its body, and what it says on
"started" (the batch shell's pid and start time, or a launch error; a keeper "T" once its
tasks are recorded).

Fork safety: the children only make system calls and touch objects built before the fork
(no imports, no logging, no locks), so this runs safely in the single-threaded launcher
and would in a threaded process too. This module is imported by the launcher: standard
library and light agent modules only.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
from collections.abc import Callable
from typing import NoReturn

from hal.agent.prctl import PR_SET_CHILD_SUBREAPER, prctl
from hal.agent.procfs import descendants

GO = b"g"
PLAN_FILE = "plan.json"  # what the child is to do, written by the agent, read by the launcher
SUPERVISOR_FILE = "supervisor"  # "<pid> <start ticks>" of the child, by the launcher
# Signals a supervisor or keeper ignores: it must outlive the agent's stop, a terminal
# hangup and a "kill the agent's process group". SIGKILL remains, for an operator who
# means it. The processes they exec get these back (``restore_signals``).
IGNORED = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGPIPE,
)
KILL_ROUNDS = 50  # x 20 ms: a process stuck in the kernel (D state) is left to init
_RESETTABLE = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))

# exit statuses of a child that never ran its body to the end
EXIT_NO_GO = 75  # no GO: the launcher or the agent died before recording it
EXIT_CRASHED = 71  # its body raised


def fork_detached(body: Callable[[int], int], started_w: int) -> tuple[int, int]:
    """Fork a supervisor or keeper that runs ``body(started_w)`` once it gets GO; returns
    its pid and the descriptor on which to send ``GO`` (then close it) once that pid is
    recorded."""
    go_r, go_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(go_r)
        os.close(go_w)
        raise
    if pid == 0:  # pragma: no cover - runs in the child; its effects are tested
        _detached(body, go_r, started_w)
    os.close(go_r)
    return pid, go_w


def _detached(body: Callable[[int], int], go_r: int, started_w: int) -> NoReturn:
    code = 70
    try:
        os.setsid()
        # Orphans of its processes (setsid daemons, double forks) become its children
        # instead of init's: they end with the job under every backend, and their CPU
        # time counts. (Linux < 3.4 refuses: then only a cgroup finds them.)
        with contextlib.suppress(OSError):
            prctl(PR_SET_CHILD_SUBREAPER, 1)
        _ignore_signals()
        _keep_only(go_r, started_w)
        # received over SCM_RIGHTS, so inheritable: what it execs must not hold the
        # agent's pipe (the agent would wait for their end to see the pipe's)
        os.set_inheritable(started_w, False)
        if os.read(go_r, 1) != GO:
            os._exit(EXIT_NO_GO)
        os.close(go_r)
        code = body(started_w)
    except BaseException:
        code = EXIT_CRASHED
    os._exit(code)


def _ignore_signals() -> None:
    # A signal with a Python handler would write to the agent's wakeup fd number, which
    # in this process may be reused by a status file.
    signal.set_wakeup_fd(-1)
    for signum in _RESETTABLE:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)  # SIGCHLD too: wait4 needs it
    for ignored in IGNORED:
        signal.signal(ignored, signal.SIG_IGN)


def _keep_only(*fds: int) -> None:
    """Close every inherited descriptor but ``fds`` (sockets, the agent's lock, other
    jobs' pipes); point 0-2 at /dev/null so that no pipe of the agent's stays open."""
    low = 3
    for fd in sorted(fds):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)


def restore_signals() -> None:
    """In a process about to exec the user's program: the dispositions ``IGNORED`` set
    back (ignored ones survive exec, handlers do not; every other signal is SIG_DFL
    already: 7 system calls instead of one per signal) and no signal blocked."""
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def fork_exec(child: Callable[[int], NoReturn]) -> tuple[int, bytes]:
    """Fork a process that runs ``child(err_w)``, which execs or writes why it could not
    to ``err_w`` and exits; returns its pid and that reason (b"": it runs). A process
    that could not exec is reaped here."""
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError:
        os.close(err_r)
        os.close(err_w)
        raise
    if pid == 0:  # pragma: no cover - the child, until exec
        os.close(err_r)
        child(err_w)
    os.close(err_w)
    failure = b""
    try:
        while chunk := os.read(err_r, 4096):
            failure += chunk
    finally:
        os.close(err_r)
    if failure:
        os.waitpid(pid, 0)
    return pid, failure


def end_descendants(reaped: Callable[[resource.struct_rusage], None] | None = None) -> None:
    """SIGKILL every process left below the caller (a supervisor or keeper: their
    subreaper) and reap them, handing each reaped one's rusage to ``reaped``; bounded
    (``KILL_ROUNDS``): one stuck in the kernel is left to init."""
    for _ in range(KILL_ROUNDS):
        try:  # (first: most leave none, and then /proc is not read at all)
            while (found := os.wait4(-1, os.WNOHANG))[0]:
                if reaped is not None:
                    reaped(found[2])
        except ChildProcessError:
            return  # none left
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def read_recorded(folder: str) -> tuple[int, int] | None:
    """``(pid, start ticks)`` of the folder's supervisor or keeper, as the launcher
    recorded it; ``None`` before (or when it never was)."""
    try:
        with open(os.path.join(folder, SUPERVISOR_FILE)) as f:
            pid, ticks = f.read().split()
        return int(pid), int(ticks)
    except (OSError, ValueError):
        return None


def write_atomic(directory: str, name: str, text: str) -> None:
    """``directory/name`` holds ``text``, readable by its owner only: a reader sees the
    old file or the whole new one, never a part. Raw descriptors: a buffered file object
    costs more than the system calls it wraps, once per launch (bench/launch_loop.py)."""
    # No fsync: an agent crash keeps the page cache, and a node crash ends the jobs too.
    tmp = os.path.join(directory, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        data = text.encode()
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(directory, name))
