"""The step supervisor: a forked child that runs one batch script and records its end.

Like Slurm's slurmstepd, but it costs one ``fork`` rather than a new interpreter::

    step launcher ──fork──▶ supervisor (``handshake``: setsid, the job's subreaper,
                               │ waits for "go": the launcher has recorded its pid)
                               │ creates the job's cgroup
                               ├──fork──▶ job: setpgid, join cgroup, rlimits, setgroups/
                               │          setgid/setuid, chdir, open output, execve(script)
                               │ reads the exec-error pipe (CLOEXEC: EOF = exec succeeded)
                               │ writes ``started``, tells the agent "S <pid> <time>"
                               │ waits for the batch shell (waitid WNOWAIT), SIGKILLs its
                               │ leftover group, reaps it with wait4 (exact status, rusage),
                               │ kills and reaps the orphans reparented to it,
                               │ collects OOM and peak memory, removes the cgroup
                               └ writes ``status.json`` atomically and _exits

(The step launcher is a small single-threaded process the agent starts once, see
``forkserver``; forking it costs a fraction of forking the agent. It starts a job step's
keeper, ``stepkeeper``, through the same handshake.)

The supervisor owns nothing of the agent: it sits in its own session, ignores the signals
an agent's service manager or terminal would send, and closes every inherited descriptor.
So an agent can stop, crash or restart while jobs keep running, and the next agent finds
the exact exit status in ``status.json`` instead of guessing from a reparented zombie it
cannot wait for.

Fork safety (``handshake``): everything the children need is in ``StepPlan``, which the
agent computed (user and group look-ups included) and wrote to the job's folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, NoReturn

from hal.agent.cpus import bind
from hal.agent.handshake import (
    PLAN_FILE,
    end_descendants,
    fork_detached,
    fork_exec,
    restore_signals,
    write_atomic,
)
from hal.agent.isolation import Isolation
from hal.agent.procfs import PAGE_SIZE, children, descendants, open_pidfd, tree_rss_bytes
from hal.slurm.steps import oom_message

if TYPE_CHECKING:
    from hal.agent.records import ExitOutcome

STARTED_FILE = "started"
STATUS_FILE = "status.json"
STOPPING_FILE = "stopping"  # the agent is ending the job: when its SIGKILL is due
INHERITED_RSS_MARGIN = 1 << 20
LINGER_POLL_S = 0.1  # at most between looks at what a job being ended has left
WATCHDOG_MAX_INTERVAL = 0.5  # seconds between memory samples once the job is settled


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Everything the supervisor and the job process need, computed before ``fork``."""

    job_id: int
    attempt: int
    job_dir: str
    argv: tuple[str, ...]  # argv[0] is the interpreter's path
    env: dict[str, str]
    workdir: str
    stdout_path: str
    stderr_path: str | None  # None: stderr goes into the stdout file
    append: bool  # a restarted job appends to its earlier output
    memory_bytes: int
    gpus: bool
    uid: int | None = None  # switch to this user (agent running as root only)
    gid: int | None = None
    groups: tuple[int, ...] = ()
    umask: int | None = None  # the submitter's (SLURM_UMASK); None: the agent's
    denied_gpus: tuple[int, ...] = ()  # /dev/nvidia<minor>s the job may not open
    cpu_ids: tuple[int, ...] = ()  # the host CPUs it is bound to (hal.agent.cpus; (): none)
    # argv is a container runtime's (--container; hal.agent.containers): it runs as the
    # agent's user, which starts the container as ``uid``; the output files are opened
    # as ``uid`` all the same
    runtime: bool = False

    def to_json(self) -> str:
        # shallow (``asdict`` copies ``env`` and every tuple first): the same JSON
        return json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_json(cls, text: str) -> StepPlan:
        data = json.loads(text)
        data["argv"] = tuple(data["argv"])
        data["groups"] = tuple(data["groups"])
        data["denied_gpus"] = tuple(data.get("denied_gpus", ()))
        data["cpu_ids"] = tuple(data.get("cpu_ids", ()))
        return cls(**data)


def spawn_supervisor(plan: StepPlan, isolation: Isolation, started_w: int) -> tuple[int, int]:
    """Fork the supervisor (``handshake.fork_detached``): its pid and the descriptor for
    GO; ``started_w`` is where it announces the job ("S <pid> <time>", or "F <why>")."""
    return fork_detached(lambda started: supervise(plan, isolation, started), started_w)


def parse_started(message: bytes) -> tuple[int, float] | str | None:
    """``(pid, start time)`` from the supervisor's message, the launch error text, or
    ``None`` when it closed the pipe saying nothing: it was killed before it could."""
    text = message.decode(errors="replace").strip()
    if text.startswith("S "):
        _, pid, started = text.split()
        return int(pid), float(started)
    if text.startswith("F "):
        return text[2:]
    return None


def read_started(job_dir: str) -> tuple[int, float] | None:
    try:
        with open(os.path.join(job_dir, STARTED_FILE)) as f:
            pid, started = f.read().split()
        return int(pid), float(started)
    except (OSError, ValueError):
        return None


def read_status(job_dir: str) -> ExitOutcome | str | None:
    """The job's end as the supervisor wrote it: an ``ExitOutcome``, a launch error
    message, or ``None`` when there is no status (yet)."""
    # here, not at import: the fork server imports this module, and the records (with
    # ``hal.core.job``) cost it ~20 ms of CPU for nothing it does
    from hal.agent.records import ExitOutcome

    try:
        with open(os.path.join(job_dir, STATUS_FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("error"):
        return str(data["error"])
    return ExitOutcome(
        exit_code=int(data["exit_code"]),
        exit_signal=int(data["exit_signal"]),
        oom=bool(data["oom"]),
        max_rss_bytes=int(data["max_rss_bytes"]),
        cpu_seconds=float(data["cpu_seconds"]),
        user_cpu_seconds=_optional_float(data.get("user_cpu_seconds")),
        system_cpu_seconds=_optional_float(data.get("system_cpu_seconds")),
        end_time=float(data.get("end_time") or 0.0),
    )


def _optional_float(value: object) -> float | None:
    """A figure of ``status.json`` that a supervisor before it did not write: None."""
    return float(value) if isinstance(value, (int, float)) else None


# -- the supervisor (a child of the launcher) ----------------------------------------------


def supervise(plan: StepPlan, isolation: Isolation, started_w: int) -> int:
    """The supervisor's body, once GO came: run the batch script, wait for it, record
    its end; the supervisor's exit status."""
    try:
        group = isolation.create_group(
            plan.job_id,
            plan.attempt,
            plan.memory_bytes,
            plan.denied_gpus,
            owner=(plan.uid, plan.gid) if plan.uid is not None and plan.gid is not None else None,
            cpus=plan.cpu_ids,
        )
    except OSError as err:
        return _launch_failed(plan, started_w, f"cannot create the job's cgroup: {err}")
    pid, failure = fork_exec(lambda err_w: _exec_job(plan, isolation, group, err_w))
    if failure:
        isolation.collect(group, killed_by_sigkill=False)
        return _launch_failed(plan, started_w, failure.decode(errors="replace"))
    started = time.time()
    inherited_rss = _own_rss_bytes()
    write_atomic(plan.job_dir, STARTED_FILE, f"{pid} {started!r}")
    with contextlib.suppress(OSError):  # the agent may be gone; the file is the truth
        os.write(started_w, f"S {pid} {started!r}\n".encode())
    os.close(started_w)

    orphans = _Orphans(pid)
    watchdog_killed = _wait_for_exit(pid, plan, isolation, orphans)
    if (kill_at := _stopping(plan)) is not None:  # they have until then to end on SIGTERM
        watched = isolation.watchdog and plan.memory_bytes > 0  # (rlimit: no cgroup limit)
        orphans.linger(kill_at, partial(_over, plan.memory_bytes) if watched else None)
    # The batch shell is a zombie now, so its pid still names the process group: kill
    # what it left behind (Slurm ends all of a job's processes with its script).
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    orphans.end_all()  # and what left the group
    exit_signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
    memory = isolation.collect(group, killed_by_sigkill=exit_signal == signal.SIGKILL)
    if memory.oom_kills:
        node = plan.env.get("SLURMD_NODENAME", "")
        tell_job(plan, oom_message(node, memory.oom_kills, f"{plan.job_id}.batch") + "\n")
    user = usage.ru_utime + orphans.user_seconds
    system = usage.ru_stime + orphans.system_seconds
    result = {
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "oom": memory.oom or watchdog_killed,
        "max_rss_bytes": memory.peak_bytes or _job_max_rss(usage.ru_maxrss, inherited_rss),
        # the script's and its waited-for children's (wait4's rusage), and its orphans'
        # (``_Orphans``): user and system apart too (sacct's UserCPU, SystemCPU)
        "cpu_seconds": user + system,
        "user_cpu_seconds": user,
        "system_cpu_seconds": system,
        "end_time": time.time(),
    }
    write_atomic(plan.job_dir, STATUS_FILE, json.dumps(result))
    return 0


def tell_job(plan: StepPlan, text: str) -> None:
    """Append slurmstepd's ``text`` to the job's error output as the job opened it: by
    its user, from its working directory (root never writes where the user could not).
    A shell run as that user does the writing, so that the agent, whose threads rule out
    a bare ``fork``, can call it as the supervisor does. Best effort: a file that is gone
    or that the user cannot write gets nothing."""
    path = plan.stderr_path or plan.stdout_path
    append = ["/bin/sh", "-c", 'test -e "$2" && printf "%s" "$1" >> "$2"', "sh", text, path]
    as_user = plan.uid is not None
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            append,
            cwd=plan.workdir,
            env={"PATH": "/usr/bin:/bin"},
            user=plan.uid,
            group=plan.gid,
            extra_groups=list(plan.groups) if as_user else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )


def tell_job_from_agent(job_dir: str, text: str) -> None:
    """``tell_job`` for the job whose plan is in ``job_dir`` (nothing if it is gone)."""
    try:
        with open(os.path.join(job_dir, PLAN_FILE)) as f:
            plan = StepPlan.from_json(f.read())
    except (OSError, ValueError):
        return
    tell_job(plan, text)


class _Orphans:
    """The job's processes reparented to the supervisor (its subreaper) when their
    parents ended: reaped as they exit, killed when the job ends, their CPU time kept."""

    def __init__(self, shell: int) -> None:
        self.shell = shell
        self.user_seconds = 0.0
        self.system_seconds = 0.0

    def reap(self, *, block: bool) -> bool:
        """Reap exited orphans (waiting for one with ``block``) until the batch shell
        has exited, which is left unreaped; returns whether it has."""
        flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
        while (info := os.waitid(os.P_ALL, 0, flags)) is not None:
            if info.si_pid == self.shell:
                return True
            self._reaped(os.wait4(info.si_pid, 0)[2])
        return False

    def linger(self, kill_at: float, over: Callable[[], bool] | None = None) -> None:
        """The job is being ended (SIGTERM sent, SIGKILL due at ``kill_at``) and its batch
        shell has exited: until then, or until none is left, reap the processes it left
        behind as they end on the SIGTERM (a task saving its work, srun waiting for its
        step's tasks and printing their ends), rather than SIGKILL them now; no longer
        once ``over`` (the rlimit backend's memory watchdog) says they use too much."""
        me = os.getpid()
        while (left := time.time()) < kill_at and not (over is not None and over()):
            kids = [pid for pid in children(me) if pid != self.shell]
            for pid in kids:
                with contextlib.suppress(ChildProcessError):
                    done, _, usage = os.wait4(pid, os.WNOHANG)
                    if done:
                        self._reaped(usage)
            if not any(pid != self.shell for pid in descendants(me)):
                return
            # woken as soon as one of them exits (srun, once its step's end is relayed)
            pidfds = [fd for pid in kids if (fd := open_pidfd(pid)) is not None]
            poller = select.poll()
            for fd in pidfds:
                poller.register(fd, select.POLLIN)
            poller.poll(min(kill_at - left, LINGER_POLL_S) * 1000)
            for fd in pidfds:
                os.close(fd)

    def end_all(self) -> None:
        """After the batch shell was reaped: SIGKILL every process left below the
        supervisor and reap them, their CPU time counted."""
        end_descendants(self._reaped)

    def _reaped(self, usage: resource.struct_rusage) -> None:
        self.user_seconds += usage.ru_utime
        self.system_seconds += usage.ru_stime


def _wait_for_exit(pid: int, plan: StepPlan, isolation: Isolation, orphans: _Orphans) -> bool:
    """Block until the batch shell has exited (without reaping it), reaping orphans
    meanwhile. With the rlimit backend, sample the tree's memory too; returns whether the
    watchdog killed it."""
    if not (isolation.watchdog and plan.memory_bytes > 0):
        orphans.reap(block=True)
        return False
    pidfd = open_pidfd(pid)
    poller = select.poll()
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    interval = 0.02  # frequent at first: a memory hog grows fast after start
    killed = False
    while not orphans.reap(block=False):
        if not killed and _job_rss_bytes() > plan.memory_bytes:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            killed = True
        if pidfd is not None:
            poller.poll(interval * 1000)
        else:
            time.sleep(interval)
        interval = min(interval * 2, WATCHDOG_MAX_INTERVAL)
    return killed


def _stopping(plan: StepPlan) -> float | None:
    """When the agent's SIGKILL of the job is due, if it is ending the job (None: the
    batch script ended by itself)."""
    try:
        with open(os.path.join(plan.job_dir, STOPPING_FILE)) as f:
            return float(f.read())
    except (OSError, ValueError):
        return None


def _over(memory_bytes: int) -> bool:
    """Whether the job's processes use more than ``memory_bytes`` (the rlimit watchdog)."""
    return _job_rss_bytes() > memory_bytes


def _job_rss_bytes() -> int:
    """Resident memory of every process below the supervisor: the batch shell's tree and
    the orphans reparented to it, which are no longer in that tree."""
    return sum(tree_rss_bytes(child) for child in children(os.getpid()))


def _job_max_rss(ru_maxrss_kib: int, inherited: int) -> int:
    """The job's peak resident memory without a cgroup to ask, or 0 when unknown.

    The batch shell began as a fork of this (Python) process, and Linux carries the peak
    RSS across exec, so ``ru_maxrss`` is at least our size. A larger value is the job's.
    """
    peak = ru_maxrss_kib * 1024
    return peak if peak > inherited + INHERITED_RSS_MARGIN else 0


def _own_rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def _launch_failed(plan: StepPlan, started_w: int, message: str) -> int:
    write_atomic(plan.job_dir, STATUS_FILE, json.dumps({"error": message}))
    with contextlib.suppress(OSError):
        os.write(started_w, f"F {message}\n".encode()[:4000])
    os.close(started_w)
    return 0


# -- the job process (grandchild) ----------------------------------------------------------


def _exec_job(plan: StepPlan, isolation: Isolation, group: str, err_w: int) -> NoReturn:
    stage = "start a process group"
    try:
        os.setpgid(0, 0)  # its own group, so that group signals never hit the supervisor
        stage = "enter the job's cgroup or limits"
        isolation.enter(group, plan.memory_bytes, gpus=plan.gpus)
        bind(plan.cpu_ids)
        as_user = plan.uid is not None and plan.gid is not None
        if as_user:
            assert plan.uid is not None and plan.gid is not None
            stage = f"switch to uid {plan.uid}"
            os.setgroups(list(plan.groups))
            if plan.runtime:  # the user's ids until the files are open, then root's
                os.setegid(plan.gid)
                os.seteuid(plan.uid)
            else:
                os.setgid(plan.gid)
                os.setuid(plan.uid)
        if plan.umask is not None:
            os.umask(plan.umask)
        # Output files are opened as the job's user and with its umask, so root never
        # writes where the user could not, and the files are as private as the user's own.
        stage = f"enter the working directory {plan.workdir}"
        moved = b""
        try:
            os.chdir(plan.workdir)
        except OSError as missing:  # as slurmstepd: said in the job's output, run in /tmp
            node = plan.env.get("SLURMD_NODENAME", "")
            moved = (
                f"slurmstepd-{node}: error: couldn't chdir to `{plan.workdir}': "
                f"{missing.strerror}: going to /tmp instead\n"
            ).encode()
            os.chdir("/tmp")
        # O_APPEND either way: slurmstepd's lines (``tell_job``) are added to the same
        # file by another open, and a job's processes write on after them while it ends
        mode = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if plan.append else os.O_TRUNC)
        stage = f"open the output file {plan.stdout_path}"
        out = os.open(plan.stdout_path, mode, 0o644)
        os.dup2(out, 1)
        if plan.stderr_path is not None:
            stage = f"open the error file {plan.stderr_path}"
            err = os.open(plan.stderr_path, mode, 0o644)
            os.dup2(err, 2)
            os.close(err)
        else:
            os.dup2(out, 2)
        os.close(out)
        if moved:
            os.write(2, moved)
        if as_user and plan.runtime:
            stage = "start the container runtime as root"
            os.seteuid(0)
            os.setegid(0)
        stage = "reset signals"
        restore_signals()
        env = dict(plan.env)
        env["SLURM_TASK_PID"] = str(os.getpid())
        stage = f"run {plan.argv[0]}"
        os.execve(plan.argv[0], plan.argv, env)  # noqa: S606 - the user's own script
    except OSError as err:
        message = f"cannot {stage}: {err.strerror or err}"
    except BaseException as err:
        message = f"cannot {stage}: {err!r}"
    with contextlib.suppress(BaseException):
        os.write(err_w, message.encode()[:4000])
    os._exit(127)
