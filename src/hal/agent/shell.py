"""The asyncio shell around ``AgentState``: processes, files, timers and the network.

These tasks run under one task group until ``stop`` is set:

- ``_sync_loop``: register, then long-poll ``sync`` forever, carrying unacknowledged
  reports; on any network trouble it backs off (capped, jittered) and tries again — an
  agent never exits because its server is away; on ``reregister``/404 it registers again.
  A refused token (401/403, ``CredentialRefused``) is the exception: no retry can fix it,
  so it logs what to do and ends the agent (``run`` raises it once the loops stopped).
- ``_flush_loop``: a report produced while the long poll waits would sit there for up to
  ``heartbeat_interval_seconds``; this task sends it at once in a second, non-waiting sync.
  (Cancelling the long poll instead could drop instructions the server already put into
  its reply.)
- ``_timer_loop``: sleeps until the machine's next deadline (time limit, --signal,
  SIGKILL after the grace) and feeds it a ``Tick``.
- with ``metrics_listen`` set, an asyncio listener answers ``GET /metrics`` on the same
  loop (``hal.agent.metrics``).
- ``_output_loop`` (when the channel is an ``OutputChannel``): the job-output relay's
  long poll (ADR 0007). The server asks for byte ranges of job output files; the reads
  run in a worker thread and their answers ride on the next poll.

Process events arrive through the event loop's readers: each step supervisor has a pidfd
(readable when it exits) and a pipe on which it announces the job's pid. Stopping the shell
detaches from them and leaves every job running; the next shell re-adopts them from the
state directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, replace

from hal import __version__
from hal.agent.artifacts import ArtifactCache, ArtifactChannel, ArtifactError
from hal.agent.channel import (
    AgentChannel,
    AgentChannelError,
    CredentialRefused,
    HttpAgentChannel,
    NodeForgotten,
    OutputChannel,
)
from hal.agent.config import AgentConfig, host_cpus, host_memory_bytes
from hal.agent.cpus import cpu_pool, fence_choice
from hal.agent.events import (
    CancelRequested,
    Command,
    Event,
    ForgetJob,
    JobAdopted,
    LaunchFailed,
    LaunchRequested,
    LimitRequested,
    MarkStopping,
    PersistRecord,
    ProcessExited,
    ProcessStarted,
    Registered,
    ReportsAcked,
    SendReport,
    SignalJob,
    SignalRequested,
    SpawnJob,
    TellJob,
    Tick,
)
from hal.agent.gpus import GpuInventory, configured_gpus, device_choice
from hal.agent.gpuusage import GpuSampler, GpuTally, ProcessGpu, use_of
from hal.agent.instructions import InstructionStream
from hal.agent.isolation import Isolation, agent_cgroup_name, detect_isolation
from hal.agent.launcher import LaunchReply, StepLauncher
from hal.agent.metrics import (
    AgentCollector,
    AgentCounters,
    Capacity,
    agent_registry,
)
from hal.agent.plan import LaunchError, build_step_plan
from hal.agent.procfs import (
    Usage,
    descendants,
    job_usage,
    node_load,
    open_pidfd,
    tree_usage,
)
from hal.agent.records import ExitOutcome, Phase
from hal.agent.remains import end_remains
from hal.agent.state import AgentState
from hal.agent.steps import Key as StepKey
from hal.agent.steps import Outgoing, StepTasks, TaskRef
from hal.agent.store import JobStore, StoredJob
from hal.agent.supervisor import (
    PLAN_FILE,
    STOPPING_FILE,
    StepPlan,
    parse_started,
    read_status,
    read_supervisor,
    tell_job_from_agent,
    write_atomic,
)
from hal.client.config import load_client_config
from hal.core.clock import Clock
from hal.host.clock import SystemClock
from hal.host.process import start_ticks
from hal.observe.listener import start_metrics_server
from hal.observe.outputfiles import read_chunk
from hal.slurm.steps import cancelled_message, stamp
from hal.slurm.syntax import compress_indices
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentSync,
    Cancel,
    JobUsage,
    Launch,
    Limit,
    Prefetch,
    StepInput,
    StepLaunch,
    StepSignal,
    StepTaskUsage,
)
from hal.wire.output import OutputChunk, OutputPoll, OutputRead

log = logging.getLogger("hal.agent")

MAX_REPORTS_PER_SYNC = 1000  # after a long outage the backlog goes out in slices
MAX_WAIT_SECONDS = 60.0  # AgentSync.wait_seconds' upper bound
FLUSH_COALESCE_SECONDS = 0.005
STEP_COALESCE_SECONDS = 0.05
POLL_SECONDS = 1.0  # how often supervisors without a pidfd are checked
# running jobs' usage goes with every long poll, at most this often (a busy node's polls
# come back early with every launch); the server keeps the last sample until the next
USAGE_MIN_INTERVAL_S = 2.0
LOST_MESSAGE = (
    "the step supervisor vanished without recording the job's exit status; "
    "the job's processes were killed"
)


@dataclass(slots=True)
class _Watch:
    """How the shell follows one step supervisor."""

    job_id: int
    attempt: int
    supervisor_pid: int
    supervisor_ticks: int
    job_dir: str
    pidfd: int | None = None
    started_fd: int | None = None


# one usage sample: the jobs' (job, attempt, (RSS, CPU), GPU use), the step tasks'
# ((job, run, step, rank, pid), (RSS, CPU)) and those tasks' GPU use by (step, rank)
_Sampled = tuple[
    list[tuple[int, int, Usage, ProcessGpu | None]],
    list[tuple[TaskRef, Usage]],
    dict[tuple[StepKey, int], ProcessGpu],
]


class _Backoff:
    def __init__(self, cap: float, seed: str) -> None:
        self.cap = cap
        self.failures = 0
        self._rng = random.Random(seed)  # jitter, so that a restarted server is not stormed

    def next(self) -> float:
        delay = min(self.cap, 0.5 * 2.0**self.failures)
        self.failures += 1
        return delay * self._rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0


class AgentShell:
    def __init__(
        self,
        config: AgentConfig,
        channel: AgentChannel,
        *,
        clock: Clock | None = None,
        gpus: GpuInventory | None = None,
    ) -> None:
        self.config = config
        self.channel = channel
        self.clock = clock or SystemClock()
        self.store = JobStore(config.state_dir)
        # Seqs start at the wall clock in ms, so a restarted agent's reports sort after
        # its predecessor's even if the server kept that one's acked_seq.
        self.machine = AgentState(first_seq=int(self.clock.now() * 1000), validate=config.validate)
        self.isolation = Isolation("none")
        self.agent_name = agent_cgroup_name(config.node, str(config.state_dir))
        self._gpus = gpus
        self._watches: dict[int, _Watch] = {}
        self._polled: dict[int, _Watch] = {}  # supervisors without a pidfd
        self._peaks: dict[tuple[int, int], int] = {}  # (job, attempt) → most RSS sampled
        # NVML per-process GPU use, once GPUs are found (run); tests may set their own
        self.gpu_sampler: GpuSampler | None = None
        self._gpu_tallies: dict[tuple[int, int], GpuTally] = {}  # jobs given GPUs
        self._gpu_problems: list[str] | None = None  # the last health read's (gpuhealth)
        self._health_read_at = 0.0  # monotonic time of that read
        self._sampled_at = -USAGE_MIN_INTERVAL_S  # monotonic time of the last sample
        self._registered = False
        self._instructions = InstructionStream()  # each instruction once, in order
        self._wait_seconds = min(config.heartbeat_interval_seconds, MAX_WAIT_SECONDS)
        self._retry_cap = config.max_backoff_seconds  # (the server's timeout lowers it)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._reports_ready: asyncio.Event | None = None
        self._launcher: StepLauncher | None = None
        self.counters = AgentCounters()
        self.capacity = Capacity(0, 0, 0)  # known once the GPUs are discovered (run)
        # the host CPUs jobs are bound to (hal.agent.cpus): an unknown choice or more CPUs
        # than the host has with "yes" is refused here, before the agent starts
        self.cpus = cpu_pool(config.bind_cpus, config.cpus)
        # the node's copies of the jobs' artifacts (docs/user/artifacts.md)
        self.artifacts = ArtifactCache(
            config.state_dir / "artifacts",
            channel if isinstance(channel, ArtifactChannel) else None,
            config.artifact_cache_bytes,
            live_jobs=self._live_jobs,
        )
        self._deploying: set[asyncio.Task[None]] = set()
        self.steps = StepTasks(
            config.node,
            agent=self.agent_name,
            unknown_users_as_agent=config.unknown_users_as_agent,
            notify=self._step_output,
            steps_dir=str(config.state_dir / "steps"),
            cpus=self.cpus,
            artifacts=self.artifacts,
        )

    # -- life ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._reports_ready = asyncio.Event()
        self.store.open()
        metrics: asyncio.Server | None = None
        refused: CredentialRefused | None = None
        try:
            kill_wait = self.store.load_kill_wait()
            if kill_wait is not None:
                self.machine.kill_wait_seconds = kill_wait
            if self._gpus is None:
                self._gpus = configured_gpus(self.config)
            self.isolation = detect_isolation(
                self.config.isolation,
                self.agent_name,
                device_choice(self.config, self._gpus),
                fence_choice(self.config.constrain_cores, self.cpus),
            )
            self.steps.isolation = self.isolation
            self.steps.gpus = self._gpus
            log.info(
                "agent %s: isolation %s %s, GPU devices %s, jobs bound to CPUs %s (fenced: "
                "%s), state in %s",
                self.config.node,
                self.isolation.kind,
                self.isolation.base,
                self.isolation.devices or "not isolated",
                compress_indices(list(self.cpus.cpus)) if self.cpus.enabled else "no",
                self.isolation.cores or "no",
                self.config.state_dir,
            )
            if self._gpus.count and self.gpu_sampler is None:
                self.gpu_sampler = GpuSampler.open()
            self.capacity = Capacity(
                self.config.cpus or host_cpus(),
                self.config.memory_bytes or host_memory_bytes(),
                self._gpus.count,
            )
            self._launcher = StepLauncher(self.isolation, self._on_launch_reply)
            self._launcher.start(self._loop)
            for stored in self.store.load():
                self._adopt(stored)
            self.steps.adopt()  # before the first registration, which lists them
            metrics = await self._start_metrics()
            async with asyncio.TaskGroup() as tasks:
                loops = [
                    tasks.create_task(self._sync_loop()),
                    tasks.create_task(self._flush_loop()),
                    tasks.create_task(self._timer_loop()),
                    tasks.create_task(self.steps.run()),
                ]
                if isinstance(self.channel, OutputChannel):
                    loops.append(tasks.create_task(self._output_loop(self.channel)))
                await stop.wait()
                for task in loops:
                    task.cancel()
        except* CredentialRefused as group:  # the sync loop's: the agent stops
            refused = _first_refusal(group)
        finally:
            if metrics is not None:
                metrics.close()
            running = len(self.machine.jobs)
            if self._launcher is not None:
                self._launcher.stop()
            self._detach()
            if self.gpu_sampler is not None:
                self.gpu_sampler.close()
            self.isolation.release()
            self.store.close()
        log.info("agent %s stopped; %d job(s) keep running", self.config.node, running)
        if refused is not None:
            raise refused

    async def _start_metrics(self) -> asyncio.Server | None:
        """The /metrics listener, if configured. A listener that cannot start is logged,
        not fatal: running jobs matters more than being scraped."""
        listen = self.config.metrics_listen
        if not listen:
            return None
        # the capacity is fixed before this runs (run: after GPU discovery)
        sampler = self.gpu_sampler
        collector = AgentCollector(
            self.config.node,
            self.counters,
            self.machine.jobs.values,
            self.capacity,
            gpus=sampler.devices if sampler is not None else list,
            gpu_problems=lambda: self._gpu_problems,
            artifacts=self.artifacts,
        )
        try:
            server = await start_metrics_server(listen, agent_registry(collector))
        except (OSError, ValueError) as err:
            log.error("agent metrics not served on %s: %s", listen, err)
            return None
        where = ", ".join(str(s.getsockname()[:2]) for s in server.sockets)
        log.info("agent metrics on %s/metrics", where)
        return server

    def _detach(self) -> None:
        """Stop watching the supervisors without touching them: the jobs run on."""
        for watch in list(self._watches.values()):
            self._close_fds(watch)
        self._watches.clear()
        self._polled.clear()

    # -- the network ----------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        backoff = _Backoff(self.config.max_backoff_seconds, self.config.node)
        counters = self.counters
        failing = False
        while True:
            try:
                if not self._registered:
                    await self._register()
                usage, step_usage = await self._sample_usage()  # every heartbeat
                await self._read_gpu_health()
                # the host's free memory and load ride on every heartbeat (two small
                # /proc reads): sinfo's FREE_MEM and CPU_LOAD
                request, sent = self._sync_request(
                    self._wait_seconds, usage, node_load(), step_usage
                )
                reply = await self.channel.sync(self.config.node, request)
            except CredentialRefused as err:
                # a token the server does not know, or one that may not serve this node:
                # every retry would be refused alike, so say what to do and stop
                node = self.config.node
                log.error(
                    "the control plane refused this agent's token for node %s (%s): no "
                    "retry can fix that; give the agent an agent token that may serve "
                    "%s (an administrator makes one with `hal user add NAME --agent "
                    "--nodes %s`) in --token-file or HAL_TOKEN and start it again",
                    node,
                    err,
                    node,
                    node,
                )
                raise
            except NodeForgotten as err:
                log.info("%s; registering again", err)
                counters.channel_failures += 1
                failing = True
                self._registered = False
                await asyncio.sleep(backoff.next())
                continue
            except AgentChannelError as err:
                counters.channel_failures += 1
                failing = True
                delay = backoff.next()
                log.warning("server unavailable (%s); retrying in %.1fs", err, delay)
                await asyncio.sleep(delay)
                continue
            backoff.reset()
            backoff.cap = self._retry_cap
            counters.last_sync = self.clock.now()
            if failing:
                counters.reconnects += 1
                failing = False
            self.steps.delivered(sent)
            self._apply(reply)

    async def _flush_loop(self) -> None:
        assert self._reports_ready is not None
        while True:
            await self._reports_ready.wait()
            # a few ms lets a short job's "started" and "finished" (and its neighbours')
            # travel in one sync instead of one request each
            # (step output alone waits a little longer: a chatty task's lines go together;
            # not a terminal's, whose echoes a user waits for)
            only_output = not self.machine.outbox and not self.steps.interactive()
            await asyncio.sleep(STEP_COALESCE_SECONDS if only_output else FLUSH_COALESCE_SECONDS)
            self._reports_ready.clear()
            if not self._registered or not (self.machine.outbox or self.steps.pending()):
                continue  # the sync loop carries them once registered
            request, sent = self._sync_request(0.0)
            try:
                reply = await self.channel.sync(self.config.node, request)
            except AgentChannelError as err:
                self.counters.channel_failures += 1
                log.debug("flush failed (%s); the long poll will carry the reports", err)
                continue
            self.counters.last_sync = self.clock.now()
            self.steps.delivered(sent)
            self._apply(reply)
            if self.steps.pending():
                self._reports_ready.set()  # more than one sync's worth of output

    async def _output_loop(self, channel: OutputChannel) -> None:
        """Serve the control plane's reads of job output files (ADR 0007). Answers lost
        with a failed poll are not resent: the server's reader has timed out by then and
        asks again if it still wants the bytes."""
        backoff = _Backoff(self.config.max_backoff_seconds, self.config.node + "/output")
        answers: list[OutputChunk] = []
        while True:
            poll = OutputPoll(chunks=answers)  # the server may hold it wait_seconds (20 s)
            answers = []
            try:
                reply = await channel.output(self.config.node, poll)
            except AgentChannelError as err:
                # 404 until the sync loop has registered the node; the sync loop logs outages
                log.debug("output relay poll failed (%s)", err)
                await asyncio.sleep(backoff.next())
                continue
            backoff.reset()
            if reply.reads:
                answers = await asyncio.to_thread(_read_all, reply.reads)

    async def _register(self) -> None:
        gpus = self._gpus or GpuInventory()
        request = AgentRegister(
            node=self.config.node,
            cpus=self.capacity.cpus,
            memory_bytes=self.capacity.memory_bytes,
            gpus=self.capacity.gpus,
            gpu_model=self.config.gpu_model or gpus.model,
            gpu_islands=[list(i) for i in gpus.islands],
            topology_labels=dict(self.config.topology_labels),
            # --nvlink-domain wins over what NVML's fabric info says
            nvlink_domain=self.config.nvlink_domain or gpus.nvlink_domain,
            features=list(self.config.features),
            address=self.config.address,
            version=__version__,
            isolation=self.isolation.kind,
            running=self.machine.running(),
            steps=self.steps.running(),
        )
        reply = await self.channel.register(request)
        self._wait_seconds = min(
            self.config.heartbeat_interval_seconds,
            reply.heartbeat_interval_seconds,
            MAX_WAIT_SECONDS,
        )
        self._registered = True
        # while the server is away, try again well within its node timeout: it gives a
        # node one timeout of grace after its own restart, and an agent backing off for
        # up to 30 s (the default cap) behind a 15 s timeout was declared dead there
        self._retry_cap = min(self.config.max_backoff_seconds, reply.node_timeout_seconds / 3)
        self._instructions.registered(reply.instructions_from)
        self.counters.registrations += 1
        if reply.kill_wait_seconds != self.machine.kill_wait_seconds:
            self.store.save_kill_wait(reply.kill_wait_seconds)
        log.info("registered %s with %d running job(s)", self.config.node, len(request.running))
        self._feed(Registered(reply.kill_wait_seconds, tuple(reply.kill), self.clock.now()))
        for ref in reply.kill_steps:  # steps a restarted server no longer knows
            end = StepSignal(
                job_id=ref.job_id,
                step_id=ref.step_id,
                attempt=ref.attempt or 0,
                signal=signal.SIGTERM,
                kill_wait_seconds=reply.kill_wait_seconds,
            )
            self.steps.signal(end)

    async def _sample_usage(self) -> tuple[list[JobUsage], list[StepTaskUsage]]:
        """What the running jobs and step tasks use now (``procfs.job_usage``,
        ``tree_usage``, read off the event loop), with the most memory each one's samples
        have shown, and for those given GPUs here their tallies of one NVML read
        (``gpuusage``); nothing when the last sample is under ``USAGE_MIN_INTERVAL_S``
        old."""
        now = time.monotonic()
        if now - self._sampled_at < USAGE_MIN_INTERVAL_S:
            return [], []
        self._sampled_at = now
        watched = [
            (w.job_id, w.attempt, w.supervisor_pid, w.supervisor_ticks)
            for w in self._watches.values()
            if w.supervisor_pid > 0
        ]
        tasks = self.steps.usage_targets()  # checked by start time: no recycled pids
        sampler = self.gpu_sampler
        on_gpus = {job_id for job_id, _, _, _ in watched if self._holds_gpus(job_id)}
        gpu_steps = self.steps.gpu_steps()
        read_gpus = sampler is not None and bool(
            on_gpus or any((t[0], t[1], t[2]) in gpu_steps for t in tasks)
        )

        def sample() -> _Sampled:
            # one NVML read for the jobs and the step tasks given GPUs here, and one walk
            # of each process tree for its memory, CPU and GPU use
            gpu = sampler.sample() if sampler is not None and read_gpus else None
            jobs: list[tuple[int, int, Usage, ProcessGpu | None]] = []
            for job_id, attempt, pid, ticks in watched:
                if start_ticks(pid) != ticks:
                    continue  # not our supervisor any more: a recycled pid
                below = descendants(pid)
                use = use_of(below, gpu) if gpu is not None and job_id in on_gpus else None
                jobs.append((job_id, attempt, job_usage(pid, below), use))
            step_tasks = []
            task_gpu = {}
            for job_id, attempt, step_id, rank, root in tasks:
                key = (job_id, attempt, step_id)
                below = descendants(root)
                step_tasks.append(((*key, rank, root), tree_usage(root, below)))
                if gpu is not None and key in gpu_steps:
                    # a task's tree is the task and the processes below it
                    task_gpu[(key, rank)] = use_of([root, *below], gpu)
            return jobs, step_tasks, task_gpu

        sampled, step_tasks, task_gpu = (
            await asyncio.to_thread(sample) if watched or tasks else ([], [], {})
        )
        step_usage = self.steps.usage(step_tasks, task_gpu)
        peaks: dict[tuple[int, int], int] = {}
        usage: list[JobUsage] = []
        current = {(w.job_id, w.attempt) for w in self._watches.values()}
        for key in self._gpu_tallies.keys() - current:  # ended (``_end_event`` took it)
            del self._gpu_tallies[key]
        for job_id, attempt, (rss, user, system), gpu_use in sampled:
            peak = peaks[(job_id, attempt)] = max(rss, self._peaks.get((job_id, attempt), 0))
            tally = None
            if gpu_use is not None and (job_id, attempt) in current:
                tally = self._gpu_tallies.setdefault((job_id, attempt), GpuTally())
                tally.add(gpu_use)
            usage.append(
                JobUsage(
                    job_id=job_id,
                    attempt=attempt,
                    rss_bytes=rss,
                    max_rss_bytes=peak,
                    cpu_seconds=user + system,
                    user_cpu_seconds=user,
                    system_cpu_seconds=system,
                    gpu=tally.usage() if tally is not None else None,
                )
            )
        self._peaks = peaks  # (ended jobs' go)
        return usage, step_usage

    async def _read_gpu_health(self) -> None:
        """Every ``gpu_health_interval_seconds``, the GPUs' problems (``gpuhealth``),
        read off the event loop; each sync carries the last read's."""
        sampler, interval = self.gpu_sampler, self.config.gpu_health_interval_seconds
        now = time.monotonic()
        if sampler is None or interval <= 0:
            return
        if self._gpu_problems is not None and now - self._health_read_at < interval:
            return
        self._health_read_at = now
        problems = await asyncio.to_thread(sampler.health)
        if problems != self._gpu_problems:
            if problems:
                log.warning("GPU health: %s", "; ".join(problems))
            elif self._gpu_problems:
                log.info("GPU health: no problem left")
        self._gpu_problems = problems

    def _holds_gpus(self, job_id: int) -> bool:
        record = self.machine.jobs.get(job_id)
        return record is not None and record.gpus > 0

    def _sync_request(
        self,
        wait: float,
        usage: list[JobUsage] | None = None,
        load: tuple[int | None, float | None] = (None, None),
        step_usage: list[StepTaskUsage] | None = None,
    ) -> tuple[AgentSync, Outgoing]:
        outbox = self.machine.outbox
        steps = self.steps.outgoing()
        # Jobs whose reports wait for a later slice count as running until those are sent:
        # otherwise the server, not seeing them, would end them as lost (NODE_FAIL).
        later = (r.job_id for r in outbox[MAX_REPORTS_PER_SYNC:])
        request = AgentSync(
            reports=outbox[:MAX_REPORTS_PER_SYNC],
            wait_seconds=max(0.0, wait),
            running=list(dict.fromkeys([*self.machine.jobs, *later])),
            usage=usage or [],
            free_memory_bytes=load[0],
            cpu_load=load[1],
            applied=self._instructions.applied,
            step_output=steps.output,
            step_usage=step_usage or [],
            step_ends=steps.ends,
            step_bad_exits=steps.bad_exits,
            step_input_fed=steps.input_fed,
            gpu_problems=self._gpu_problems,
        )
        return request, steps

    def _step_output(self) -> None:
        if self._reports_ready is not None:
            self._reports_ready.set()

    def _apply(self, reply: AgentInstructions) -> None:
        now = self.clock.now()
        if reply.reregister:
            self._registered = False
        self._feed(ReportsAcked(reply.acked_seq, now))
        for instruction in self._instructions.fresh(reply):
            if isinstance(instruction, Launch):
                self._feed(LaunchRequested(instruction, now))
            elif isinstance(instruction, Cancel):
                self._feed(CancelRequested(instruction, now))
            elif isinstance(instruction, Limit):
                self._feed(LimitRequested(instruction, now))
            elif isinstance(instruction, StepLaunch):
                self.steps.launch(instruction)  # steps live beside the machine (steps.py)
            elif isinstance(instruction, StepInput):
                self.steps.input(instruction)  # srun's stdin for the step's tasks here
            elif isinstance(instruction, StepSignal):
                self.steps.signal(instruction)
            elif isinstance(instruction, Prefetch):
                self._track(self._prefetch(instruction))
            else:
                self._feed(SignalRequested(instruction, now))

    # -- time -----------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        assert self._wake is not None
        while True:
            now = self.clock.now()
            deadline = self.machine.next_deadline()
            if deadline is not None and deadline <= now:
                self._feed(Tick(now))
                if (self.machine.next_deadline() or now + 1) <= now:
                    await asyncio.sleep(0.05)  # never spin, whatever the machine says
                continue
            timeout = None if deadline is None else deadline - now
            if self._polled:
                timeout = min(timeout or POLL_SECONDS, POLL_SECONDS)
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that races with the wake-up, and the agent would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._check_polled()

    # -- the machine ----------------------------------------------------------------------

    def _feed(self, event: Event) -> None:
        pending: deque[Event] = deque([event])
        while pending:
            for command in self.machine.handle(pending.popleft()):
                pending.extend(self._execute(command))
        if self._wake is not None:
            self._wake.set()

    def _execute(self, command: Command) -> list[Event]:
        match command:
            case SpawnJob():
                return self._spawn(command)
            case SignalJob():
                self._send_signal(command)
            case PersistRecord():
                self.store.save_record(command.record)
            case ForgetJob():
                self.store.remove(command.job_id, command.attempt)
            case SendReport():
                self.counters.on_report(command.report)
                if self._reports_ready is not None:
                    self._reports_ready.set()
            case TellJob():
                self._tell(command)
            case MarkStopping():
                job_dir = self.store.job_dir(command.job_id, command.attempt)
                with contextlib.suppress(OSError):  # (its folder is gone: it has ended)
                    write_atomic(job_dir, STOPPING_FILE, repr(command.kill_at))
        return []

    def _tell(self, command: TellJob) -> None:
        """slurmstepd's line of why the job ends, in its error output (Slurm 22.05.8:
        ``slurmstepd-n1: error: *** JOB 7 ON n1 CANCELLED AT 2026-11-26T22:42:26 DUE TO
        TIME LIMIT ***``), written by a thread as the job's user."""
        when = stamp(command.time)
        text = cancelled_message(self.config.node, command.job_id, when, command.why) + "\n"
        job_dir = self.store.job_dir(command.job_id, command.attempt)
        threading.Thread(target=tell_job_from_agent, args=(job_dir, text), daemon=True).start()

    def _send_signal(self, command: SignalJob) -> None:
        try:
            if command.group:
                os.killpg(command.pid, command.signum)
            else:
                os.kill(command.pid, command.signum)
        except ProcessLookupError:
            pass  # it just ended; its supervisor reports the exit
        except PermissionError as err:
            log.error("cannot signal job %d (pid %d): %s", command.job_id, command.pid, err)
        if command.group and command.signum != signal.SIGKILL:
            # (a SIGKILL ends the batch shell, and its supervisor then kills the strays)
            self._signal_strays(command)

    def _signal_strays(self, command: SignalJob) -> None:
        """Signal the job's processes outside its process group (``setsid``, a double
        fork), as Slurm signals every process of a job: they are all below its step
        supervisor, the job's subreaper."""
        watch = self._watches.get(command.job_id)
        if watch is None or watch.attempt != command.attempt or watch.supervisor_pid <= 0:
            return
        for pid in descendants(watch.supervisor_pid):
            with contextlib.suppress(OSError):  # ended meanwhile, or not ours to signal
                if os.getpgid(pid) != command.pid:
                    os.kill(pid, command.signum)

    # -- processes ------------------------------------------------------------------------

    def _live_jobs(self) -> set[int]:
        return {*self.machine.jobs, *(s.job_id for s in self.steps.running())}

    def _spawn(self, command: SpawnJob) -> list[Event]:
        if command.launch.artifacts:  # the job's artifacts first (a task: they may download)
            self._track(self._deploy_then_spawn(command))
            return []
        return self._spawn_now(command)

    def _track(self, work: Coroutine[None, None, None]) -> None:
        """Run ``work`` as a task the agent keeps (a task nobody holds may vanish)."""
        task = asyncio.ensure_future(work)
        self._deploying.add(task)
        task.add_done_callback(self._deploying.discard)

    async def _prefetch(self, prefetch: Prefetch) -> None:
        """A job's artifacts on a node of its other than the batch node, fetched now. A
        failure is only logged: the step that needs them fails saying so."""
        try:
            await self.artifacts.deploy(prefetch.job_id, prefetch.artifacts, {})
        except Exception as err:
            log.warning("job %d: artifacts not fetched ahead: %s", prefetch.job_id, err)

    async def _deploy_then_spawn(self, command: SpawnJob) -> None:
        launch = command.launch
        try:
            env = await self.artifacts.deploy(launch.job_id, launch.artifacts, launch.environment)
        except Exception as err:  # whatever it was, the job fails saying so, never hangs
            if not isinstance(err, ArtifactError | AgentChannelError):
                log.exception("deploying job %d's artifacts", launch.job_id)
            message = f"cannot launch job {launch.job_id} on {self.config.node}: artifact: {err}"
            log.error("%s", message)
            self._feed(LaunchFailed(launch.job_id, launch.attempt, message, self.clock.now()))
            return
        job = self.machine.jobs.get(launch.job_id)
        if job is None or job.attempt != launch.attempt or job.phase is not Phase.LAUNCHING:
            return  # ended meanwhile
        if job.end_state:  # cancelled meanwhile: it never starts (the server ends it so)
            why = f"job {launch.job_id} ended while its artifacts were deployed"
            self._feed(LaunchFailed(launch.job_id, launch.attempt, why, self.clock.now()))
            return
        launch = launch.model_copy(update={"environment": env})
        for event in self._spawn_now(SpawnJob(launch, command.record)):
            self._feed(event)

    def _spawn_now(self, command: SpawnJob) -> list[Event]:
        launch = command.launch
        job_dir = self.store.job_dir(launch.job_id, launch.attempt)
        key = (launch.job_id, launch.attempt)
        try:
            plan = build_step_plan(
                launch,
                node=self.config.node,
                job_dir=job_dir,
                agent=self.agent_name,
                unknown_users_as_agent=self.config.unknown_users_as_agent,
                denied_gpus=self.steps.denied_gpus(launch.gpu_ids),
                cpu_ids=self.cpus.take(key, launch.cpus),
            )
            owner = (plan.uid, plan.gid) if plan.uid is not None and plan.gid is not None else None
            self.store.create(command.record, launch.script, owner, plan.to_json())
            started_r, started_w = os.pipe()
        except (LaunchError, OSError, ValueError) as err:
            self.cpus.give(key)
            message = f"cannot launch job {launch.job_id} on {self.config.node}: {err}"
            log.error("%s", message)
            return [LaunchFailed(launch.job_id, launch.attempt, message, self.clock.now())]
        os.set_blocking(started_r, False)
        watch = _Watch(launch.job_id, launch.attempt, 0, 0, job_dir, started_fd=started_r)
        self._watches[watch.job_id] = watch
        assert self._loop is not None and self._launcher is not None
        self._loop.add_reader(started_r, self._on_started, watch)
        self._launcher.launch(launch.job_id, launch.attempt, job_dir, started_w)
        return []

    def _on_launch_reply(self, reply: LaunchReply) -> None:
        watch = self._watches.get(reply.job_id)
        if watch is None or watch.attempt != reply.key:
            return
        if reply.error:
            # The launcher may have recorded and started a supervisor before failing.
            recorded = read_supervisor(watch.job_dir)
            if recorded is None:
                self._close_fds(watch)
                self._watches.pop(watch.job_id, None)
                self.cpus.give((watch.job_id, watch.attempt))
                self._feed(LaunchFailed(watch.job_id, watch.attempt, reply.error, self.clock.now()))
                return
            watch.supervisor_pid, watch.supervisor_ticks = recorded
        else:
            watch.supervisor_pid, watch.supervisor_ticks = reply.pid, reply.ticks
        self._watch_supervisor(watch)

    def _watch_supervisor(self, watch: _Watch) -> None:
        assert self._loop is not None
        self._watches[watch.job_id] = watch
        watch.pidfd = open_pidfd(watch.supervisor_pid)
        if watch.pidfd is not None and start_ticks(watch.supervisor_pid) != watch.supervisor_ticks:
            # The pid was recycled before pidfd_open: not our supervisor, which is gone.
            os.close(watch.pidfd)
            watch.pidfd = None
        if watch.pidfd is not None:
            self._loop.add_reader(watch.pidfd, self._on_supervisor_exit, watch)
        elif start_ticks(watch.supervisor_pid) != watch.supervisor_ticks:
            self._on_supervisor_exit(watch)  # a quick job: already over
        else:
            self._polled[watch.job_id] = watch  # no pidfd (Linux < 5.3): poll it

    def _on_started(self, watch: _Watch) -> None:
        assert self._loop is not None
        if watch.started_fd is None:
            return
        try:
            message = os.read(watch.started_fd, 4096)
        except BlockingIOError:
            return
        self._loop.remove_reader(watch.started_fd)
        os.close(watch.started_fd)
        watch.started_fd = None
        parsed = parse_started(message)
        if parsed is None:
            # Killed before it started the job (it reports every launch error): its exit,
            # without a status, ends the job as lost, as one killed later does.
            return
        if isinstance(parsed, str):
            self._feed(LaunchFailed(watch.job_id, watch.attempt, parsed, self.clock.now()))
        else:
            pid, started = parsed
            self._feed(ProcessStarted(watch.job_id, watch.attempt, pid, started))

    def _on_supervisor_exit(self, watch: _Watch) -> None:
        if watch.started_fd is not None:
            self._on_started(watch)  # both fds may be ready at once: start before exit
        self._close_fds(watch)
        self._watches.pop(watch.job_id, None)
        self._polled.pop(watch.job_id, None)
        self.cpus.give((watch.job_id, watch.attempt))
        status = read_status(watch.job_dir)
        if status is None:
            self._end_remains(watch)
        self._feed(self._end_event(watch, status))

    def _check_polled(self) -> None:
        for watch in list(self._polled.values()):
            if start_ticks(watch.supervisor_pid) != watch.supervisor_ticks:
                self._on_supervisor_exit(watch)

    def _end_event(self, watch: _Watch, status: ExitOutcome | str | None) -> Event:
        now = self.clock.now()
        if isinstance(status, ExitOutcome) and 0 < status.end_time < now:
            # when the supervisor saw the script end: it may have ended while no agent
            # ran (a restarted agent's "now" counted its downtime into Elapsed)
            now = status.end_time
        if isinstance(status, str):
            return LaunchFailed(watch.job_id, watch.attempt, status, now)
        if status is None:
            status = ExitOutcome(lost=True, message=LOST_MESSAGE)
        key = (watch.job_id, watch.attempt)
        # MaxRSS is the most any sample saw, as Slurm's (sstat showed it: sacct must not
        # show less), or the supervisor's figure where that is more
        sampled = self._peaks.get(key, 0)
        if sampled > status.max_rss_bytes:
            status = replace(status, max_rss_bytes=sampled)
        tally = self._gpu_tallies.pop(key, None)
        if tally is not None:
            status = replace(status, gpu=tally.usage())
        return ProcessExited(watch.job_id, watch.attempt, status, now)

    def _close_fds(self, watch: _Watch) -> None:
        assert self._loop is not None
        for fd in (watch.pidfd, watch.started_fd):
            if fd is not None:
                self._loop.remove_reader(fd)
                os.close(fd)
        watch.pidfd = watch.started_fd = None

    # -- restart --------------------------------------------------------------------------

    def _adopt(self, stored: StoredJob) -> None:
        """Take over a job an earlier agent launched, without launching it again."""
        record = stored.record
        now = self.clock.now()
        if stored.supervisor is None:
            # The earlier agent stopped before recording a supervisor, so none was told
            # to start the job: it never ran.
            self._feed(JobAdopted(record.evolve(phase=Phase.LAUNCHING, pid=0), now))
            self._feed(
                LaunchFailed(
                    record.job_id, record.attempt, "the agent stopped before the job started", now
                )
            )
            return
        if record.phase is Phase.LAUNCHING and stored.started is not None and record.plain_start:
            # started before: the earlier agent kept the start in memory only (and
            # reported it, unless it stopped first — as when it persisted the start)
            record = record.start(*stored.started)
        self._feed(JobAdopted(record, now))
        if record.phase is Phase.LAUNCHING and stored.started is not None:
            pid, started = stored.started
            self._feed(ProcessStarted(record.job_id, record.attempt, pid, started))
        sup_pid, ticks = stored.supervisor
        self.cpus.note((record.job_id, record.attempt), _bound_cpus(stored.job_dir))
        watch = _Watch(record.job_id, record.attempt, sup_pid, ticks, stored.job_dir)
        if start_ticks(sup_pid) == ticks:
            log.info("re-adopted job %d (supervisor %d)", record.job_id, sup_pid)
            self._watch_supervisor(watch)
            return
        status = read_status(stored.job_dir)
        if status is None:
            self._end_remains(watch)
        self._feed(self._end_event(watch, status))

    def _end_remains(self, watch: _Watch) -> None:
        """The supervisor died without a status (someone SIGKILLed it): kill the processes
        its job left behind and remove its cgroup (``remains``), as its own cleanup would
        have. This blocks the loop briefly (~1 s at worst), for a rare event."""
        job = (watch.job_id, watch.attempt)
        supervisor = (watch.supervisor_pid, watch.supervisor_ticks)
        strays = end_remains(self.isolation, self.agent_name, job, supervisor)
        log.error(
            "job %d: step supervisor %d died without recording an exit status; killed %d "
            "process(es) of the job",
            watch.job_id,
            watch.supervisor_pid,
            strays,
        )


def _bound_cpus(job_dir: str) -> tuple[int, ...]:
    """The host CPUs an adopted job was bound to, from its plan (none if unreadable)."""
    try:
        with open(os.path.join(job_dir, PLAN_FILE)) as f:
            return StepPlan.from_json(f.read()).cpu_ids
    except (OSError, ValueError, TypeError, KeyError):
        return ()


def _first_refusal(group: BaseExceptionGroup[CredentialRefused]) -> CredentialRefused:
    found = group.exceptions[0]
    return found if isinstance(found, CredentialRefused) else _first_refusal(found)


def _read_all(reads: list[OutputRead]) -> list[OutputChunk]:
    return [read_chunk(r) for r in reads]


async def run_agent(
    config: AgentConfig, stop: asyncio.Event, *, channel: AgentChannel | None = None
) -> None:
    """Run the node agent until ``stop`` is set. Jobs keep running after it returns.

    Raises ``CredentialRefused`` when the control plane refuses the agent's token (the
    agent has logged why and stopped; its jobs keep running). ``channel`` replaces the
    HTTP transport (tests use an in-process fake).
    """
    own_channel = channel is None
    if channel is None:
        token = config.token or load_client_config(config.server_url).token
        channel = HttpAgentChannel(config.server_url, token)
    try:
        await AgentShell(config, channel).run(stop)
    finally:
        if own_channel:
            await channel.aclose()
