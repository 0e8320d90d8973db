"""The step keeper: one node's tasks of a job step, kept running across agent restarts.

What the step supervisor (``supervisor``) is for a batch script, and Slurm's slurmstepd
for a step, the keeper is for a step's tasks on one node (ADR 0012)::

    step launcher ──fork──▶ keeper (``handshake``: setsid, the tasks' subreaper,
                              │ waits for "go": the launcher has recorded its pid)
                              ├──fork──▶ task per rank: setsid, join the step's cgroup,
                              │          setgroups/setgid/setuid, umask, chdir,
                              │          stdout/stderr → out.<rank>/err.<rank>,
                              │          stdin: /dev/null, -i FILE, a pipe, or
                              │          (--pty) a terminal for all three; execvpe
                              ├──fork──▶ feeder (srun's relayed stdin: input → pipes,
                              │          or → the terminal, its output → out.0)
                              │ (stops each at once while the job is suspended)
                              │ writes ``tasks`` (rank pid start-ticks), says "T"
                              │ waits for each task (exact status, its rusage; a line
                              │ in ``ends`` as each ends), kills
                              │ what it left (its session, its HAL_JOB_MARKER), then
                              │ its orphans
                              └ writes ``status.json`` ({rank: code, -N for signal N},
                                and each task's most RSS and CPU seconds)

The keeper owns nothing of the agent: its own session, the signals an agent's stop sends
ignored, every inherited descriptor closed, and the tasks' output in files of its folder
rather than pipes to the agent. So the agent can stop or crash while the tasks run on;
the next agent finds the folder, follows the files from where they are, and reads the
exact exit codes in ``status.json``.

Runs in a fork of the step launcher (single-threaded, light), started as a batch job's
step supervisor is (``handshake``): between ``fork`` and ``exec`` the tasks run Python,
which is safe here, but it imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import resource
import signal
import termios
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

from hal.agent.cpus import bind
from hal.agent.handshake import (
    end_descendants,
    fork_detached,
    fork_exec,
    restore_signals,
    write_atomic,
)
from hal.agent.isolation import Isolation
from hal.agent.procfs import processes_of
from hal.agent.step_input import feed, open_terminal
from hal.host.process import start_ticks
from hal.slurm.steps import EXEC_FAILED, own_max_rss

TASKS_FILE = "tasks"
STATUS_FILE = "status.json"
NO_INPUT = "Could not open stdin file"  # how a task's stdin failure starts (Slurm's words)
ENDS_FILE = "ends"  # "rank code" a line, as each task ends (srun -K reads it meanwhile)
STOPPED_FILE = "stopped"  # the agent's: the job is suspended, a task starting stops
STARTED = b"T"
OUTPUT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
# variables a container does not take from the job: the image's PATH, podman's own
_NOT_PASSED = frozenset({"PATH", "HOSTNAME", "container", "CONTAINERS_CONF"})
PTY_DRAIN_SECONDS = 2.0  # after the tasks, for the feeder to copy the terminal's last output


@dataclass(frozen=True, slots=True)
class KeeperPlan:
    """What the keeper and its tasks need, computed by the agent before the launch."""

    node: str
    folder: str
    argv: tuple[str, ...]
    env: dict[str, str]  # every rank's; SLURM_PROCID, SLURM_LOCALID and the marker added
    ranks: tuple[int, ...]
    marker: str  # ``HAL_JOB_MARKER=<job's>.<step>``: each task's gets ``.<rank>``
    workdir: str
    group: str  # the step's cgroup ("" without cgroups)
    memory_bytes: int
    gpus: bool
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] | None = None
    umask: int = -1  # -1: the agent's
    # srun --multi-prog: each rank's own command line, in ``ranks``' order (): ``argv``)
    rank_argv: tuple[tuple[str, ...], ...] = ()
    # each rank's own variables, in ``ranks``' order (srun --gpus-per-task: its GPUs)
    rank_env: tuple[dict[str, str], ...] = ()
    cpu_ids: tuple[int, ...] = ()  # the job's host CPUs on this node (hal.agent.cpus)
    # srun -i FILE: each rank's stdin file, in ``ranks``' order (): /dev/null for all)
    rank_input: tuple[str, ...] = ()
    # the ranks that read srun's own stdin, relayed (``step_input``): a pipe the keeper's
    # feeder fills from the folder's input file
    relayed: tuple[int, ...] = ()
    # srun --pty: rank 0 runs in a pseudo-terminal of (rows, columns), its stdin, stdout
    # and stderr, and its controlling terminal (``step_input.feed`` pumps it); (): none
    pty: tuple[int, ...] = ()
    # --container (hal.agent.containers): ``podman run`` and its options, the image
    # arguments after the tasks' variables, and HAL's containers.conf; (): none
    container: tuple[str, ...] = ()
    container_image: tuple[str, ...] = ()
    container_conf: str = ""

    def to_json(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_json(cls, text: str) -> KeeperPlan:
        data = json.loads(text)
        data["argv"] = tuple(data["argv"])
        data["ranks"] = tuple(data["ranks"])
        data["rank_argv"] = tuple(tuple(a) for a in data.get("rank_argv", ()))
        data["rank_env"] = tuple(data.get("rank_env", ()))
        data["cpu_ids"] = tuple(data.get("cpu_ids", ()))
        data["rank_input"] = tuple(data.get("rank_input", ()))
        data["relayed"] = tuple(data.get("relayed", ()))
        data["pty"] = tuple(data.get("pty", ()))
        data["container"] = tuple(data.get("container", ()))
        data["container_image"] = tuple(data.get("container_image", ()))
        if data["groups"] is not None:
            data["groups"] = tuple(data["groups"])
        return cls(**data)

    @property
    def terminal(self) -> bool:
        """Whether rank 0 is here and runs in a pseudo-terminal (srun --pty)."""
        return bool(self.pty) and 0 in self.ranks

    def command(self, rank: int) -> tuple[str, ...]:
        """What rank ``rank`` runs: its multi-prog line's command, or the step's."""
        if self.rank_argv:
            return self.rank_argv[self.ranks.index(rank)]
        return self.argv

    def stdin(self, rank: int) -> str:
        """The file rank ``rank`` reads as its stdin."""
        return self.rank_input[self.ranks.index(rank)] if self.rank_input else os.devnull

    def task_marker(self, rank: int) -> str:
        return f"{self.marker}.{rank}"


def output_path(folder: str, rank: int, stream: str) -> str:
    return os.path.join(folder, f"{'out' if stream == 'stdout' else 'err'}.{rank}")


def read_tasks(folder: str) -> dict[int, tuple[int, int]] | None:
    """rank → (pid, start ticks) of the tasks the keeper started; ``None`` before it
    wrote them (a task that could not start has pid 0)."""
    try:
        with open(os.path.join(folder, TASKS_FILE)) as f:
            lines = f.read().split("\n")
    except OSError:
        return None
    tasks: dict[int, tuple[int, int]] = {}
    for line in lines:
        if line:
            rank, pid, ticks = (int(x) for x in line.split())
            tasks[rank] = (pid, ticks)
    return tasks


def read_codes(folder: str) -> dict[int, int] | None:
    """rank → exit code (-N: killed by signal N) once every task has ended."""
    try:
        with open(os.path.join(folder, STATUS_FILE)) as f:
            return {int(k): int(v) for k, v in json.load(f)["codes"].items()}
    except (OSError, ValueError, KeyError):
        return None


def read_ends(folder: str) -> list[tuple[int, int]]:
    """(rank, exit code (-N: signal N)) of the tasks ended so far, in the order they
    ended (``ENDS_FILE``; a line being written is left for the next read)."""
    try:
        with open(os.path.join(folder, ENDS_FILE)) as f:
            text = f.read()
    except OSError:
        return []
    ends = []
    for line in text.split("\n")[:-1]:
        with contextlib.suppress(ValueError):
            rank, code = line.split()
            ends.append((int(rank), int(code)))
    return ends


def _note_end(folder: str, rank: int, code: int) -> None:
    """A task's end, as it comes, in ``ENDS_FILE`` (one append of one line)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    with contextlib.suppress(OSError):  # (status.json has it all the same, at the end)
        fd = os.open(os.path.join(folder, ENDS_FILE), flags, 0o600)
        try:
            os.write(fd, f"{rank} {code}\n".encode())
        finally:
            os.close(fd)


def read_usage(folder: str) -> dict[int, tuple[int, float]]:
    """rank → (most resident bytes, 0 when not measured; CPU seconds) of each ended
    task, as the keeper's ``wait4`` saw it; empty before (or from an older keeper)."""
    try:
        with open(os.path.join(folder, STATUS_FILE)) as f:
            found = json.load(f).get("usage", {})
        return {int(k): (int(v[0]), float(v[1])) for k, v in found.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return {}


def read_times(folder: str) -> dict[int, tuple[float, float]]:
    """rank → (user, system) CPU seconds of each ended task, the parts of ``read_usage``'s
    CPU seconds (sacct's UserCPU, SystemCPU); empty before (or from an older keeper)."""
    try:
        with open(os.path.join(folder, STATUS_FILE)) as f:
            found = json.load(f).get("times", {})
        return {int(k): (float(v[0]), float(v[1])) for k, v in found.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return {}


def spawn_keeper(plan: KeeperPlan, isolation: Isolation, started_w: int) -> tuple[int, int]:
    """Fork the keeper (``handshake.fork_detached``): its pid and the descriptor for GO;
    ``started_w`` is where it says "T" once its tasks are recorded."""
    return fork_detached(lambda started: keep(plan, isolation, started), started_w)


def keep(plan: KeeperPlan, isolation: Isolation, started_w: int) -> int:
    """The keeper's body, once GO came: start the tasks, wait for each, record their
    ends; the keeper's exit status."""
    running: dict[int, int] = {}  # pid → rank
    codes: dict[int, int] = {}
    usage: dict[int, tuple[int, float]] = {}
    times: dict[int, tuple[float, float]] = {}  # rank → its user and system seconds
    # what a task inherits of ours at its fork: our peak, at most (``own_max_rss``)
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    lines = []
    piped = [r for r in plan.relayed if r in plan.ranks and not (plan.terminal and r == 0)]
    pipes = {rank: os.pipe2(os.O_CLOEXEC) for rank in piped}
    if plan.terminal:  # rank 0's stdin is its terminal: (slave, master) for the feeder
        master, slave = open_terminal(plan.pty)
        pipes[0] = (slave, master)
    for local, rank in enumerate(plan.ranks):
        stdin = pipes[rank][0] if rank in pipes else -1
        pid = _start_task(plan, isolation, rank, local, stdin)
        if pid:
            running[pid] = rank
        else:
            codes[rank] = EXEC_FAILED
            _note_end(plan.folder, rank, EXEC_FAILED)
        ticks = (start_ticks(pid) or 0) if pid else 0  # (an exited task: a zombie yet)
        lines.append(f"{rank} {pid} {ticks}\n")
    write_atomic(plan.folder, TASKS_FILE, "".join(lines))
    feeder = _start_feeder(plan.folder, pipes, plan.terminal)
    with contextlib.suppress(OSError):  # the agent may be gone; the file is the truth
        os.write(started_w, STARTED)
    os.close(started_w)
    while running:
        try:
            pid, status, rusage = os.wait4(-1, 0)
        except ChildProcessError:
            break
        rank = running.pop(pid, -1)
        if pid == feeder:
            feeder = 0
        if rank < 0:
            continue  # an orphan reparented to us
        codes[rank] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _note_end(plan.folder, rank, codes[rank])
        cpu = rusage.ru_utime + rusage.ru_stime  # with its waited-for children's
        usage[rank] = (own_max_rss(rusage.ru_maxrss, inherited), cpu)
        times[rank] = (rusage.ru_utime, rusage.ru_stime)
        # what the task left in its session, or with its marker, goes with it (Slurm
        # ends a task's leftovers); its neighbours' markers differ
        for left in processes_of(pid, plan.task_marker(rank)):
            with contextlib.suppress(OSError):
                os.kill(left, signal.SIGKILL)
    if feeder > 0 and plan.terminal:
        _await(feeder, PTY_DRAIN_SECONDS)  # the terminal's last output, into out.0
    end_descendants()  # the tasks' orphans (the keeper is their subreaper), the feeder
    ended = {"codes": codes, "usage": usage, "times": times}
    write_atomic(plan.folder, STATUS_FILE, json.dumps(ended))
    return 0


def _start_feeder(folder: str, pipes: dict[int, tuple[int, int]], terminal: bool) -> int:
    """Fork the feeder of the relayed tasks' stdin pipes (``step_input.feed``), which
    alone keeps their write ends: a task sees EOF once the feeder closes its pipe (or
    dies with the tasks' other leftovers, ``_end_orphans``); the feeder keeps no read
    end, so a task that ends makes its writes fail instead of fill. With ``terminal``
    rank 0's "pipe" is its pseudo-terminal, whose output the feeder copies too. The
    feeder's pid (0: none)."""
    if not pipes:
        return 0
    try:
        pid = os.fork()
    except OSError:
        pid = -1  # (no feeder: the tasks read EOF at once)
    if pid == 0:  # pragma: no cover - the feeder
        for read_end, _ in pipes.values():
            os.close(read_end)
        out = os.open(output_path(folder, 0, "stdout"), OUTPUT_FLAGS, 0o600) if terminal else -1
        feed(folder, {rank: write_end for rank, (_, write_end) in pipes.items()}, out)
    for read_end, write_end in pipes.values():
        os.close(read_end)
        os.close(write_end)
    return max(pid, 0)


def _await(pid: int, seconds: float) -> None:
    """Reap child ``pid`` once it exits, waiting at most ``seconds``."""
    for _ in range(int(seconds / 0.01)):
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        time.sleep(0.01)


def _start_task(
    plan: KeeperPlan, isolation: Isolation, rank: int, local: int, stdin: int = -1
) -> int:
    """Start one rank's task; its pid, or 0 when it could not start (the reason is in
    its stderr file, as srun shows it). A task the system refuses (no descriptor or
    process left: ``pipe2``/``fork`` fail) is one that could not start: the keeper goes
    on, so the ranks started before are recorded and waited for."""
    out = err = -1
    try:
        out = os.open(output_path(plan.folder, rank, "stdout"), OUTPUT_FLAGS, 0o600)
        err = os.open(output_path(plan.folder, rank, "stderr"), OUTPUT_FLAGS, 0o600)
        env = {**plan.env, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local)}
        if plan.rank_env:
            env.update(plan.rank_env[local])
        name, value = plan.task_marker(rank).split("=", 1)
        env[name] = value
        pid, failure = _fork_task(plan, isolation, rank, env, (out, err, stdin))
    except OSError as error:
        pid, failure = 0, (error.strerror or str(error)).encode()
    try:
        if failure and err >= 0:
            reason = failure.decode(errors="replace")
            if not reason.startswith(NO_INPUT):
                reason = f"cannot run {plan.command(rank)[0]} in {plan.workdir}: {reason}"
            message = f"srun: error: {plan.node}: task {rank}: {reason}\n"
            with contextlib.suppress(OSError):  # (the exit code says it all the same)
                os.write(err, message.encode())
    finally:
        for fd in (out, err):
            if fd >= 0:
                os.close(fd)
    if failure:
        return 0
    if os.path.exists(os.path.join(plan.folder, STOPPED_FILE)):
        # its job is suspended: the agent stops the tasks it knows, and this one it does
        # not know yet (the agent's SIGCONT to its group lets it go on)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGSTOP)
    return pid


def _fork_task(
    plan: KeeperPlan,
    isolation: Isolation,
    rank: int,
    env: dict[str, str],
    fds: tuple[int, int, int],  # its stdout, its stderr, its stdin pipe (-1: none)
) -> tuple[int, bytes]:
    """Fork the task (``handshake.fork_exec``): its pid, and why its exec failed (b"":
    it runs)."""
    out, err, stdin = fds
    return fork_exec(lambda err_w: _exec_task(plan, isolation, rank, env, (out, err, err_w, stdin)))


class _NoInput(OSError):
    """The task's stdin file (srun -i FILE) cannot be opened."""


def _open_input(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # (dup2 to 0 keeps it open)
    except OSError as error:
        raise _NoInput(f"{NO_INPUT} {path}: {error.strerror}") from None


def env_flags(env: Iterable[str]) -> list[str]:
    """A container's variables (``--container``; hal.agent.containers): the job's, passed
    to ``podman run`` by name (it takes their values from its own environment), but for
    the image's ``PATH`` and podman's own."""
    return [f"--env={v}" for v in sorted(env) if v not in _NOT_PASSED]


def _exec_task(
    plan: KeeperPlan,
    isolation: Isolation,
    rank: int,
    env: dict[str, str],
    # its stdout, its stderr, the pipe for an exec failure, its relayed stdin (-1: none)
    fds: tuple[int, int, int, int],
) -> NoReturn:
    out, err, err_w, stdin = fds
    argv = plan.command(rank)
    try:
        os.setsid()  # its own session and group: signalled and killed as one
        isolation.enter(plan.group, plan.memory_bytes, gpus=plan.gpus)
        bind(plan.cpu_ids)
        # in a container, podman runs as root and starts the task as the user: the
        # user's files are opened as the user all the same (the effective ids)
        root = os.geteuid() == 0 and bool(plan.container)
        if plan.groups is not None:
            os.setgroups(list(plan.groups))
        if plan.gid is not None and root:
            os.setegid(plan.gid)
        elif plan.gid is not None:
            os.setgid(plan.gid)
        if plan.terminal and rank == 0 and plan.uid is not None:
            os.fchown(stdin, plan.uid, -1)  # its terminal is its own, as login's
            os.fchmod(stdin, 0o620)
        if plan.uid is not None and root:
            os.seteuid(plan.uid)
        elif plan.uid is not None:
            os.setuid(plan.uid)
        if plan.umask >= 0:
            os.umask(plan.umask)
        os.chdir(plan.workdir)
        os.dup2(stdin if stdin >= 0 else _open_input(plan.stdin(rank)), 0)  # as its user
        if plan.container:
            if root:
                os.seteuid(0)
                os.setegid(0)
            argv = (*plan.container, *env_flags(env), *plan.container_image, *argv)
            env = {**env, "CONTAINERS_CONF": plan.container_conf}
        if plan.terminal and rank == 0:  # its pseudo-terminal: all three, and controlling
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            out = err = 0
        os.dup2(out, 1)
        os.dup2(err, 2)
        restore_signals()
        env["SLURM_TASK_PID"] = str(os.getpid())  # (as slurmstepd sets each task's)
        os.execvpe(argv[0], argv, env)  # noqa: S606 - the user's own command
    except _NoInput as error:
        message = str(error)
    except OSError as error:
        message = error.strerror or str(error)
    except BaseException as error:
        message = repr(error)
    with contextlib.suppress(BaseException):
        os.write(err_w, message.encode()[:4000])
    os._exit(127)
