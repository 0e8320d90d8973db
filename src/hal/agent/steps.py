"""``StepShell``: the I/O half of job steps' tasks on this node (ADR 0012).

Every decision about a step part is the state machine's (``stepstate``); this carries out
its step commands and feeds it what it sees. ``StartStep`` starts a part's tasks through
a step keeper (``stepkeeper``, forked by the agent's step launcher as batch scripts'
supervisors are, ``handshake``): one process per rank, as the job's user
(``plan.resolve_user``, as for the batch script), in the job's working directory, each in
its own session and process group, with the job's environment for this node
(``environment.job_environment``) plus the step's ``SLURM_STEP_*`` and the task's
``SLURM_PROCID``/``SLURM_LOCALID``. The tasks write into files of the part's folder
(``stepfolder``), which this follows (``StepOutputRead``, ``StepFedRead``,
``StepTasksEnded``) until the keeper exits (``StepKeeperExited``); it then reads and
removes the part's cgroup (``CollectStep``) and adds up what each task used
(``StepCollected``). ``SignalStep`` reaches a task's whole session.

Step tasks survive an agent restart, as batch jobs do: the keeper, not the agent, is
their parent and records their ends, and the folder holds the launch, the keeper's pid
and start time, the tasks' pids and their output. The next agent adopts every folder it
finds (``adopt``, before it registers: ``StepAdopted``), follows the files from their
start (the server skips the bytes it has), signals the tasks by pid and start time, and
reports the ends. The folder goes once the server has the node's end (``ForgetStep``).

Memory: a step's tasks on a node run in the cgroup ``job_<id>.<n>/step_<m>`` inside the
job's (``Isolation.create_step_group``, Slurm's ``job_N/step_M``), so the job's memory on
that node bounds its batch script and all its steps together; on a node without the
batch script the job's cgroup is made for its steps, with the job's memory there, and
removed after the last (``ReleaseStepJob``). A task joins the cgroup between ``fork`` and
``exec``, before it can allocate or fork. An OOM kill in the step's cgroup ends the
node's part as out of memory (the step is OUT_OF_MEMORY). Under the rlimit backend a
watchdog sums the step's tasks' resident memory (``StepOverMemory`` past the job's
memory: Slurm's OverMemoryKill). The cgroup's removal kills what the tasks left in it;
without cgroups the keeper finds a task's leftovers by session (``procfs.processes_of``:
the session, and ``HAL_JOB_MARKER`` for processes that left it) and, as their subreaper,
its orphans.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from functools import partial

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
from hal.agent.events import Event
from hal.agent.forkserver import STEP
from hal.agent.gpus import GpuInventory, denied_gpus
from hal.agent.gpuusage import GpuTally, ProcessGpu
from hal.agent.handshake import read_recorded
from hal.agent.isolation import Isolation, signal_procs
from hal.agent.launcher import ChildWatch, LaunchReply, StepLauncher
from hal.agent.plan import LaunchError, job_umask, resolve_user, task_inputs
from hal.agent.procfs import Usage, processes_of, tree_rss_bytes
from hal.agent.pyenvs import PythonEnvError, PythonEnvs
from hal.agent.records import StepKey, StepPhase, step_key
from hal.agent.step_input import (
    INPUT_WAKE,
    OUTPUT_WAKE,
    drain,
    end_input,
    open_wake,
    read_fed,
    wake,
    write_input,
    write_size,
)
from hal.agent.stepevents import (
    CollectStep,
    ForgetStep,
    MarkStepBadExit,
    MarkStepStopped,
    MarkStepTimedOut,
    ReleaseStepJob,
    SignalLocalStep,
    SignalStep,
    StartStep,
    StepAdopted,
    StepCollected,
    StepCommand,
    StepFedRead,
    StepKeeperExited,
    StepLaunchFailed,
    StepOutputRead,
    StepOverMemory,
    StepSignalRequested,
    StepStarted,
    StepTasksEnded,
    StepTasksFound,
    WriteStepError,
    WriteStepInput,
)
from hal.agent.stepfolder import (
    append_output,
    make_folder,
    mark_bad_exit,
    mark_stopped,
    mark_timed_out,
    read_adopted,
    read_output,
    task_totals,
    write_folder,
)
from hal.agent.stepkeeper import KeeperPlan, read_codes, read_ends, read_tasks
from hal.agent.stepstate import StepState
from hal.core.clock import Clock
from hal.host.clock import SystemClock
from hal.host.process import start_ticks
from hal.wire.agent import StepInput, StepLaunch, StepSignal, StepTaskUsage

log = logging.getLogger("hal.agent")

FOLLOW_MIN_SECONDS = 0.01  # between reads of the tasks' output files, after output
FOLLOW_MAX_SECONDS = 0.25  # ... once they have been quiet a while
TERMINAL_FOLLOW_SECONDS = 0.01  # at most, for a step with a terminal (srun --pty: echoes)
WATCHDOG_MAX_SECONDS = 0.5  # rlimit backend: between memory samples once settled
STREAMS = ("stdout", "stderr")
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

TaskRef = tuple[int, int, int, int, int]  # (job id, run, step id, rank, pid)
Work = Callable[[], Coroutine[None, None, None]]


@dataclass(slots=True)
class _Part:
    """What the shell holds of one step part: its folder and processes, and the agent's
    samples of its tasks."""

    launch: StepLaunch
    folder: str
    group: str = ""  # its cgroup on this node ("" without cgroups)
    watch: ChildWatch | None = None  # on its keeper
    # rank → (pid, start ticks) once the keeper started them (pid 0: could not start)
    tasks: dict[int, tuple[int, int]] = field(default_factory=dict)
    woken: asyncio.Event = field(default_factory=asyncio.Event)  # something to read
    # rank → (most RSS, CPU seconds) of the agent's latest sample of each running task,
    # and that CPU time's user and system parts; its GPU samples' tally (a step given
    # GPUs here, on a node NVML answers)
    sampled: dict[int, tuple[int, float]] = field(default_factory=dict)
    sampled_times: dict[int, tuple[float, float]] = field(default_factory=dict)
    gpu: dict[int, GpuTally] = field(default_factory=dict)

    @property
    def key(self) -> StepKey:
        return step_key(self.launch)

    def live_tasks(self) -> list[tuple[int, int]]:
        """(rank, pid) of the tasks still running or not yet reaped by the keeper."""
        return [
            (rank, pid)
            for rank, (pid, ticks) in self.tasks.items()
            if pid and start_ticks(pid) == ticks
        ]


class StepShell:
    def __init__(
        self,
        node: str,
        *,
        agent: str,
        unknown_users_as_agent: bool,
        steps_dir: str,
        state: StepState,
        feed: Callable[[Event], None],
        clock: Clock | None = None,
        isolation: Isolation | None = None,
        cpus: CpuPool | None = None,
        artifacts: ArtifactCache | None = None,
        pyenvs: PythonEnvs | None = None,
    ) -> None:
        self.node = node
        self.agent = agent
        self.unknown_users_as_agent = unknown_users_as_agent
        self.steps_dir = steps_dir  # a folder per step part (``stepfolder``)
        self.state = state  # the machine's step half: read here, changed by ``feed`` only
        self._feed = feed  # an event to the machine, and its commands carried out
        self.clock = clock or SystemClock()
        # the agent's backend, known once it started (``AgentShell.run`` sets it)
        self.isolation = isolation or Isolation("none")
        self.gpus = GpuInventory()  # the node's (its device minors: device isolation)
        self.artifacts = artifacts  # the jobs' artifacts, deployed before a step starts
        self.pyenvs = pyenvs  # and their Python environments, activated in its tasks
        # the host CPUs jobs are bound to (the agent's pool, shared with batch scripts)
        self.cpus = cpus or CpuPool()
        # the agent's launcher (``AgentShell.run`` sets it); else one of its own, started
        # with the first step (a shell run on its own: tests, bench)
        self.launcher: StepLauncher | None = None
        self._own_launcher = False
        # (job, attempt): job cgroups made here, and jobs whose CPUs here a step took
        # (no batch script here holds them), until ``ReleaseStepJob``
        self._made_groups: set[tuple[int, int]] = set()
        self._cpu_jobs: set[tuple[int, int]] = set()
        self._peaks: dict[tuple[StepKey, int], int] = {}  # (step, rank) → most RSS
        self._parts: dict[StepKey, _Part] = {}
        self._work: asyncio.Queue[Work] = asyncio.Queue()  # run by ``run``'s task group

    # -- the machine's commands ----------------------------------------------------------

    def execute(self, command: StepCommand) -> list[Event]:
        """Carry out one of the machine's step commands; the events it observed at once."""
        match command:
            case StartStep():
                self._work.put_nowait(partial(self._start, self._new_part(command.launch)))
            case SignalStep():
                self._deliver(self._parts[command.key], command.signum)
            case SignalLocalStep():
                self._signal_local(command.request)
            case WriteStepError():
                return self._write_error(command)
            case WriteStepInput():
                self._write_input(command.key, command.request)
            case MarkStepStopped():
                mark_stopped(self._parts[command.key].folder, command.stopped)
            case MarkStepTimedOut():
                mark_timed_out(self._parts[command.key].folder)
            case MarkStepBadExit():
                mark_bad_exit(self._parts[command.key].folder, command.rank, command.exit_code)
            case CollectStep():
                return self._collect(self._parts[command.key], command.killed)
            case ReleaseStepJob():
                self._release((command.job_id, command.attempt))
            case ForgetStep():
                shutil.rmtree(self._parts.pop(command.key).folder, ignore_errors=True)
        return []  # (SyncSoon is the agent's: its syncs)

    def signal_requested(self, request: StepSignal) -> StepSignalRequested:
        """``StepSignal``, with the parts of its job whose tasks are all gone (a cancel's
        slurmstepd line is not written again there)."""
        gone: frozenset[StepKey] = frozenset()
        if request.cancelled_at is not None:
            gone = frozenset(
                key
                for key, part in self._parts.items()
                if key[0] == request.job_id and part.tasks and not part.live_tasks()
            )
        return StepSignalRequested(request, self.clock.now(), gone)

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
            found = read_adopted(os.path.join(self.steps_dir, name))
            if found is None:
                continue
            launch, plan = found.launch, found.plan
            part = self._new_part(launch)
            part.group = plan.group
            job = (launch.job_id, launch.launch.attempt)
            if found.made_job_group:
                self._made_groups.add(job)
            if plan.cpu_ids and not self.cpus.holds(job):  # (a batch script's: noted first)
                self.cpus.note(job, plan.cpu_ids)
                self._cpu_jobs.add(job)
            now = self.clock.now()
            self._feed(StepAdopted(launch, found.began, found.timed_out_at, found.failed, now))
            self._work.put_nowait(partial(self._follow, part, found.keeper))
            log.info("re-adopted step %d.%d (keeper %s)", job[0], launch.step_id, found.keeper)
        return len(self._parts)

    # -- usage samples ---------------------------------------------------------------------

    def usage_targets(self) -> list[TaskRef]:
        """(job, run, step, rank, pid) of every task running here (``UsageSampler.sample``)."""
        return [
            (*key, rank, pid)
            for key, part in self._parts.items()
            if self._running(key)
            for rank, pid in part.live_tasks()
        ]

    def gpu_steps(self) -> set[StepKey]:
        """The running steps given GPUs on this node: their tasks are read for GPU use."""
        return {
            key
            for key, part in self._parts.items()
            if self._running(key) and part.launch.launch.gpu_ids
        }

    def usage(
        self,
        sampled: list[tuple[TaskRef, Usage]],
        gpu: Mapping[tuple[StepKey, int], ProcessGpu] | None = None,
    ) -> list[StepTaskUsage]:
        """The tasks' samples (``procfs.tree_usage`` of ``usage_targets``) with the most
        memory each task's samples have shown (ended tasks' peaks go); ``gpu``: (step's
        key, rank) → what the task's tree does with the GPUs now, for the tasks of
        ``gpu_steps`` (``gpuusage.use_of``), added to each one's tally."""
        peaks: dict[tuple[StepKey, int], int] = {}
        out: list[StepTaskUsage] = []
        for (job_id, attempt, step_id, rank, _), (rss, user, system) in sampled:
            key = ((job_id, attempt, step_id), rank)
            peak = peaks[key] = max(rss, self._peaks.get(key, 0))
            cpu = user + system
            tally = None
            if (part := self._parts.get(key[0])) is not None:
                part.sampled[rank] = (peak, cpu)  # for its end (``task_totals``)
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

    def denied_gpus(self, given: list[int]) -> tuple[int, ...]:
        """The device minors a job (or its step) given GPUs ``given`` may not open."""
        return denied_gpus(self.gpus, self.isolation.devices, given)

    # -- the tasks ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Start each step's tasks as launches come and follow them, and the adopted
        ones'. At the end (the agent stops) the tasks run on: the next agent adopts them."""
        try:
            async with asyncio.TaskGroup() as tasks:
                while True:
                    work = await self._work.get()
                    tasks.create_task(work())
        finally:
            if self._own_launcher and self.launcher is not None:
                self.launcher.stop()
                self.launcher = None

    async def _start(self, part: _Part) -> None:
        launch, key = part.launch, part.key
        try:
            env, user = self._environment(launch)
            pins = launch.launch.artifacts
            if pins and self.artifacts is not None:
                env = await self.artifacts.deploy(launch.job_id, pins, env)
            wanted = launch.launch.python_env
            if wanted is not None and self.pyenvs is not None:
                env = await self.pyenvs.activate(launch.job_id, wanted, env)
        except Exception as err:  # whatever it was, the step fails saying so, never hangs
            if not isinstance(
                err, LaunchError | ArtifactError | AgentChannelError | PythonEnvError
            ):
                log.exception("starting step %d.%d", launch.job_id, launch.step_id)
            why = str(err)
            if isinstance(err, PythonEnvError):
                why = f"python-env: {err}"
            elif not isinstance(err, LaunchError):
                why = f"artifact: {err}"
            self._feed(StepLaunchFailed(key, why, self.clock.now()))
            return
        job = (launch.job_id, launch.launch.attempt)
        if not self.cpus.holds(job):  # no batch script here: the step takes the job's CPUs
            self._cpu_jobs.add(job)
        job_cpus = self.cpus.take(job, launch.launch.cpus)
        cpu_ids = own_cpus(job_cpus, launch.cpus)
        try:
            part.group, made = self.isolation.create_step_group(
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
            why = f"cannot create the step's cgroup: {err}"
            self._feed(StepLaunchFailed(key, why, self.clock.now()))
            return
        if made:
            self._made_groups.add(job)
        uid, gid, groups, umask = user
        plan = KeeperPlan(
            node=self.node,
            folder=part.folder,
            argv=tuple(launch.argv),
            env=env,
            ranks=tuple(launch.ranks),
            rank_argv=tuple(tuple(a) for a in launch.rank_argv),
            rank_env=self._task_environments(launch),
            marker=_marker(self.agent, launch),
            workdir=launch.launch.workdir,
            group=part.group,
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
            reply = await self._start_keeper(part, plan, made)
        except OSError as err:
            reply = LaunchReply(launch.job_id, _launch_key(launch), error=str(err))
        keeper = (reply.pid, reply.ticks) if not reply.error else read_recorded(part.folder)
        if keeper is None:  # (a launcher that failed may have recorded it first)
            if part.group:
                self.isolation.remove_step_group(part.group)
            why = f"cannot start the step: {reply.error}"
            self._feed(StepLaunchFailed(key, why, self.clock.now()))
            return
        self._feed(StepStarted(key, self.clock.now()))
        await self._follow(part, keeper)

    async def _start_keeper(self, part: _Part, plan: KeeperPlan, made: bool) -> LaunchReply:
        """Write the part's folder and have the step launcher fork its keeper; the "T" it
        says once its tasks are recorded wakes the follower."""
        launch = part.launch
        stopped = self.state.parts[part.key].stopped
        write_folder(part.folder, launch, plan, made=made, stopped=stopped)
        loop = asyncio.get_running_loop()
        if self.launcher is None:
            self.launcher = StepLauncher(self.isolation)
            self.launcher.start(loop)
            self._own_launcher = True
        reply: asyncio.Future[LaunchReply] = loop.create_future()

        def answered(answer: LaunchReply) -> None:
            if not reply.done():
                reply.set_result(answer)

        started_r, started_w = os.pipe()
        part.watch = ChildWatch(loop, started_r, _waker(part), part.woken.set)
        self.launcher.launch(
            launch.job_id,
            _launch_key(launch),
            part.folder,
            started_w,
            answered,
            kind=STEP,
        )
        return await reply

    async def _follow(self, part: _Part, keeper: tuple[int, int] | None) -> None:
        """Follow a started (or adopted) keeper: read the tasks' output files as they
        grow, until it exits; then its tasks' ends (``StepKeeperExited``)."""
        launch, key = part.launch, part.key
        loop = asyncio.get_running_loop()
        if part.watch is None:
            part.watch = ChildWatch(loop, None, _waker(part), part.woken.set)
        watch = part.watch
        if keeper is not None:
            watch.follow(*keeper)
        told = open_wake(part.folder, OUTPUT_WAKE) if launch.pty else -1
        if told >= 0:  # (the feeder copied the terminal's output: read it now)
            loop.add_reader(told, _woken, told, part.woken)
        watchdog = None
        if self.isolation.watchdog and launch.launch.memory_bytes > 0:
            watchdog = asyncio.ensure_future(self._watch_memory(part))
        interval = FOLLOW_MIN_SECONDS
        most = TERMINAL_FOLLOW_SECONDS if launch.pty and told < 0 else FOLLOW_MAX_SECONDS
        try:
            while True:
                gone = watch.gone
                if not part.tasks and (tasks := read_tasks(part.folder)):
                    part.tasks = tasks
                    self._feed(StepTasksFound(key, self.clock.now()))
                if self._read_output(part) | self._read_fed(part):
                    interval = FOLLOW_MIN_SECONDS
                else:
                    interval = min(interval * 2, most)
                self._read_ends(part)
                if gone:
                    break
                part.woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(part.woken.wait(), interval)
        finally:
            watch.close()
            if told >= 0:
                loop.remove_reader(told)
                os.close(told)
            if watchdog is not None:
                watchdog.cancel()
        self._read_output(part)
        codes = read_codes(part.folder)
        ends = read_ends(part.folder) if self.state.parts[key].awaits_bad_exit else []
        self._feed(
            StepKeeperExited(
                key,
                None if codes is None else tuple(sorted(codes.items())),
                recorded=keeper is not None,
                ends=tuple(ends),
                time=self.clock.now(),
            )
        )

    def _collect(self, part: _Part, killed: bool) -> list[Event]:
        """The part's cgroup read (its OOM kills) and removed, killing what its tasks left
        in it, in a worker thread; without one, nothing to wait for."""
        if not part.group:
            return [self._collected(part, 0)]

        async def collect() -> None:
            memory = await asyncio.to_thread(self.isolation.collect, part.group, killed)
            self._feed(self._collected(part, memory.oom_kills))

        self._work.put_nowait(collect)
        return []

    def _collected(self, part: _Part, oom_kills: int) -> StepCollected:
        ranks = part.launch.ranks
        totals = task_totals(part.folder, ranks, part.sampled, part.sampled_times, part.gpu)
        return StepCollected(part.key, oom_kills > 0, oom_kills, totals, self.clock.now())

    def _read_output(self, part: _Part) -> bool:
        """What the tasks wrote since the last read, to the machine; whether there was."""
        got = False
        for rank in part.launch.ranks:
            for stream in STREAMS:
                for event in self._read(part, rank, stream):
                    self._feed(event)
                    got = True
        return got

    def _read(self, part: _Part, rank: int, stream: str) -> list[Event]:
        offset = self.state.read_offset(part.key, rank, stream)
        data = read_output(part.folder, rank, stream, offset)
        if not data:
            return []
        return [StepOutputRead(part.key, rank, stream, offset, data, self.clock.now())]

    def _read_fed(self, part: _Part) -> bool:
        """How far the keeper's feeder got with srun's input; whether it moved."""
        if not part.launch.relay_ranks:
            return False
        fed = tuple(sorted(read_fed(part.folder).items()))
        if fed == self.state.parts[part.key].fed:
            return False
        self._feed(StepFedRead(part.key, fed, self.clock.now()))
        return True

    def _read_ends(self, part: _Part) -> None:
        """srun -K: the keeper's ``ends`` as they come, while a failure would be said."""
        if self.state.parts[part.key].awaits_bad_exit and (ends := read_ends(part.folder)):
            self._feed(StepTasksEnded(part.key, tuple(ends), self.clock.now()))

    def _write_error(self, command: WriteStepError) -> list[Event]:
        """The agent's lines appended to the task's error file, then read as its output;
        where the agent's disk refuses, sent from memory all the same (not kept)."""
        part = self._parts[command.key]
        data = command.text.encode()
        if append_output(part.folder, command.rank, "stderr", data):
            return self._read(part, command.rank, "stderr")
        offset = self.state.read_offset(part.key, command.rank, "stderr")
        return [StepOutputRead(part.key, command.rank, "stderr", offset, data, self.clock.now())]

    def _write_input(self, key: StepKey, request: StepInput) -> None:
        """srun's stdin for the tasks here that read it: into the part's input file,
        which the keeper's feeder copies into their pipes (``step_input``)."""
        folder = self._parts[key].folder
        data = base64.b64decode(request.data_b64)
        try:
            make_folder(folder)  # (the launch in the same reply: not started yet)
            have = write_input(folder, request.offset, data)
            if len(request.winsize) == 2:
                write_size(folder, *request.winsize)
            if request.lost:
                end_input(folder)
            elif request.eof and have >= request.offset + len(data):
                end_input(folder, request.offset + len(data))
        except OSError as err:  # (the agent's disk: the server sends it again)
            log.warning("step input of %s: %s", folder, err)
        else:
            wake(folder, INPUT_WAKE)  # (the feeder looks now)

    async def _watch_memory(self, part: _Part) -> None:
        """rlimit backend: tell the machine once the part's tasks' resident memory here is
        past the job's memory on this node, as the batch step's watchdog does."""
        limit = part.launch.launch.memory_bytes
        interval = 0.02  # frequent at first: a memory hog grows fast after start
        while True:
            pids = [pid for _, pid in part.live_tasks()]
            used = await asyncio.to_thread(_rss_bytes, pids)
            if used > limit:
                self._feed(StepOverMemory(part.key, self.clock.now()))
                return
            await asyncio.sleep(interval)
            interval = min(interval * 2, WATCHDOG_MAX_SECONDS)

    # -- signals and resources -------------------------------------------------------------

    def _deliver(self, part: _Part, signum: int) -> None:
        marker = _marker(self.agent, part.launch)
        for rank, pid in part.live_tasks():
            with contextlib.suppress(OSError):
                os.killpg(pid, signum)
            # left the group, not the session (or the session too, keeping the marker)
            for other in processes_of(pid, f"{marker}.{rank}"):
                with contextlib.suppress(OSError):
                    os.kill(other, signum)

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

    def _release(self, job: tuple[int, int]) -> None:
        """No step of ``job`` runs here any more: the CPUs its steps took and the job
        cgroup made for them go back (a batch script's stay its own)."""
        if job in self._cpu_jobs:
            self._cpu_jobs.discard(job)
            self.cpus.give(job)
        if job in self._made_groups:
            self._made_groups.discard(job)
            self.isolation.release_job_group(*job)

    # -- bookkeeping -----------------------------------------------------------------------

    def _new_part(self, launch: StepLaunch) -> _Part:
        # (a requeued job's next run numbers its steps from 0 again: its run in the
        # name, where an earlier run's part of the same id may still be ending)
        name = f"{launch.job_id}.{launch.launch.attempt}.{launch.step_id}"
        part = self._parts[step_key(launch)] = _Part(launch, os.path.join(self.steps_dir, name))
        return part

    def _running(self, key: StepKey) -> bool:
        part = self.state.parts.get(key)
        return part is not None and part.phase is not StepPhase.ENDED

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


def _waker(part: _Part) -> Callable[[bytes], None]:
    """The keeper's "T" (its tasks are recorded): read them now."""
    return lambda _: part.woken.set()


def _woken(fd: int, woken: asyncio.Event) -> None:
    drain(fd)
    woken.set()


def _rss_bytes(pids: list[int]) -> int:
    return sum(tree_rss_bytes(pid) for pid in pids)


def own_cpus(job_cpus: tuple[int, ...], places: list[int] | None) -> tuple[int, ...]:
    """The host CPUs a step's tasks are bound to: those of its job's (``job_cpus``, ()
    where the job is not bound) at the places the control plane gave it (srun --exact:
    its own; None: all the job's)."""
    if not job_cpus or places is None:
        return job_cpus
    return tuple(job_cpus[p] for p in places if p < len(job_cpus)) or job_cpus


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
