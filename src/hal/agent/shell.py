"""The asyncio shell around ``AgentState``: the network, time, and the machine's commands.

Every fact the agent observes goes to the machine through ``_feed`` (``state.feed``);
its commands are carried out here (reports, syncs) or by the I/O halves the shell holds:
``batch.BatchShell`` (batch jobs' supervisors and files) and ``steps.StepShell`` (job
steps' keepers and folders), which feed what they observe back the same way.
``usage.UsageSampler`` measures what runs for each long poll, ``traffic.TrafficSampler``
the running jobs' TCP traffic, and with ``interruption_notice`` set
``interruption.NoticePoller`` reads the provider's notices that the machine is going
(each sent with the syncs until one is answered, at once through the flush loop).

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
- ``Scraper.run``: the Prometheus endpoints of the jobs submitted with
  ``--feedback-metrics``, read and reported as their feedback (``hal.agent.scrape``).
- ``_output_loop`` (when the channel is an ``OutputChannel``): the job-output relay's
  long poll (ADR 0007). The server asks for byte ranges of job output files; the reads
  run in a worker thread and their answers ride on the next poll.
- ``BatchShell.run`` and ``StepShell.run``: their work that waits (artifacts to deploy,
  keepers to start and follow, cgroups to collect).

Process events arrive through the event loop's readers (``launcher.ChildWatch``): each
supervisor and keeper has a pidfd (readable when it exits) and a pipe on which it says
what it started. Stopping the shell detaches from them and leaves every job and step
running; the next shell re-adopts them from the state directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from hal import __version__
from hal.agent.artifacts import ArtifactCache, ArtifactChannel
from hal.agent.batch import BatchShell
from hal.agent.channel import (
    AgentChannel,
    AgentChannelError,
    CredentialRefused,
    HttpAgentChannel,
    NodeForgotten,
    OutputChannel,
)
from hal.agent.config import AgentConfig, host_cpus, host_memory_bytes
from hal.agent.containers import Containers
from hal.agent.counters import AgentCounters, Capacity
from hal.agent.cpus import cpu_pool, fence_choice
from hal.agent.environment import with_server_addresses
from hal.agent.events import (
    CancelRequested,
    Command,
    Event,
    ForgetJob,
    LaunchRequested,
    LimitRequested,
    MarkStopping,
    PersistRecord,
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
from hal.agent.gpuusage import GpuSampler
from hal.agent.instructions import InstructionStream
from hal.agent.interruption import NoticePoller
from hal.agent.isolation import Isolation, agent_cgroup_name, detect_isolation
from hal.agent.launcher import StepLauncher
from hal.agent.procfs import node_load
from hal.agent.pyenvs import PythonEnvs
from hal.agent.scrape import Scraper
from hal.agent.state import AgentState, feed
from hal.agent.stepevents import (
    StepInputArrived,
    StepLaunchRequested,
    StepOutgoing,
    StepsDelivered,
    SyncSoon,
)
from hal.agent.steps import StepShell
from hal.agent.store import JobStore
from hal.agent.traffic import TrafficSampler
from hal.agent.usage import UsageSampler
from hal.client.config import load_client_config
from hal.client.servers import server_urls
from hal.core.clock import Clock
from hal.host.clock import SystemClock
from hal.observe.outputfiles import read_chunk
from hal.slurm.syntax import compress_indices
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentSync,
    CacheReport,
    Cancel,
    InterruptionNotice,
    JobTraffic,
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
CACHE_REPORT_S = 60.0  # the artifact cache is reported at least this often
FLUSH_COALESCE_SECONDS = 0.005
STEP_COALESCE_SECONDS = 0.05
POLL_SECONDS = 1.0  # how often supervisors without a pidfd are checked


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
        self.machine = AgentState(
            first_seq=int(self.clock.now() * 1000), validate=config.validate, node=config.node
        )
        self.isolation = Isolation("none")
        self.agent_name = agent_cgroup_name(config.node, str(config.state_dir))
        self._gpus = gpus
        self.usage = UsageSampler()  # running jobs' and step tasks' samples; GPU health
        # running jobs' TCP traffic, every traffic_interval_seconds (a long poll's)
        self.traffic = TrafficSampler(config.traffic_interval_seconds)
        self.usage.net_rates = self.traffic.job_rates  # (the jobs' profiles)
        # --feedback-metrics: the jobs' own Prometheus endpoints, read as their feedback
        self.scraper = Scraper(config.server_url, self._live_jobs)
        self._registered = False
        # the provider's latest notice of each kind not yet sent in an answered sync
        self._notices: dict[str, InterruptionNotice] = {}
        self._cache_sent = (-1, 0.0)  # (the cache's changes, when) last reported
        # what the last report delivered held, and the one being sent (``_cache_report``)
        self._cache_shape: list[object] = []
        self._cache_pending: list[object] = []
        self._instructions = InstructionStream()  # each instruction once, in order
        self._wait_seconds = min(config.heartbeat_interval_seconds, MAX_WAIT_SECONDS)
        self._retry_cap = config.max_backoff_seconds  # (the server's timeout lowers it)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._reports_ready: asyncio.Event | None = None
        self._launcher: StepLauncher | None = None  # batch jobs' and steps' (run)
        self.counters = AgentCounters()
        self.capacity = Capacity(0, 0, 0)  # known once the GPUs are discovered (run)
        # the host CPUs jobs are bound to (hal.agent.cpus): an unknown choice or more CPUs
        # than the host has with "yes" is refused here, before the agent starts
        self.cpus = cpu_pool(config.bind_cpus, config.cpus)
        # the node's copies of the jobs' artifacts (docs/artifacts.md)
        self.artifacts = ArtifactCache(
            config.state_dir / "artifacts",
            channel if isinstance(channel, ArtifactChannel) else None,
            config.artifact_cache_bytes,
            live_jobs=self._live_jobs,
            node=config.node,  # its route through the cache tree names its leaf
        )
        # the jobs' Python environments (docs/user/environments.md), in the same cache
        self.pyenvs = PythonEnvs(self.artifacts)
        # and their containers' images (hal.agent.containers), loaded from that cache
        self.containers = Containers(self.artifacts, self.artifacts.root.parent / "containers")
        # the I/O halves of batch jobs and job steps, which carry out the machine's commands
        self.batch = BatchShell(
            config.node,
            agent=self.agent_name,
            unknown_users_as_agent=config.unknown_users_as_agent,
            store=self.store,
            jobs=self.machine.jobs,
            feed=self._feed,
            usage=self.usage,
            clock=self.clock,
            cpus=self.cpus,
            artifacts=self.artifacts,
            pyenvs=self.pyenvs,
            containers=self.containers,
        )
        self.steps = StepShell(
            config.node,
            agent=self.agent_name,
            unknown_users_as_agent=config.unknown_users_as_agent,
            steps_dir=str(config.state_dir / "steps"),
            state=self.machine.steps,
            feed=self._feed,
            clock=self.clock,
            cpus=self.cpus,
            artifacts=self.artifacts,
            pyenvs=self.pyenvs,
            containers=self.containers,
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
            self.batch.isolation = self.steps.isolation = self.usage.isolation = self.isolation
            self.batch.gpus = self.steps.gpus = self._gpus
            log.info(
                "agent %s: isolation %s %s%s, GPU devices %s, jobs bound to CPUs %s (fenced: "
                "%s), state in %s",
                self.config.node,
                self.isolation.kind,
                self.isolation.base,
                f" (accounting {self.isolation.accounting})" if self.isolation.accounting else "",
                self.isolation.devices or "not isolated",
                compress_indices(list(self.cpus.cpus)) if self.cpus.enabled else "no",
                self.isolation.cores or "no",
                self.config.state_dir,
            )
            if self._gpus.count and self.usage.gpu_sampler is None:
                self.usage.gpu_sampler = GpuSampler.open()
            self.capacity = Capacity(
                self.config.cpus or host_cpus(),
                self.config.memory_bytes or host_memory_bytes(),
                self._gpus.count,
            )
            self._launcher = StepLauncher(self.isolation)
            self._launcher.start(self._loop)
            self.batch.launcher = self.steps.launcher = self._launcher
            self.batch.adopt()  # before the first registration, which lists them
            self.steps.adopt()
            metrics = await self._start_metrics()
            async with asyncio.TaskGroup() as tasks:
                loops = [
                    tasks.create_task(self._sync_loop()),
                    tasks.create_task(self._flush_loop()),
                    tasks.create_task(self._timer_loop()),
                    tasks.create_task(self.batch.run()),
                    tasks.create_task(self.steps.run()),
                    tasks.create_task(self.scraper.run(stop)),
                ]
                if isinstance(self.channel, OutputChannel):
                    loops.append(tasks.create_task(self._output_loop(self.channel)))
                if self.config.interruption_notice:
                    poller = NoticePoller(
                        self.config.interruption_notice,
                        self.config.interruption_interval_seconds,
                    )
                    loops.append(tasks.create_task(poller.run(self._notice)))
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
            self.batch.detach()
            if self.usage.gpu_sampler is not None:
                self.usage.gpu_sampler.close()
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
        # prometheus-client only for an agent that is scraped
        from hal.agent.metrics import AgentCollector, agent_registry
        from hal.observe.listener import start_metrics_server

        # the capacity is fixed before this runs (run: after GPU discovery)
        sampler = self.usage.gpu_sampler
        collector = AgentCollector(
            self.config.node,
            self.counters,
            self.machine.jobs.values,
            self.capacity,
            gpus=sampler.devices if sampler is not None else list,
            gpu_problems=lambda: self.usage.gpu_problems,
            artifacts=self.artifacts,
            pyenvs=self.pyenvs,
            containers=self.containers,
        )
        try:
            server = await start_metrics_server(listen, agent_registry(collector))
        except (OSError, ValueError) as err:
            log.error("agent metrics not served on %s: %s", listen, err)
            return None
        where = ", ".join(str(s.getsockname()[:2]) for s in server.sockets)
        log.info("agent metrics on %s/metrics", where)
        return server

    # -- the network ----------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        backoff = _Backoff(self.config.max_backoff_seconds, self.config.node)
        counters = self.counters
        failing = False
        while True:
            try:
                if not self._registered:
                    await self._register()
                gpu_jobs = {j for j, record in self.machine.jobs.items() if record.gpus}
                usage, step_usage = await self.usage.sample(  # every heartbeat
                    self.batch.supervised(), gpu_jobs, self.steps
                )
                await self.usage.read_health(self.config.gpu_health_interval_seconds)
                traffic = await self.traffic.sample(
                    self.batch.supervised(), self.steps.usage_targets()
                )
                # the host's free memory and load ride on every heartbeat (two small
                # /proc reads): sinfo's FREE_MEM and CPU_LOAD
                mark, cache = await self._cache_report()
                request, sent = self._sync_request(
                    self._wait_seconds, usage, node_load(), step_usage, traffic, cache
                )
                reply = await self.channel.sync(self.config.node, request)
                if cache is not None:
                    self._cache_sent, self._cache_shape = mark, self._cache_pending
            except CredentialRefused as err:
                # a token the server does not know, or one that may not serve this node:
                # every retry would be refused alike, so say what to do and stop
                node = self.config.node
                if "certificate" in err.detail:  # mutual TLS: the token is not at fault
                    log.error(
                        "the control plane refused this agent for node %s (%s): no retry "
                        "can fix that; give the agent node %s's certificate (--tls-cert, "
                        "--tls-key) and start it again",
                        node,
                        err,
                        node,
                    )
                    raise
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
            self._feed(StepsDelivered(sent, self.clock.now()))
            self._notices_sent(request)
            self._apply(reply)

    async def _flush_loop(self) -> None:
        assert self._reports_ready is not None
        while True:
            await self._reports_ready.wait()
            # a few ms lets a short job's "started" and "finished" (and its neighbours')
            # travel in one sync instead of one request each
            # (step output alone waits a little longer: a chatty task's lines go together;
            # not a terminal's, whose echoes a user waits for)
            only_output = not self.machine.outbox and not self.machine.steps.interactive()
            await asyncio.sleep(STEP_COALESCE_SECONDS if only_output else FLUSH_COALESCE_SECONDS)
            self._reports_ready.clear()
            news = self.machine.outbox or self.machine.steps.pending() or self._notices
            if not self._registered or not news:
                continue  # the sync loop carries them once registered
            request, sent = self._sync_request(0.0)
            try:
                reply = await self.channel.sync(self.config.node, request)
            except AgentChannelError as err:
                self.counters.channel_failures += 1
                log.debug("flush failed (%s); the long poll will carry the reports", err)
                continue
            self.counters.last_sync = self.clock.now()
            self._feed(StepsDelivered(sent, self.clock.now()))
            self._notices_sent(request)
            self._apply(reply)
            if self.machine.steps.pending():
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
            steps=self.machine.steps.running(),
        )
        reply = await self.channel.register(request)
        self._wait_seconds = min(
            self.config.heartbeat_interval_seconds,
            reply.heartbeat_interval_seconds,
            MAX_WAIT_SECONDS,
        )
        self._registered = True
        self._cache_sent = (-1, 0.0)  # the new session hears of the cache at once
        self._cache_shape = []
        if reply.artifact_cache_bytes is not None:  # [artifacts] node_cache
            self.artifacts.limit_bytes = reply.artifact_cache_bytes
            await asyncio.to_thread(self.artifacts.evict, self._live_jobs())
        # while the server is away, try again well within its node timeout: it gives a
        # node one timeout of grace after its own restart, and an agent backing off for
        # up to 30 s (the default cap) behind a 15 s timeout was declared dead there
        self._retry_cap = min(self.config.max_backoff_seconds, reply.node_timeout_seconds / 3)
        self._instructions.registered(reply.instructions_from)
        self.counters.registrations += 1
        if reply.kill_wait_seconds != self.machine.kill_wait_seconds:
            self.store.save_kill_wait(reply.kill_wait_seconds)
        log.info("registered %s with %d running job(s)", self.config.node, len(request.running))
        kill, kill_steps = tuple(reply.kill), tuple(reply.kill_steps)
        self._feed(Registered(reply.kill_wait_seconds, kill, self.clock.now(), kill_steps))

    def _sync_request(
        self,
        wait: float,
        usage: list[JobUsage] | None = None,
        load: tuple[int | None, float | None] = (None, None),
        step_usage: list[StepTaskUsage] | None = None,
        traffic: list[JobTraffic] | None = None,
        cache: CacheReport | None = None,
    ) -> tuple[AgentSync, StepOutgoing]:
        outbox = self.machine.outbox
        steps = self.machine.steps.outgoing()
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
            gpu_problems=self.usage.gpu_problems,
            traffic=traffic or [],
            notices=list(self._notices.values()),
            artifact_cache=cache,
        )
        return request, steps

    def _notice(self, notice: InterruptionNotice) -> None:
        """A notice the poller read: sent with the next sync, at once (a newer one of its
        kind replaces one not yet sent: AgentSync takes one of each)."""
        self._notices[notice.kind] = notice
        self._sync_soon()

    def _notices_sent(self, request: AgentSync) -> None:
        """The notices ``request`` carried reached the server: not sent again."""
        for notice in request.notices:
            if self._notices.get(notice.kind) == notice:
                del self._notices[notice.kind]

    async def _cache_report(self) -> tuple[tuple[int, float], CacheReport | None]:
        """The artifact cache's contents, when they may have changed since the last sent
        or ``CACHE_REPORT_S`` has passed (copies other agents sharing the folder made);
        with the mark to remember once it is sent."""
        now = self.clock.now()
        changes, at = self._cache_sent
        if changes == self.artifacts.changes and now - at < CACHE_REPORT_S:
            return self._cache_sent, None
        seen = self.artifacts.changes
        report = await asyncio.to_thread(self.artifacts.inventory, self._live_jobs())
        # copies, sizes and holds as last sent: only the times of use moved (a job
        # deployed what was here), which wait for the periodic report
        shape: list[object] = [(c.name, c.size, c.held) for c in report.copies]
        shape.append(report.limit_bytes)
        if shape == self._cache_shape and now - at < CACHE_REPORT_S:
            self._cache_sent = (seen, at)
            return self._cache_sent, None
        self._cache_pending = shape  # (what it holds once the report is delivered)
        return (seen, now), report

    def _apply(self, reply: AgentInstructions) -> None:
        now = self.clock.now()
        if reply.reregister:
            self._registered = False
        self._feed(ReportsAcked(reply.acked_seq, now))
        for instruction in self._instructions.fresh(reply):
            if isinstance(instruction, Launch):
                launch = with_server_addresses(instruction, self._servers())
                self._feed(LaunchRequested(launch, now))
                self.scraper.launched(launch)
            elif isinstance(instruction, Cancel):
                self._feed(CancelRequested(instruction, now))
            elif isinstance(instruction, Limit):
                self._feed(LimitRequested(instruction, now))
            elif isinstance(instruction, StepLaunch):
                self._feed(StepLaunchRequested(instruction, now))
            elif isinstance(instruction, StepInput):
                self._feed(StepInputArrived(instruction, now))  # srun's stdin for the tasks
            elif isinstance(instruction, StepSignal):
                self._feed(self.steps.signal_requested(instruction))
            elif isinstance(instruction, Prefetch):
                self.batch.prefetch(instruction)
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
            if self.batch.polled():
                timeout = min(timeout or POLL_SECONDS, POLL_SECONDS)
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that races with the wake-up, and the agent would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self.batch.check_polled()

    # -- the machine ----------------------------------------------------------------------

    def _feed(self, event: Event) -> None:
        feed(self.machine, event, self._execute)
        if self._wake is not None:
            self._wake.set()

    def _execute(self, command: Command) -> list[Event]:
        match command:
            case SendReport():
                self.counters.on_report(command.report)
                self._sync_soon()
            case SyncSoon():
                self._sync_soon()
            case (
                SpawnJob()
                | SignalJob()
                | PersistRecord()
                | ForgetJob()
                | TellJob()
                | MarkStopping()
            ):
                return self.batch.execute(command)
            case _:
                return self.steps.execute(command)
        return []

    def _sync_soon(self) -> None:
        """A report or step news waits: the flush loop sends a sync soon."""
        if self._reports_ready is not None:
            self._reports_ready.set()

    def _servers(self) -> list[str]:
        """The server addresses this agent was given, the one leading first (as far as
        its channel knows): a job's ``HAL_URL`` where the submitter set none."""
        if isinstance(self.channel, HttpAgentChannel):
            return self.channel.servers.order()
        return list(server_urls(self.config.server_url))

    def _live_jobs(self) -> set[int]:
        return {*self.machine.jobs, *(s.job_id for s in self.machine.steps.running())}


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
