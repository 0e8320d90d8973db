"""Job steps' tasks on this node (ADR 0012): ``StepLaunch`` in, output and ends out.

``srun`` inside a job asks the control plane for a step; each node of the step gets a
``StepLaunch`` with its ranks. ``StepTasks`` starts one process per rank, as the job's
user (``plan.resolve_user``, as for the batch script), in the job's working directory,
each in its own session and process group, with the job's environment for this node
(``environment.job_environment``) plus the step's ``SLURM_STEP_*`` and the task's
``SLURM_PROCID``/``SLURM_LOCALID``. Their stdout and stderr are pipes the agent reads;
the bytes wait in memory, by offset, until a sync that carried them was answered (the
server takes each byte once), and the node's end (the highest exit code, 128+N for a
signal N) goes after the last byte. A suspended job's steps get ``StepSignal(SIGSTOP)``
and later ``SIGCONT``: a stopped task has not ended (only its exit wakes ``_exited``),
and one that starts while its step is stopped is stopped at once.

Unlike batch scripts, step tasks are not adopted across agent restarts: they are the
agent's own children, so a stopping agent kills them and the server ends that node's
part when the agent registers again without them. An agent registering while they run
(its server restarted or forgot the node) lists them (``running``); the server answers
with those it does not know, which the agent then ends.

Memory: a step's tasks on a node run in the cgroup ``job_<id>.<n>/step_<m>`` inside the
job's (``Isolation.create_step_group``, Slurm's ``job_N/step_M``), so the job's memory on
that node bounds its batch script and all its steps together; on a node without the
batch script the job's cgroup is made for its steps, with the job's memory there, and
removed after the last. A task joins the cgroup between ``fork`` and ``exec`` (``_Enter``),
before it can allocate or fork. An OOM kill in the step's cgroup ends the node's part as
out of memory (the step is OUT_OF_MEMORY). Under the rlimit backend a watchdog sums the
step's tasks' resident memory and kills them past the job's memory (Slurm's
OverMemoryKill). The cgroup's removal kills what the tasks left in it; without cgroups a
task's leftovers are found by session (``procfs.processes_of``: the session, and
``HAL_JOB_MARKER`` for processes that left it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from hal.agent.environment import MARKER, job_environment, job_marker
from hal.agent.isolation import Isolation, remove_group
from hal.agent.plan import LaunchError, job_umask, resolve_user
from hal.agent.procfs import open_pidfd, processes_of, tree_rss_bytes
from hal.wire.agent import (
    RunningStep,
    StepEnd,
    StepLaunch,
    StepOutput,
    StepSignal,
    StepTaskUsage,
)

log = logging.getLogger("hal.agent")

READ_BYTES = 1 << 16
RECENTLY_ENDED = 4096
POLL_SECONDS = 0.2  # how often a task is checked where there is no pidfd
MAX_SYNC_BYTES = 1 << 20  # step output per sync; the rest goes with the next
EXEC_FAILED = 2  # a task that could not start, as Slurm's srun reports it
DRAIN_SECONDS = 5.0  # after a task exits, how long its pipes may stay open (a leftover)
WATCHDOG_MAX_SECONDS = 0.5  # rlimit backend: between memory samples once settled
# what describes the node srun ran on: each node sets its own (job_environment)
NODE_LOCAL = frozenset(
    {
        "ENVIRONMENT",
        "SLURMD_NODENAME",
        "SLURM_NODEID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_TASK_PID",
        "SLURM_CPUS_ON_NODE",
        "SLURM_JOB_CPUS_PER_NODE",
        "SLURM_MEM_PER_NODE",
        "SLURM_GPUS_ON_NODE",
        "SLURM_JOB_GPUS",
        "CUDA_VISIBLE_DEVICES",
        "HAL_NODE",
        "HAL_NODE_INDEX",
        "HAL_CPUS_ON_NODE",
        "HAL_MEM_PER_NODE",
        "HAL_GPUS_ON_NODE",
        "HAL_JOB_GPUS",
        MARKER,
    }
)

Key = tuple[int, int]  # (job id, step id)


@dataclass(slots=True)
class _Stream:
    sent: int = 0  # offset of data[0]: what a answered sync carried is gone
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _NodeStep:
    """This node's part of one step."""

    launch: StepLaunch
    streams: dict[tuple[int, str], _Stream] = field(default_factory=dict)
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)  # by rank
    exit_code: int | None = None  # set when every task ended and its pipes closed
    exit_signal: int = 0  # the signal that ended the task of ``exit_code`` (0: it exited)
    oom: bool = False  # a task was killed for the job's memory limit
    group: str = ""  # its cgroup on this node ("" without cgroups)
    # its job is suspended (SIGSTOP came, no SIGCONT since): a task started now stops too
    stopped: bool = False

    def write(self, rank: int, stream: str, data: bytes) -> None:
        self.streams.setdefault((rank, stream), _Stream()).data.extend(data)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What one sync carries, and what its answer lets go of."""

    output: list[StepOutput]
    ends: list[StepEnd]
    upto: dict[tuple[int, int, int, str], int]  # (job, step, rank, stream) → end offset


class StepTasks:
    def __init__(
        self,
        node: str,
        *,
        agent: str,
        unknown_users_as_agent: bool,
        notify: Callable[[], None],
        isolation: Isolation | None = None,
    ) -> None:
        self.node = node
        self.agent = agent
        self.unknown_users_as_agent = unknown_users_as_agent
        # the agent's backend, known once it started (``AgentShell.run`` sets it)
        self.isolation = isolation or Isolation("none")
        self._made_groups: set[tuple[int, int]] = set()  # (job, attempt): job cgroups made here
        self._peaks: dict[tuple[int, int, int], int] = {}  # (job, step, rank) → most RSS
        self._notify = notify  # there is something to send
        self._steps: dict[Key, _NodeStep] = {}
        self._done: deque[Key] = deque(maxlen=RECENTLY_ENDED)  # a repeated launch: ignored
        self._queue: asyncio.Queue[StepLaunch] = asyncio.Queue()

    # -- instructions ----------------------------------------------------------------------

    def launch(self, launch: StepLaunch) -> None:
        key = (launch.job_id, launch.step_id)
        if key not in self._steps and key not in self._done:
            self._steps[key] = _NodeStep(launch)
            self._queue.put_nowait(launch)

    def running(self) -> list[RunningStep]:
        """The steps whose tasks still run here (told to the server at registration)."""
        return [
            RunningStep(job_id=job_id, step_id=step_id)
            for (job_id, step_id), step in self._steps.items()
            if step.exit_code is None
        ]

    def usage_targets(self) -> list[tuple[int, int, int, int]]:
        """(job, step, rank, pid) of every task running here, for ``sample_usage``."""
        return [
            (job_id, step_id, rank, proc.pid)
            for (job_id, step_id), step in self._steps.items()
            for rank, proc in step.procs.items()
            if proc.returncode is None
        ]

    def usage(
        self, sampled: list[tuple[tuple[int, int, int, int], tuple[int, float]]]
    ) -> list[StepTaskUsage]:
        """The tasks' samples (``procfs.tree_usage`` of ``usage_targets``) with the most
        memory each task's samples have shown (ended tasks' peaks go)."""
        peaks: dict[tuple[int, int, int], int] = {}
        out: list[StepTaskUsage] = []
        for (job_id, step_id, rank, _), (rss, cpu) in sampled:
            key = (job_id, step_id, rank)
            peak = peaks[key] = max(rss, self._peaks.get(key, 0))
            out.append(
                StepTaskUsage(
                    job_id=job_id,
                    step_id=step_id,
                    rank=rank,
                    rss_bytes=rss,
                    max_rss_bytes=peak,
                    cpu_seconds=cpu,
                )
            )
        self._peaks = peaks
        return out

    def signal(self, request: StepSignal) -> None:
        loop = asyncio.get_running_loop()
        for (job_id, step_id), step in self._steps.items():
            if job_id != request.job_id or request.step_id not in (None, step_id):
                continue
            if request.kill_wait_seconds is not None:
                self._signal(step, signal.SIGCONT)
                loop.call_later(request.kill_wait_seconds, self._signal, step, signal.SIGKILL)
            self._signal(step, request.signal)

    def _signal(self, step: _NodeStep, signum: int) -> None:
        if signum in (signal.SIGSTOP, signal.SIGCONT):
            step.stopped = signum == signal.SIGSTOP
        for rank, proc in step.procs.items():
            if proc.returncode is not None:
                continue
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signum)
            # left the group, not the session (or the session too, keeping the marker)
            for pid in processes_of(proc.pid, _marker(self.agent, step.launch, rank)):
                with contextlib.suppress(OSError):
                    os.kill(pid, signum)

    # -- the tasks ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Start each step's tasks as launches come; at the end (the agent stops), kill
        every task still running: they are not adopted by the next agent."""
        try:
            async with asyncio.TaskGroup() as tasks:
                while True:
                    launch = await self._queue.get()
                    tasks.create_task(self._run_step(self._steps[(launch.job_id, launch.step_id)]))
        finally:
            for step in self._steps.values():
                self._signal(step, signal.SIGKILL)
                if step.group and step.exit_code is None:
                    remove_group(step.group)  # (blocks: the agent is stopping)
            for job in self._made_groups:
                self.isolation.release_job_group(*job)

    async def _run_step(self, step: _NodeStep) -> None:
        launch = step.launch
        try:
            env, user = self._environment(launch)
        except LaunchError as err:
            step.write(launch.ranks[0], "stderr", f"srun: error: {self.node}: {err}\n".encode())
            self._ended(step, EXEC_FAILED)
            return
        job = (launch.job_id, launch.launch.attempt)
        try:
            step.group, made = self.isolation.create_step_group(
                *job,
                launch.step_id,
                launch.launch.memory_bytes,
                batch_here=launch.launch.node_index == 0,
            )
        except OSError as err:
            message = f"srun: error: {self.node}: cannot create the step's cgroup: {err}\n"
            step.write(launch.ranks[0], "stderr", message.encode())
            self._ended(step, EXEC_FAILED)
            return
        if made:
            self._made_groups.add(job)
        watchdog = None
        if self.isolation.watchdog and launch.launch.memory_bytes > 0:
            watchdog = asyncio.ensure_future(self._watch_memory(step))
        try:
            codes = await asyncio.gather(
                *(
                    self._run_task(step, rank, local, env, user)
                    for local, rank in enumerate(launch.ranks)
                )
            )
        except Exception as err:  # a bug must end this step, not the agent and its jobs
            log.exception("step %d.%d failed on %s", launch.job_id, launch.step_id, self.node)
            self._signal(step, signal.SIGKILL)
            message = f"srun: error: {self.node}: the agent failed to run the step: {err}\n"
            step.write(launch.ranks[0], "stderr", message.encode())
            codes = [EXEC_FAILED]
        finally:
            if watchdog is not None:
                watchdog.cancel()
        # the worst task: the highest exit code, 128+N for a signal N
        worst = max(codes, key=lambda c: c if c >= 0 else 128 - c)
        if step.group:  # kills what the tasks left in it; reads its OOM kills
            killed = any(c == -signal.SIGKILL for c in codes)
            memory = await asyncio.to_thread(self.isolation.collect, step.group, killed)
            step.oom = step.oom or memory.oom
            self._release(job, step)
        self._ended(step, worst if worst >= 0 else 128 - worst, max(0, -worst))

    def _release(self, job: tuple[int, int], ending: _NodeStep) -> None:
        """Remove the job's cgroup made here for its steps once none of them runs."""
        if job not in self._made_groups:
            return
        for (job_id, _), other in self._steps.items():
            same = (job_id, other.launch.launch.attempt) == job
            if same and other is not ending and other.exit_code is None:
                return
        self._made_groups.discard(job)
        self.isolation.release_job_group(*job)

    async def _watch_memory(self, step: _NodeStep) -> None:
        """rlimit backend: SIGKILL the step's tasks here once their resident memory is
        past the job's memory on this node, as the batch step's watchdog does."""
        limit = step.launch.launch.memory_bytes
        interval = 0.02  # frequent at first: a memory hog grows fast after start
        while True:
            pids = [p.pid for p in step.procs.values() if p.returncode is None]
            used = await asyncio.to_thread(_rss_bytes, pids)
            if used > limit:
                step.oom = True
                self._signal(step, signal.SIGKILL)
                return
            await asyncio.sleep(interval)
            interval = min(interval * 2, WATCHDOG_MAX_SECONDS)

    async def _run_task(
        self,
        step: _NodeStep,
        rank: int,
        local: int,
        env: dict[str, str],
        user: tuple[int | None, int | None, tuple[int, ...] | None, int],
    ) -> int:
        launch = step.launch
        task_env = {
            **env,
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(local),
            MARKER: _marker(self.agent, launch, rank).split("=", 1)[1],
        }
        uid, gid, groups, umask = user
        enter = _Enter(self.isolation, step.group, launch, uid, gid, groups)
        try:
            # subprocess, not asyncio's: uvloop's cannot switch users (Popen returns once
            # the child has exec'd: about a millisecond)
            proc = subprocess.Popen(  # noqa: ASYNC220 - fast; see above
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=launch.launch.workdir,
                env=task_env,
                start_new_session=True,  # its own session and group: killed as one
                umask=umask,
                preexec_fn=enter if enter.needed else None,  # noqa: PLW1509 - see _Enter
            )
        except (OSError, subprocess.SubprocessError) as err:
            message = (
                f"srun: error: {self.node}: task {rank}: cannot run {launch.argv[0]} in "
                f"{launch.launch.workdir}: {getattr(err, 'strerror', None) or err}\n"
            )
            step.write(rank, "stderr", message.encode())
            self._notify()
            return EXEC_FAILED
        step.procs[rank] = proc
        if step.stopped:  # the job was suspended before this task started
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGSTOP)
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            asyncio.ensure_future(self._pump(step, rank, "stdout", proc.stdout)),
            asyncio.ensure_future(self._pump(step, rank, "stderr", proc.stderr)),
        ]
        code = await _exited(proc)
        # what the task left in its session goes with it (Slurm ends a task's leftovers)
        for pid in processes_of(proc.pid, _marker(self.agent, launch, rank)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _, late = await asyncio.wait(readers, timeout=DRAIN_SECONDS)
        for reader in late:  # a process that left the session holds the pipe
            reader.cancel()
        return code  # -N: killed by signal N

    async def _pump(self, step: _NodeStep, rank: int, stream: str, pipe: IO[bytes]) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_BYTES)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while data := await reader.read(READ_BYTES):
                step.write(rank, stream, data)
                self._notify()
        finally:
            transport.close()

    def _environment(
        self, launch: StepLaunch
    ) -> tuple[dict[str, str], tuple[int | None, int | None, tuple[int, ...] | None, int]]:
        job = launch.launch
        run_as = resolve_user(job, unknown_users_as_agent=self.unknown_users_as_agent)
        mine = {k: v for k, v in job.environment.items() if k not in NODE_LOCAL}
        env = job_environment(
            job.model_copy(update={"environment": mine}),
            self.node,
            home=run_as.home,
            shell=run_as.shell,
        )
        del env["ENVIRONMENT"]  # BATCH is the batch script's
        env.update(launch.environment)
        env["SLURM_NODEID"] = str(launch.step_node_index)
        umask = job_umask(env)
        groups = run_as.groups if run_as.uid is not None else None
        return env, (run_as.uid, run_as.gid, groups, -1 if umask is None else umask)

    def _ended(self, step: _NodeStep, exit_code: int, exit_signal: int = 0) -> None:
        step.exit_code = exit_code
        step.exit_signal = exit_signal
        step.procs.clear()
        self._notify()

    # -- what the syncs carry --------------------------------------------------------------

    def pending(self) -> bool:
        return any(
            s.exit_code is not None or any(b.data for b in s.streams.values())
            for s in self._steps.values()
        )

    def outgoing(self) -> Outgoing:
        """The output not yet answered for, at most ``MAX_SYNC_BYTES``, and the ends of
        steps whose output is all in it."""
        output: list[StepOutput] = []
        ends: list[StepEnd] = []
        upto: dict[tuple[int, int, int, str], int] = {}
        budget = MAX_SYNC_BYTES
        for (job_id, step_id), step in self._steps.items():
            complete = True
            for (rank, stream), buf in step.streams.items():
                if not buf.data:
                    continue
                part = bytes(buf.data[:budget])
                if len(part) < len(buf.data):
                    complete = False
                if not part:
                    continue
                budget -= len(part)
                output.append(
                    StepOutput(
                        job_id=job_id,
                        step_id=step_id,
                        rank=rank,
                        stream=stream,  # type: ignore[arg-type]
                        offset=buf.sent,
                        data_b64=base64.b64encode(part).decode(),
                    )
                )
                upto[(job_id, step_id, rank, stream)] = buf.sent + len(part)
            if step.exit_code is not None and complete:
                ends.append(
                    StepEnd(
                        job_id=job_id,
                        step_id=step_id,
                        exit_code=step.exit_code,
                        exit_signal=step.exit_signal,
                        oom=step.oom,
                    )
                )
        return Outgoing(output, ends, upto)

    def delivered(self, sent: Outgoing) -> None:
        """A sync carrying ``sent`` was answered: the server has it."""
        for (job_id, step_id, rank, stream), end in sent.upto.items():
            step = self._steps.get((job_id, step_id))
            buf = step.streams.get((rank, stream)) if step is not None else None
            if buf is not None and end > buf.sent:
                del buf.data[: end - buf.sent]
                buf.sent = end
        for done in sent.ends:
            if self._steps.pop((done.job_id, done.step_id), None) is not None:
                self._done.append((done.job_id, done.step_id))


async def _exited(proc: subprocess.Popen[bytes]) -> int:
    """Wait for ``proc`` without blocking the loop: its pidfd (Linux 5.3+), else polling."""
    pidfd = open_pidfd(proc.pid)
    if pidfd is None:
        while proc.poll() is None:  # noqa: ASYNC110 - nothing to wake on without a pidfd
            await asyncio.sleep(POLL_SECONDS)
        return proc.returncode
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(pidfd, ready.set)
    try:
        await ready.wait()
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return proc.wait()


def _rss_bytes(pids: list[int]) -> int:
    return sum(tree_rss_bytes(pid) for pid in pids)


class _Enter:
    """What a task does between ``fork`` and ``exec``, as root: join the step's cgroup
    (or take the rlimit backend's address-space backstop), then become the job's user.
    Before the switch, because the cgroup's files are root's; and before ``exec``, so
    that nothing the task allocates or forks escapes its cgroup, which moving it after
    ``Popen`` returned would allow.

    Run by ``subprocess`` in the forked child of a process with threads (the agent's
    ``to_thread`` workers), so it only makes system calls through ``os`` and
    ``resource`` (as ``supervisor._exec_job`` does): no imports, logging or locks."""

    def __init__(
        self,
        isolation: Isolation,
        group: str,
        launch: StepLaunch,
        uid: int | None,
        gid: int | None,
        groups: tuple[int, ...] | None,
    ) -> None:
        self.isolation = isolation
        self.group = group
        self.memory_bytes = launch.launch.memory_bytes
        self.gpus = bool(launch.launch.gpu_ids)
        self.uid, self.gid, self.groups = uid, gid, groups
        rlimit = isolation.kind == "rlimit" and self.memory_bytes > 0
        self.needed = bool(group) or rlimit or uid is not None or gid is not None

    def __call__(self) -> None:
        self.isolation.enter(self.group, self.memory_bytes, gpus=self.gpus)
        if self.groups is not None:
            os.setgroups(list(self.groups))
        if self.gid is not None:
            os.setgid(self.gid)
        if self.uid is not None:
            os.setuid(self.uid)


def _marker(agent: str, launch: StepLaunch, rank: int) -> str:
    """``HAL_JOB_MARKER=...`` of one task, as ``processes_of`` looks for it: the job's
    marker with the step id and rank after it, so the cleanup after one task's end spares
    its neighbours (and the batch job's own marker matches none)."""
    job = job_marker(agent, launch.job_id, launch.launch.attempt)
    return f"{MARKER}={job}.{launch.step_id}.{rank}"
