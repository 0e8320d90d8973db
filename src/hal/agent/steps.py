"""Job steps' tasks on this node (ADR 0012): ``StepLaunch`` in, output and ends out.

``srun`` inside a job asks the control plane for a step; each node of the step gets a
``StepLaunch`` with its ranks. ``StepTasks`` starts them through a step keeper
(``stepkeeper``, forked by a step launcher of its own, as batch scripts' supervisors
are): one process per rank, as the job's user (``plan.resolve_user``, as for the batch
script), in the job's working directory, each in its own session and process group, with
the job's environment for this node (``environment.job_environment``) plus the step's
``SLURM_STEP_*`` and the task's ``SLURM_PROCID``/``SLURM_LOCALID``. The tasks write into
files of the step's folder (``<state dir>/steps/<job>.<step>``), which the agent follows;
the bytes wait in memory, by offset, until a sync that carried them was answered (the
server takes each byte once), and the node's end (the highest exit code, 128+N for a
signal N, from the keeper's ``status.json``, with what each task used: ``_totals``) goes
after the last byte. A suspended job's steps get ``StepSignal(SIGSTOP)`` and later
``SIGCONT``: a stopped task has not ended, and one that starts while its step is stopped
is stopped at once.

Step tasks survive an agent restart, as batch jobs do: the keeper, not the agent, is
their parent and records their ends, and the folder holds the launch, the keeper's pid
and start time, the tasks' pids and their output. The next agent adopts every folder it
finds (``adopt``, before it registers), follows the files from their start (the server
skips the bytes it has), signals the tasks by pid and start time, and reports the ends.
The folder goes once the server has the node's end. At registration the agent lists all
the steps it holds (``running``); the server answers with those it does not want (their
job ended, or a server that does not know them), which the agent then ends.

Memory: a step's tasks on a node run in the cgroup ``job_<id>.<n>/step_<m>`` inside the
job's (``Isolation.create_step_group``, Slurm's ``job_N/step_M``), so the job's memory on
that node bounds its batch script and all its steps together; on a node without the
batch script the job's cgroup is made for its steps, with the job's memory there, and
removed after the last. A task joins the cgroup between ``fork`` and ``exec``, before it
can allocate or fork. An OOM kill in the step's cgroup ends the node's part as out of
memory (the step is OUT_OF_MEMORY). Under the rlimit backend a watchdog sums the step's
tasks' resident memory and kills them past the job's memory (Slurm's OverMemoryKill).
The cgroup's removal kills what the tasks left in it; without cgroups the keeper finds a
task's leftovers by session (``procfs.processes_of``: the session, and
``HAL_JOB_MARKER`` for processes that left it) and, as their subreaper, its orphans.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hal.agent.artifacts import ArtifactCache, ArtifactError
from hal.agent.channel import AgentChannelError
from hal.agent.cpus import CpuPool
from hal.agent.environment import (
    MARKER,
    job_environment,
    job_marker,
    step_gpu_environment,
    task_gpu_environments,
)
from hal.agent.gpus import GpuInventory, denied_minors
from hal.agent.gpuusage import GpuTally, ProcessGpu
from hal.agent.isolation import Isolation, signal_procs
from hal.agent.launcher import LaunchReply, StepLauncher
from hal.agent.plan import LaunchError, job_umask, resolve_user, task_inputs
from hal.agent.procfs import Usage, open_pidfd, processes_of, tree_rss_bytes
from hal.agent.step_input import (
    INPUT_WAKE,
    OUTPUT_WAKE,
    drain,
    end_input,
    make_wakes,
    open_wake,
    read_fed,
    wake,
    write_input,
    write_size,
)
from hal.agent.stepkeeper import (
    KEEPER_PLAN,
    STOPPED_FILE,
    KeeperPlan,
    output_path,
    read_codes,
    read_ends,
    read_tasks,
    read_times,
    read_usage,
)
from hal.agent.supervisor import read_supervisor, write_atomic
from hal.host.process import start_ticks
from hal.slurm.steps import (
    EXEC_FAILED,
    TIME_LIMIT,
    cancelled_message,
    force_terminated,
    oom_message,
    stamp,
    task_errors,
    terminating,
    worst_exit,
)
from hal.wire.agent import (
    RunningStep,
    StepBadExit,
    StepEnd,
    StepInput,
    StepInputFed,
    StepLaunch,
    StepOutput,
    StepSignal,
    StepTaskUsage,
)
from hal.wire.steps import TaskTotals

log = logging.getLogger("hal.agent")

READ_BYTES = 1 << 16
RECENTLY_ENDED = 4096
MAX_SYNC_BYTES = 1 << 20  # step output per sync; the rest goes with the next
FOLLOW_MIN_SECONDS = 0.01  # between reads of the tasks' output files, after output
FOLLOW_MAX_SECONDS = 0.25  # ... once they have been quiet a while
TERMINAL_FOLLOW_SECONDS = 0.01  # at most, for a step with a terminal (srun --pty: echoes)
WATCHDOG_MAX_SECONDS = 0.5  # rlimit backend: between memory samples once settled
LAUNCH_FILE = "launch.json"  # the StepLaunch, for the next agent
MADE_FILE = "made-job-group"  # this step made its job's cgroup here (no batch script)
TIMED_OUT_FILE = "timed-out"  # its own time limit (srun -t) came: SIGTERM sent then
BAD_EXIT_FILE = "bad-exit"  # srun -K: "rank code" of the task whose failure was said
KEEPER_LOST = (
    "srun: error: {node}: the step's keeper on this node died without recording its "
    "tasks' ends (killed by an operator or the OOM killer); its tasks were killed\n"
)
NEVER_STARTED = "srun: error: {node}: the agent stopped before the step's tasks started\n"
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
        "SLURM_GTIDS",
        "SLURM_TOPOLOGY_ADDR",
        "SLURM_MEM_PER_NODE",
        "SLURM_GPUS_ON_NODE",
        "SLURM_JOB_GPUS",
        "SLURM_STEP_GPUS",
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

Key = tuple[int, int, int]  # (job id, its run: the job's restarts, step id)
TaskRef = tuple[int, int, int, int, int]  # (job id, run, step id, rank, pid)


@dataclass(slots=True)
class _Stream:
    sent: int = 0  # offset of data[0]: what a answered sync carried is gone
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _NodeStep:
    """This node's part of one step."""

    launch: StepLaunch
    folder: str
    streams: dict[tuple[int, str], _Stream] = field(default_factory=dict)
    keeper: tuple[int, int] | None = None  # its keeper's pid and start ticks
    # rank → (pid, start ticks) once the keeper started them (pid 0: could not start)
    tasks: dict[int, tuple[int, int]] = field(default_factory=dict)
    exit_code: int | None = None  # set when every task ended and its output is read
    exit_signal: int = 0  # the signal that ended the task of ``exit_code`` (0: it exited)
    oom: bool = False  # a task was killed for the job's memory limit
    group: str = ""  # its cgroup on this node ("" without cgroups)
    # its job is suspended (SIGSTOP came, no SIGCONT since): a task started now stops too
    stopped: bool = False
    doomed: int = 0  # a signal to end it that came before its tasks were known
    timed_out: bool = False  # its own time limit (srun -t) ended it
    # srun -K: (rank, exit code; -N: signal N) of its task here whose failure was said,
    # reported to the server until a reply came (``failed_sent``); and whether it is
    # ending already (its time limit, scancel, srun's SIGINT/SIGTERM): no failure then
    failed: tuple[int, int] | None = None
    failed_sent: bool = False
    ending: bool = False
    # rank → (most RSS, CPU seconds) of the agent's latest sample of each running task,
    # and that CPU time's user and system parts
    sampled: dict[int, tuple[int, float]] = field(default_factory=dict)
    sampled_times: dict[int, tuple[float, float]] = field(default_factory=dict)
    # rank → its GPU samples' tally (a step given GPUs here, on a node NVML answers)
    gpu: dict[int, GpuTally] = field(default_factory=dict)
    totals: list[TaskTotals] = field(default_factory=list)  # what each used, once ended
    # srun's relayed stdin: rank → how far its task got (``step_input.read_fed``; -1: it
    # takes no more) as last read, and as the server has it (a sync was answered)
    fed: dict[int, int] = field(default_factory=dict)
    fed_sent: dict[int, int] = field(default_factory=dict)
    woken: asyncio.Event = field(default_factory=asyncio.Event)

    def write(self, rank: int, stream: str, data: bytes) -> None:
        """The agent's own lines (srun's and slurmstepd's), added to the task's output
        file as its output is (``O_APPEND``): what the agent sends stays at the file's
        offsets, so an agent restarted later reads them there again, and the server,
        which keeps what it took by offset, takes neither less nor twice."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        try:
            _make_folder(self.folder)
            fd = os.open(output_path(self.folder, rank, stream), flags, 0o600)
        except OSError as err:  # (the agent's disk: the line is sent, not kept)
            log.warning("step output folder %s: %s", self.folder, err)
            self.streams.setdefault((rank, stream), _Stream()).data.extend(data)
            return
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.read(rank, stream)

    def read(self, rank: int, stream: str) -> bool:
        """Append what the task's output file has gained since the last read; whether it
        had anything."""
        buf = self.streams.setdefault((rank, stream), _Stream())
        try:
            fd = os.open(output_path(self.folder, rank, stream), os.O_RDONLY)
        except OSError:
            return False
        got = False
        try:
            while data := os.pread(fd, READ_BYTES, buf.sent + len(buf.data)):
                buf.data.extend(data)
                got = True
        finally:
            os.close(fd)
        return got

    def live_tasks(self) -> list[tuple[int, int]]:
        """(rank, pid) of the tasks still running or not yet reaped by the keeper."""
        return [
            (rank, pid)
            for rank, (pid, ticks) in self.tasks.items()
            if pid and start_ticks(pid) == ticks
        ]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What one sync carries, and what its answer lets go of."""

    output: list[StepOutput]
    ends: list[StepEnd]
    upto: dict[tuple[Key, int, str], int]  # (step, rank, stream) → end offset
    bad_exits: list[StepBadExit] = field(default_factory=list)  # srun -K's failures
    fed: dict[tuple[Key, int], int] = field(default_factory=dict)  # (step, rank) → told
    input_fed: list[StepInputFed] = field(default_factory=list)  # ``fed``, as sent


class StepTasks:
    def __init__(
        self,
        node: str,
        *,
        agent: str,
        unknown_users_as_agent: bool,
        notify: Callable[[], None],
        steps_dir: str,
        isolation: Isolation | None = None,
        cpus: CpuPool | None = None,
        artifacts: ArtifactCache | None = None,
    ) -> None:
        self.node = node
        self.artifacts = artifacts  # the jobs' artifacts, deployed before a step starts
        self.agent = agent
        self.unknown_users_as_agent = unknown_users_as_agent
        self.steps_dir = steps_dir  # a folder per step part (``LAUNCH_FILE``, the keeper's)
        # the agent's backend, known once it started (``AgentShell.run`` sets it)
        self.isolation = isolation or Isolation("none")
        self.gpus = GpuInventory()  # the node's (its device minors: device isolation)
        self._made_groups: set[tuple[int, int]] = set()  # (job, attempt): job cgroups made here
        # the host CPUs jobs are bound to (the agent's pool, shared with batch scripts),
        # and the jobs whose CPUs here a step took (no batch script here holds them)
        self.cpus = cpus or CpuPool()
        self._cpu_jobs: set[tuple[int, int]] = set()
        self._peaks: dict[tuple[Key, int], int] = {}  # (step, rank) → most RSS
        self._notify = notify  # there is something to send
        self._steps: dict[Key, _NodeStep] = {}
        self._done: deque[Key] = deque(maxlen=RECENTLY_ENDED)  # a repeated launch: ignored
        self._queue: asyncio.Queue[tuple[_NodeStep, bool]] = asyncio.Queue()  # (step, new)
        self._launcher: StepLauncher | None = None  # started with the first step
        self._replies: dict[tuple[int, int], asyncio.Future[LaunchReply]] = {}  # _launch_key

    # -- instructions ----------------------------------------------------------------------

    def launch(self, launch: StepLaunch) -> None:
        key = _key(launch)
        if key not in self._steps and key not in self._done:
            # (a requeued job's next run numbers its steps from 0 again: its run in the
            # name, where an earlier run's part of the same id may still be ending)
            name = f"{launch.job_id}.{launch.launch.attempt}.{launch.step_id}"
            folder = os.path.join(self.steps_dir, name)
            step = self._steps[key] = _NodeStep(launch, folder)
            self._queue.put_nowait((step, True))

    def adopt(self) -> int:
        """Take over the step parts an earlier agent left running or unreported (before
        the first registration, which lists them); returns how many."""
        try:
            names = sorted(os.listdir(self.steps_dir))
        except FileNotFoundError:
            return 0
        with contextlib.suppress(OSError):  # (an older agent made it 0755)
            os.chmod(self.steps_dir, 0o700)
        for name in names:
            folder = os.path.join(self.steps_dir, name)
            try:
                with open(os.path.join(folder, LAUNCH_FILE)) as f:
                    launch = StepLaunch.model_validate_json(f.read())
                with open(os.path.join(folder, KEEPER_PLAN)) as f:
                    plan = KeeperPlan.from_json(f.read())
            except (OSError, ValueError) as err:  # the agent stopped while writing it
                log.warning("step folder %s left unadopted and removed: %s", folder, err)
                shutil.rmtree(folder, ignore_errors=True)
                continue
            step = _NodeStep(launch, folder, group=plan.group)
            step.keeper = read_supervisor(folder)
            step.failed = _read_bad_exit(folder)
            job = (launch.job_id, launch.launch.attempt)
            if os.path.exists(os.path.join(folder, MADE_FILE)):
                self._made_groups.add(job)
            if plan.cpu_ids and not self.cpus.holds(job):  # (a batch script's: noted first)
                self.cpus.note(job, plan.cpu_ids)
                self._cpu_jobs.add(job)
            self._steps[_key(launch)] = step
            self._queue.put_nowait((step, False))
            log.info("re-adopted step %d.%d (keeper %s)", job[0], launch.step_id, step.keeper)
        return len(self._steps)

    def running(self) -> list[RunningStep]:
        """The steps this node holds, their tasks running or their end not yet answered
        for (told to the server at registration: it keeps those it knows)."""
        return [RunningStep(job_id=j, attempt=a, step_id=s) for j, a, s in self._steps]

    def usage_targets(self) -> list[TaskRef]:
        """(job, run, step, rank, pid) of every task running here, for ``sample_usage``."""
        return [
            (job_id, attempt, step_id, rank, pid)
            for (job_id, attempt, step_id), step in self._steps.items()
            if step.exit_code is None
            for rank, pid in step.live_tasks()
        ]

    def gpu_steps(self) -> set[Key]:
        """The running steps given GPUs on this node: their tasks are read for GPU use."""
        return {
            key
            for key, step in self._steps.items()
            if step.exit_code is None and step.launch.launch.gpu_ids
        }

    def usage(
        self,
        sampled: list[tuple[TaskRef, Usage]],
        gpu: Mapping[tuple[Key, int], ProcessGpu] | None = None,
    ) -> list[StepTaskUsage]:
        """The tasks' samples (``procfs.tree_usage`` of ``usage_targets``) with the most
        memory each task's samples have shown (ended tasks' peaks go); ``gpu``: (step's
        key, rank) → what the task's tree does with the GPUs now, for the tasks of
        ``gpu_steps`` (``gpuusage.use_of``), added to each one's tally."""
        peaks: dict[tuple[Key, int], int] = {}
        out: list[StepTaskUsage] = []
        for (job_id, attempt, step_id, rank, _), (rss, user, system) in sampled:
            key = ((job_id, attempt, step_id), rank)
            peak = peaks[key] = max(rss, self._peaks.get(key, 0))
            cpu = user + system
            tally = None
            if (part := self._steps.get(key[0])) is not None:
                part.sampled[rank] = (peak, cpu)  # for its end (``_totals``)
                part.sampled_times[rank] = (user, system)
                if gpu is not None and key in gpu:
                    tally = part.gpu.setdefault(rank, GpuTally())
                    tally.add(gpu[key])
            out.append(
                StepTaskUsage(
                    job_id=job_id,
                    step_id=step_id,
                    attempt=attempt,
                    rank=rank,
                    rss_bytes=rss,
                    max_rss_bytes=peak,
                    cpu_seconds=cpu,
                    user_cpu_seconds=user,
                    system_cpu_seconds=system,
                    gpu=tally.usage() if tally is not None else None,
                )
            )
        self._peaks = peaks
        return out

    def signal(self, request: StepSignal) -> None:
        if request.local:
            self._signal_local(request)
            return
        loop = asyncio.get_running_loop()
        for step in self._signalled(request):
            if step.exit_code is not None:
                continue
            if request.cancelled_at is not None or request.kill_wait_seconds is not None:
                step.ending = True  # (its tasks' deaths now are no srun -K failure)
            elif request.signal in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
                step.ending = True
            if request.cancelled_at is not None and (not step.tasks or step.live_tasks()):
                # scancel JOB.STEP or the job's end: slurmstepd's line (not again where
                # its tasks are gone: a restarted server repeats a scancel's kill)
                self._tell(step, request.cancelled_at, request.reason)
            if request.kill_wait_seconds is not None:
                self._signal(step, signal.SIGCONT)
                loop.call_later(request.kill_wait_seconds, self._signal, step, signal.SIGKILL)
            self._signal(step, request.signal)

    def input(self, request: StepInput) -> None:
        """srun's stdin for the tasks here that read it: into the step folder's input
        file, which the keeper's feeder copies into their pipes (``step_input``)."""
        step = self._steps.get((request.job_id, request.attempt, request.step_id))
        if step is None or not step.launch.relay_ranks or step.exit_code is not None:
            return  # (its tasks ended: what they did not read goes nowhere)
        data = base64.b64decode(request.data_b64)
        try:
            _make_folder(step.folder)  # (the launch in the same reply: not started yet)
            have = write_input(step.folder, request.offset, data)
            if len(request.winsize) == 2:
                write_size(step.folder, *request.winsize)
            if request.lost:
                end_input(step.folder)
            elif request.eof and have >= request.offset + len(data):
                end_input(step.folder, request.offset + len(data))
        except OSError as err:  # (the agent's disk: the server sends it again)
            log.warning("step input of %s: %s", step.folder, err)
        else:
            wake(step.folder, INPUT_WAKE)  # (the feeder looks now)

    def _signalled(self, request: StepSignal) -> list[_NodeStep]:
        """The parts ``request`` names: the job's step of its run (every step of the
        job: ``step_id`` None). A server from before it sent the run for local steps
        only, so a step id of one part alone here is that part, whatever its run."""
        if request.step_id is None:
            return [s for (j, _, _), s in self._steps.items() if j == request.job_id]
        exact = self._steps.get((request.job_id, request.attempt, request.step_id))
        if exact is not None:
            return [exact]
        same = [
            s for (j, _, n), s in self._steps.items() if (j, n) == (request.job_id, request.step_id)
        ]
        return same if len(same) == 1 else []

    def _tell(self, step: _NodeStep, when: float, why: str = "") -> None:
        """slurmstepd's ``*** STEP J.S ON node CANCELLED AT ... ***`` line (scancel, its
        job's end, its own limit: ``why``), in the step's error output on this node."""
        where = f"{step.launch.job_id}.{step.launch.step_id}"
        line = cancelled_message(self.node, where, stamp(when), why, kind="STEP")
        step.write(step.launch.ranks[0], "stderr", f"{line}\n".encode())

    def _arm_time_limit(self, step: _NodeStep) -> None:
        """srun ``-t``: the step's own limit, counted from when its folder was written, so
        an agent that restarts meanwhile (``adopt``) keeps it; a step whose limit came
        before the restart (``TIMED_OUT_FILE``) only waits for its SIGKILL."""
        limit = step.launch.time_limit_seconds
        if not limit or step.exit_code is not None:
            return
        loop, now = asyncio.get_running_loop(), time.time()
        try:
            came = os.stat(os.path.join(step.folder, TIMED_OUT_FILE)).st_mtime
        except OSError:
            try:
                began = os.stat(os.path.join(step.folder, LAUNCH_FILE)).st_mtime
            except OSError:
                began = now
            loop.call_later(max(0.0, began + limit - now), self._time_out, step)
            return
        step.timed_out = step.ending = True
        wait = max(0.0, came + step.launch.kill_wait_seconds - now)
        loop.call_later(wait, self._signal, step, signal.SIGKILL)

    def _time_out(self, step: _NodeStep) -> None:
        """The step's own time limit (srun ``-t``) has come: slurmstepd's line, SIGTERM
        to its tasks, SIGKILL KillWait later, as Slurm's."""
        if step.exit_code is not None:
            return
        step.timed_out = step.ending = True
        with contextlib.suppress(OSError):  # for a restarted agent (``_arm_time_limit``)
            open(os.path.join(step.folder, TIMED_OUT_FILE), "w").close()
        self._tell(step, time.time(), TIME_LIMIT)
        self._signal(step, signal.SIGCONT)
        self._signal(step, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        loop.call_later(step.launch.kill_wait_seconds, self._signal, step, signal.SIGKILL)

    def _signal_local(self, request: StepSignal) -> None:
        """A step srun runs on the batch node: its tasks are srun's children in the
        step's cgroup srun made there (``hal.compat.step_cgroup``), which get the signal;
        where srun could make none, srun does (it passes the signal on, SIGTERM in place
        of a SIGKILL it could not pass)."""
        job = self.isolation.group_path(request.job_id, request.attempt)
        group = os.path.join(job, f"step_{request.step_id}") if job else ""
        if group and signal_procs(group, request.signal):
            return
        pid, _, ticks = request.srun.partition(":")
        if pid.isdigit() and ticks.isdigit() and start_ticks(int(pid)) == int(ticks):
            signum = signal.SIGTERM if request.signal == signal.SIGKILL else request.signal
            with contextlib.suppress(OSError):
                os.kill(int(pid), signum)

    def _signal(self, step: _NodeStep, signum: int) -> None:
        if signum in (signal.SIGSTOP, signal.SIGCONT):
            step.stopped = signum == signal.SIGSTOP
            _mark_stopped(step)  # first: a task the keeper starts now sees it
        elif not step.tasks and signum in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
            # delivered once the tasks are known (SIGKILL, once sent, stays)
            step.doomed = signum if step.doomed != signal.SIGKILL else step.doomed
        marker = _marker(self.agent, step.launch)
        for rank, pid in step.live_tasks():
            with contextlib.suppress(OSError):
                os.killpg(pid, signum)
            # left the group, not the session (or the session too, keeping the marker)
            for other in processes_of(pid, f"{marker}.{rank}"):
                with contextlib.suppress(OSError):
                    os.kill(other, signum)

    # -- the tasks ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Start each step's tasks as launches come and follow them, and the adopted
        ones'. At the end (the agent stops) the tasks run on: the next agent adopts them."""
        try:
            async with asyncio.TaskGroup() as tasks:
                while True:
                    step, new = await self._queue.get()
                    tasks.create_task(self._run_step(step) if new else self._follow(step))
        finally:
            if self._launcher is not None:
                self._launcher.stop()
                self._launcher = None

    async def _run_step(self, step: _NodeStep) -> None:
        launch = step.launch
        try:
            env, user = self._environment(launch)
            pins = launch.launch.artifacts
            if pins and self.artifacts is not None:
                env = await self.artifacts.deploy(launch.job_id, pins, env)
        except Exception as err:  # whatever it was, the step fails saying so, never hangs
            if not isinstance(err, LaunchError | ArtifactError | AgentChannelError):
                log.exception("starting step %d.%d", launch.job_id, launch.step_id)
            why = f"artifact: {err}" if not isinstance(err, LaunchError) else str(err)
            step.write(launch.ranks[0], "stderr", f"srun: error: {self.node}: {why}\n".encode())
            self._ended(step, EXEC_FAILED)
            return
        job = (launch.job_id, launch.launch.attempt)
        if not self.cpus.holds(job):  # no batch script here: the step takes the job's CPUs
            self._cpu_jobs.add(job)
        job_cpus = self.cpus.take(job, launch.launch.cpus)
        cpu_ids = own_cpus(job_cpus, launch.cpus)
        try:
            step.group, made = self.isolation.create_step_group(
                *job,
                launch.step_id,
                launch.launch.memory_bytes,
                denied_gpus=self.denied_gpus(launch.launch.gpu_ids),
                step_denied=() if launch.gpu_ids is None else self.denied_gpus(launch.gpu_ids),
                step_memory_bytes=launch.memory_bytes,
                cpus=job_cpus,
                step_cpus=cpu_ids,
            )
        except OSError as err:
            message = f"srun: error: {self.node}: cannot create the step's cgroup: {err}\n"
            step.write(launch.ranks[0], "stderr", message.encode())
            self._release(job, step)
            self._ended(step, EXEC_FAILED)
            return
        if made:
            self._made_groups.add(job)
        uid, gid, groups, umask = user
        plan = KeeperPlan(
            node=self.node,
            folder=step.folder,
            argv=tuple(launch.argv),
            env=env,
            ranks=tuple(launch.ranks),
            rank_argv=tuple(tuple(a) for a in launch.rank_argv),
            rank_env=self._task_environments(launch),
            marker=_marker(self.agent, launch),
            workdir=launch.launch.workdir,
            group=step.group,
            memory_bytes=launch.launch.memory_bytes,
            gpus=bool(launch.launch.gpu_ids),
            uid=uid,
            gid=gid,
            groups=groups,
            umask=umask,
            cpu_ids=cpu_ids,
            rank_input=task_inputs(launch, self.node),
            relayed=tuple(r for r in launch.relay_ranks if r in launch.ranks),
            pty=tuple(launch.pty),
        )
        try:
            reply = await self._start_keeper(step, plan, made)
        except OSError as err:
            reply = LaunchReply(launch.job_id, launch.step_id, error=str(err))
        if reply.error:
            step.keeper = read_supervisor(step.folder)  # recorded before it failed?
            if step.keeper is None:
                message = f"srun: error: {self.node}: cannot start the step: {reply.error}\n"
                step.write(launch.ranks[0], "stderr", message.encode())
                if step.group:
                    self.isolation.remove_step_group(step.group)
                self._release(job, step)
                self._ended(step, EXEC_FAILED)
                return
        else:
            step.keeper = (reply.pid, reply.ticks)
        await self._follow(step)

    async def _start_keeper(self, step: _NodeStep, plan: KeeperPlan, made: bool) -> LaunchReply:
        """Write the step's folder and have the step launcher fork its keeper."""
        launch = step.launch
        _write_folder(step, plan, made)
        loop = asyncio.get_running_loop()
        if self._launcher is None:
            self._launcher = StepLauncher(self.isolation, self._launched, kind="step")
            self._launcher.start(loop)
        key = (launch.job_id, _launch_key(launch))
        reply: asyncio.Future[LaunchReply] = loop.create_future()
        self._replies[key] = reply
        started_r, started_w = os.pipe()
        # the keeper says "T" once its tasks are started, then closes: a wake-up only
        os.set_blocking(started_r, False)
        loop.add_reader(started_r, _drain, loop, started_r, step.woken)
        self._launcher.launch(launch.job_id, _launch_key(launch), step.folder, started_w)
        return await reply

    def _launched(self, reply: LaunchReply) -> None:
        future = self._replies.pop((reply.job_id, reply.key), None)
        if future is not None and not future.done():
            future.set_result(reply)

    async def _follow(self, step: _NodeStep) -> None:
        """Follow a started (or adopted) keeper: read the tasks' output files as they
        grow, until it exits; then the node's end from its ``status.json``."""
        launch = step.launch
        job = (launch.job_id, launch.launch.attempt)
        loop = asyncio.get_running_loop()
        pid, ticks = step.keeper or (0, 0)
        pidfd = open_pidfd(pid) if pid else None
        if pidfd is not None and start_ticks(pid) != ticks:
            os.close(pidfd)  # recycled: ours is gone
            pidfd = None
        if pidfd is not None:
            loop.add_reader(pidfd, step.woken.set)
        told = open_wake(step.folder, OUTPUT_WAKE) if launch.pty else -1
        if told >= 0:  # (the feeder copied the terminal's output: read it now)
            loop.add_reader(told, _woken, told, step.woken)
        self._arm_time_limit(step)
        watchdog = None
        if self.isolation.watchdog and launch.launch.memory_bytes > 0:
            watchdog = asyncio.ensure_future(self._watch_memory(step))
        interval = FOLLOW_MIN_SECONDS
        most = TERMINAL_FOLLOW_SECONDS if launch.pty and told < 0 else FOLLOW_MAX_SECONDS
        try:
            while True:
                gone = not pid or start_ticks(pid) != ticks
                if not step.tasks:
                    self._found_tasks(step)
                if self._read_output(step) | self._read_fed(step):
                    self._notify()
                    interval = FOLLOW_MIN_SECONDS
                else:
                    interval = min(interval * 2, most)
                self._check_bad_exit(step)
                if gone:
                    break
                step.woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(step.woken.wait(), interval)
        finally:
            if pidfd is not None:
                loop.remove_reader(pidfd)
                os.close(pidfd)
            if told >= 0:
                loop.remove_reader(told)
                os.close(told)
            if watchdog is not None:
                watchdog.cancel()
        codes = read_codes(step.folder)
        if codes is None:  # never started (no "go"), or killed outright: end what is left
            lost = KEEPER_LOST if pid else NEVER_STARTED
            step.write(launch.ranks[0], "stderr", lost.format(node=self.node).encode())
            self._signal(step, signal.SIGKILL)
            codes = {rank: -signal.SIGKILL if pid else EXEC_FAILED for rank in launch.ranks}
        if self._read_output(step):
            self._notify()
        self._check_bad_exit(step, codes)
        kills = 0
        if step.group:  # kills what the tasks left in it; reads its OOM kills
            killed = any(c == -signal.SIGKILL for c in codes.values())
            memory = await asyncio.to_thread(self.isolation.collect, step.group, killed)
            step.oom = step.oom or memory.oom
            kills = memory.oom_kills
        self._release(job, step)
        # srun's lines for this node's tasks, and slurmstepd's for an OOM kill, in the
        # step's error output, which srun relays (Slurm's, docs/slurm-checks.md)
        said = step.failed[0] if step.failed is not None else None  # (srun -K's, at once)
        lines = task_errors(self.node, {r: c for r, c in codes.items() if r != said}, oom=step.oom)
        if kills:
            lines.append(oom_message(self.node, kills, f"{launch.job_id}.{launch.step_id}"))
        if step.timed_out and launch.step_node_index == 0:  # srun's, once
            lines.append(force_terminated(f"{launch.job_id}.{launch.step_id}"))
        if lines:
            step.write(launch.ranks[0], "stderr", "".join(f"{x}\n" for x in lines).encode())
        step.totals = _totals(step)
        self._ended(step, *worst_exit(codes.values()))

    def _check_bad_exit(self, step: _NodeStep, codes: Mapping[int, int] | None = None) -> None:
        """srun -K: the first of the step's tasks here to fail (the keeper's ``ends`` as
        they come, or its final ``codes``), unless the step is ending already: srun's line
        for it and its "Terminating StepId" in the task's error output, as Slurm 22.05.8's
        srun says them, and the failure reported to the server, which ends the step's
        other tasks on every node (``StepTable.bad_exit``)."""
        launch = step.launch
        if not launch.kill_on_bad_exit or step.failed is not None or step.ending:
            return
        ends = [*read_ends(step.folder), *sorted((codes or {}).items())]  # (as they came)
        for rank, code in ends:
            if code != 0 and rank in launch.ranks:
                step.failed = (rank, code)
                with contextlib.suppress(OSError):  # (for a restarted agent: said once)
                    write_atomic(step.folder, BAD_EXIT_FILE, f"{rank} {code}\n")
                where = f"{launch.job_id}.{launch.step_id}"
                lines = [*task_errors(self.node, {rank: code}, oom=step.oom), terminating(where)]
                step.write(rank, "stderr", "".join(f"{x}\n" for x in lines).encode())
                self._notify()
                return

    def _found_tasks(self, step: _NodeStep) -> None:
        tasks = read_tasks(step.folder)
        if not tasks:
            return
        step.tasks = tasks
        if step.stopped:  # the job was suspended before its tasks started
            self._signal(step, signal.SIGSTOP)
        if step.doomed:
            self._signal(step, step.doomed)

    def _read_output(self, step: _NodeStep) -> bool:
        """Append what the tasks wrote since the last read; whether there was any."""
        got = False
        for rank in step.launch.ranks:
            for stream in ("stdout", "stderr"):
                got = step.read(rank, stream) or got
        return got

    def _read_fed(self, step: _NodeStep) -> bool:
        """How far the keeper's feeder got with srun's input; whether it moved."""
        if not step.launch.relay_ranks:
            return False
        fed = read_fed(step.folder)
        moved = fed != step.fed
        step.fed = fed
        return moved

    def _release(self, job: tuple[int, int], ending: _NodeStep) -> None:
        """Remove the job's cgroup made here for its steps, and give back the CPUs they
        took, once none of them runs."""
        if job not in self._made_groups and job not in self._cpu_jobs:
            return
        for (job_id, _, _), other in self._steps.items():
            same = (job_id, other.launch.launch.attempt) == job
            if same and other is not ending and other.exit_code is None:
                return
        if job in self._cpu_jobs:
            self._cpu_jobs.discard(job)
            self.cpus.give(job)
        if job in self._made_groups:
            self._made_groups.discard(job)
            self.isolation.release_job_group(*job)

    async def _watch_memory(self, step: _NodeStep) -> None:
        """rlimit backend: SIGKILL the step's tasks here once their resident memory is
        past the job's memory on this node, as the batch step's watchdog does."""
        limit = step.launch.launch.memory_bytes
        interval = 0.02  # frequent at first: a memory hog grows fast after start
        while True:
            pids = [pid for _, pid in step.live_tasks()]
            used = await asyncio.to_thread(_rss_bytes, pids)
            if used > limit:
                step.oom = True
                self._signal(step, signal.SIGKILL)
                return
            await asyncio.sleep(interval)
            interval = min(interval * 2, WATCHDOG_MAX_SECONDS)

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
            gpus_isolated=bool(self.denied_gpus(job.gpu_ids)),
        )
        del env["ENVIRONMENT"]  # BATCH is the batch script's
        env.update(launch.environment)
        env["SLURM_NODEID"] = str(launch.step_node_index)
        env["SLURM_GTIDS"] = ",".join(str(rank) for rank in launch.ranks)
        step_gpu_environment(env, job.gpu_ids, launch.gpu_ids, isolated=self._isolated(launch))
        umask = job_umask(env)
        groups = run_as.groups if run_as.uid is not None else None
        return env, (run_as.uid, run_as.gid, groups, -1 if umask is None else umask)

    def _isolated(self, launch: StepLaunch) -> bool:
        """Whether a device cgroup hides GPUs from the step: CUDA numbers its own from 0."""
        own = launch.gpu_ids
        return bool(self.denied_gpus(launch.launch.gpu_ids if own is None else own))

    def _task_environments(self, launch: StepLaunch) -> tuple[dict[str, str], ...]:
        """Each task's own variables (srun --gpus-per-task: its GPUs); () if none."""
        if launch.gpu_ids is None or not launch.gpus_per_task:
            return ()
        tasks = len(launch.ranks)
        return task_gpu_environments(
            launch.gpu_ids, launch.gpus_per_task, tasks, isolated=self._isolated(launch)
        )

    def denied_gpus(self, given: list[int]) -> tuple[int, ...]:
        """The device minors a job (or its step) given GPUs ``given`` may not open."""
        return denied_minors(self.gpus, given) if self.isolation.devices else ()

    def _ended(self, step: _NodeStep, exit_code: int, exit_signal: int = 0) -> None:
        step.exit_code = exit_code
        step.exit_signal = exit_signal
        self._notify()

    # -- what the syncs carry --------------------------------------------------------------

    def interactive(self) -> bool:
        """Whether a step here runs in a terminal (srun --pty): its output goes at once."""
        return any(s.launch.pty and s.exit_code is None for s in self._steps.values())

    def pending(self) -> bool:
        return any(
            s.exit_code is not None
            or (s.failed is not None and not s.failed_sent)
            or any(b.data for b in s.streams.values())
            or (s.exit_code is None and s.fed != s.fed_sent)
            for s in self._steps.values()
        )

    def outgoing(self) -> Outgoing:
        """The output not yet answered for, at most ``MAX_SYNC_BYTES``, and the ends of
        steps whose output is all in it."""
        output: list[StepOutput] = []
        ends: list[StepEnd] = []
        bad_exits: list[StepBadExit] = []
        upto: dict[tuple[Key, int, str], int] = {}
        fed: dict[tuple[Key, int], int] = {}
        input_fed: list[StepInputFed] = []
        budget = MAX_SYNC_BYTES
        for (job_id, attempt, step_id), step in self._steps.items():
            for rank, offset in step.fed.items():  # srun's input: how far each task got
                if step.exit_code is None and step.fed_sent.get(rank) != offset:
                    fed[((job_id, attempt, step_id), rank)] = offset
                    input_fed.append(
                        StepInputFed(
                            job_id=job_id,
                            step_id=step_id,
                            attempt=attempt,
                            rank=rank,
                            offset=max(offset, 0),
                            closed=offset < 0,
                        )
                    )
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
                        attempt=attempt,
                        rank=rank,
                        stream=stream,  # type: ignore[arg-type]
                        offset=buf.sent,
                        data_b64=base64.b64encode(part).decode(),
                    )
                )
                upto[((job_id, attempt, step_id), rank, stream)] = buf.sent + len(part)
            if step.failed is not None and not step.failed_sent and complete:
                rank, code = step.failed  # (after its lines: they go in this sync too)
                bad_exits.append(
                    StepBadExit(
                        job_id=job_id, step_id=step_id, attempt=attempt, rank=rank, exit_code=code
                    )
                )
            if step.exit_code is not None and complete:
                ends.append(
                    StepEnd(
                        job_id=job_id,
                        step_id=step_id,
                        attempt=attempt,
                        exit_code=step.exit_code,
                        exit_signal=step.exit_signal,
                        oom=step.oom,
                        timed_out=step.timed_out,
                        tasks=step.totals,
                    )
                )
        return Outgoing(output, ends, upto, bad_exits, fed, input_fed)

    def delivered(self, sent: Outgoing) -> None:
        """A sync carrying ``sent`` was answered: the server has it."""
        for (key, rank, stream), end in sent.upto.items():
            step = self._steps.get(key)
            buf = step.streams.get((rank, stream)) if step is not None else None
            if buf is not None and end > buf.sent:
                del buf.data[: end - buf.sent]
                buf.sent = end
        for (key, rank), offset in sent.fed.items():
            if (step := self._steps.get(key)) is not None:
                step.fed_sent[rank] = offset
        for bad in sent.bad_exits:
            step = self._steps.get((bad.job_id, bad.attempt or 0, bad.step_id))
            if step is not None:
                step.failed_sent = True
        for done in sent.ends:
            key = (done.job_id, done.attempt or 0, done.step_id)
            step = self._steps.pop(key, None)
            if step is not None:
                self._done.append(key)
                shutil.rmtree(step.folder, ignore_errors=True)  # nothing left to report


def _woken(fd: int, woken: asyncio.Event) -> None:
    drain(fd)
    woken.set()


def _drain(loop: asyncio.AbstractEventLoop, fd: int, woken: asyncio.Event) -> None:
    """The keeper's "started" pipe: read what it says; at its end (the keeper closed it
    after starting the tasks, or died) stop watching it."""
    woken.set()
    try:
        data = os.read(fd, 64)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if not data:
        loop.remove_reader(fd)
        os.close(fd)


def _read_bad_exit(folder: str) -> tuple[int, int] | None:
    """srun -K: the task whose failure an earlier agent said (``BAD_EXIT_FILE``)."""
    try:
        with open(os.path.join(folder, BAD_EXIT_FILE)) as f:
            rank, code = f.read().split()
        return int(rank), int(code)
    except (OSError, ValueError):
        return None


def _write_folder(step: _NodeStep, plan: KeeperPlan, made: bool) -> None:
    """The step's folder, before its keeper is forked: a few small files, as the batch
    path writes a job's folder (in the loop: a worker thread would cost more). The
    launch and the plan hold the job's environment: root's only, and whole or absent
    for the next agent (``adopt``)."""
    _make_folder(step.folder)
    write_atomic(step.folder, LAUNCH_FILE, step.launch.model_dump_json())
    if made:
        open(os.path.join(step.folder, MADE_FILE), "w").close()
    if step.launch.relay_ranks:
        make_wakes(step.folder, bool(step.launch.pty))
    _mark_stopped(step)
    write_atomic(step.folder, KEEPER_PLAN, plan.to_json())


def _make_folder(folder: str) -> None:
    os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)  # steps/
    os.makedirs(folder, mode=0o700, exist_ok=True)


def _mark_stopped(step: _NodeStep) -> None:
    """``STOPPED_FILE`` in the step's folder while its job is suspended: the keeper's
    tasks that start then stop themselves before they run."""
    path = os.path.join(step.folder, STOPPED_FILE)
    if step.stopped:
        with contextlib.suppress(OSError):  # (no folder yet: ``_write_folder`` marks it)
            open(path, "w").close()
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _totals(step: _NodeStep) -> list[TaskTotals]:
    """What each ended task used: the most of what the keeper's ``wait4`` saw (one
    process's peak, and the CPU of the children it waited for) and the agent's latest
    sample (its whole tree's memory; lost with an agent restart), and its GPU samples'
    tally (the same). The CPU seconds' user and system parts are those of the figure
    taken, ``wait4``'s or the sample's."""
    waited = read_usage(step.folder)
    times = read_times(step.folder)
    totals = []
    for rank in step.launch.ranks:
        seen = [u for u in (waited.get(rank), step.sampled.get(rank)) if u is not None]
        if seen:
            rss, cpu = max(u[0] for u in seen), max(u[1] for u in seen)
            tally = step.gpu.get(rank)
            gpu = tally.usage() if tally is not None else None
            user = system = None
            if rank in waited and waited[rank][1] >= cpu:
                user, system = times.get(rank, (None, None))  # (an older keeper: none)
            elif rank in step.sampled_times:
                user, system = step.sampled_times[rank]
            totals.append(
                TaskTotals(
                    rank=rank,
                    max_rss_bytes=rss,
                    cpu_seconds=cpu,
                    user_cpu_seconds=user,
                    system_cpu_seconds=system,
                    gpu=gpu,
                )
            )
    return totals


def _rss_bytes(pids: list[int]) -> int:
    return sum(tree_rss_bytes(pid) for pid in pids)


def own_cpus(job_cpus: tuple[int, ...], places: list[int] | None) -> tuple[int, ...]:
    """The host CPUs a step's tasks are bound to: those of its job's (``job_cpus``, ()
    where the job is not bound) at the places the control plane gave it (srun --exact:
    its own; None: all the job's)."""
    if not job_cpus or places is None:
        return job_cpus
    return tuple(job_cpus[p] for p in places if p < len(job_cpus)) or job_cpus


def _key(launch: StepLaunch) -> Key:
    return (launch.job_id, launch.launch.attempt, launch.step_id)


def _launch_key(launch: StepLaunch) -> int:
    """The step launcher's key of a step's launch, one per (run, step) of the job (the
    launcher keys a job's launches by one number)."""
    return launch.launch.attempt << 32 | launch.step_id


def _marker(agent: str, launch: StepLaunch) -> str:
    """``HAL_JOB_MARKER=...`` of the step's tasks here, as ``processes_of`` looks for it
    with ``.<rank>`` after it: the job's marker with the step id and the rank, so the
    cleanup after one task's end spares its neighbours (and the batch job's own marker
    matches none)."""
    job = job_marker(agent, launch.job_id, launch.launch.attempt)
    return f"{MARKER}={job}.{launch.step_id}"
