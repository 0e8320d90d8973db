"""``hal emulate``: one process that is N nodes to the control plane.

Each emulated node speaks the agent protocol exactly as ``hal agent`` does — it
registers (``AgentRegister``), long-polls ``sync`` as its heartbeat, carries its reports
with a per-node ``seq`` until the server acknowledges them, applies the numbered
instructions once and in order (``instructions.InstructionStream``), sends a second,
non-waiting sync when a report is ready (the real agent's flush), and sends its running
jobs' usage with every long poll — the same requests as ``HttpAgentChannel``'s, through
``PooledAgentChannel`` (aiohttp: one connection pool for all the nodes). Its decisions
are the real agent's too: every node holds its own ``AgentState`` (the sans-IO machine),
so time limits, ``--signal``, cancels, requeues and the reports' final states are the
machine's. What differs is the shell: a job is a timer, not a process.

A job's run time (``job_runtime``), first found wins:

- ``HAL_EMULATE_RUNTIME=SECS`` in the job's environment (``sbatch
  --export=ALL,HAL_EMULATE_RUNTIME=30``, or exported in the submitting shell);
- a line ``#HAL_EMULATE runtime=SECS`` in the batch script (``exit=N`` on the same line,
  or ``HAL_EMULATE_EXIT=N`` in the environment, gives the exit code; default 0);
- the emulator's ``--runtime`` (default 60 s).

A job whose time limit is shorter is ended by the machine at its limit (TIMEOUT), as a
real one would be. SIGTERM, SIGKILL, SIGINT, SIGHUP and SIGQUIT end a job (its end is the
machine's: CANCELLED, TIMEOUT, PREEMPTED ...); other signals (``--signal=USR1@60``,
``scancel -s USR1``) are taken as a script's trap would: ignored. ``SIGSTOP``/``SIGCONT``
(``scontrol suspend``) do not pause the timer. Job steps (``srun`` inside a job) are not
emulated: no script runs, so none is started.

Memory per node is bounded: the machine keeps its jobs (at most the node's CPUs' worth)
and a fixed window of recently finished (job, attempt) pairs; the emulator holds one
timer per running job and one per node's next deadline. The nodes share one HTTP
connection pool (one connection per request in flight, as N agents would hold): at
most two sockets a node, so ``hal emulate`` raises its soft limit on open files to the
hard one (``raise_open_files``) and refuses N nodes that cannot fit. Nothing in the
server knows the difference: it sees N agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import re
import resource
import signal
import time
from dataclasses import dataclass, field

from hal import __version__
from hal.agent.channel import (
    AgentChannelError,
    CredentialRefused,
    NodeForgotten,
)
from hal.agent.events import (
    CancelRequested,
    Command,
    Event,
    ForgetJob,
    LaunchRequested,
    LimitRequested,
    ProcessExited,
    ProcessStarted,
    Registered,
    ReportsAcked,
    SendReport,
    SignalJob,
    SignalRequested,
    SpawnJob,
    Tick,
)
from hal.agent.instructions import InstructionStream
from hal.agent.pooled_channel import PooledAgentChannel
from hal.agent.records import ExitOutcome
from hal.agent.state import AgentState, feed
from hal.agent.stepevents import SyncSoon
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentSync,
    Cancel,
    JobUsage,
    Launch,
    Limit,
    Signal,
)

log = logging.getLogger("hal.agent.emulate")

RUNTIME_VARIABLE = "HAL_EMULATE_RUNTIME"
EXIT_VARIABLE = "HAL_EMULATE_EXIT"
_DIRECTIVE = re.compile(r"^#HAL_EMULATE\b(.*)$", re.MULTILINE)
_SCRIPT_HEAD = 8192  # the directive is looked for in the script's first bytes
ENDING_SIGNALS = frozenset(
    {signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
)
MAX_REPORTS_PER_SYNC = 1000
MAX_WAIT_SECONDS = 60.0
FLUSH_COALESCE_SECONDS = 0.005
MAX_BACKOFF_SECONDS = 30.0
REPORT_SECONDS = 10.0
SOCKETS_PER_NODE = 2  # its long poll and a flush beside it
SPARE_FILES = 64  # the loop's, the log's, the resolver's ...


@dataclass(frozen=True, slots=True)
class EmulateConfig:
    server_url: str
    token: str
    nodes: int
    prefix: str = "emu"
    first: int = 1  # the first node's number: emu1, emu2, ... (several processes: disjoint)
    cpus: int = 16
    memory_bytes: int = 64 << 30
    runtime_seconds: float = 60.0  # a job's run time without a hint
    features: tuple[str, ...] = ()
    heartbeat_interval_seconds: float = 30.0  # at most; the server's interval wins below
    concurrency: int = 256  # registrations and flushes in flight at once


def raise_open_files(nodes: int) -> int:
    """Raise this process's soft limit on open files to its hard one, where it is lower,
    so that ``nodes`` nodes' sockets fit (``SOCKETS_PER_NODE`` each); the limit now.
    ``ValueError`` saying what to do when even the hard limit is too low."""
    need = nodes * SOCKETS_PER_NODE + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ValueError(
            f"{nodes} node(s) need about {need} open files and this process may open "
            f"{hard} (`ulimit -Hn`): raise the hard limit, or run fewer nodes per process "
            "(several `hal emulate --first` processes)"
        )
    if soft != resource.RLIM_INFINITY and soft < need:
        soft = need if hard == resource.RLIM_INFINITY else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


@dataclass(frozen=True, slots=True)
class Runtime:
    seconds: float
    exit_code: int = 0


def job_runtime(launch: Launch, default: float) -> Runtime:
    """How long the emulated job runs and how it exits (the module's doc says where from).
    A hint that is no number is ignored (the default applies), never fatal."""
    seconds, code = default, 0
    head = launch.script[:_SCRIPT_HEAD]
    match = _DIRECTIVE.search(head)
    if match:
        words = dict(w.split("=", 1) for w in match.group(1).split() if "=" in w)
        seconds = _number(words.get("runtime"), seconds)
        code = int(_number(words.get("exit"), code))
    env = launch.environment
    seconds = _number(env.get(RUNTIME_VARIABLE), seconds)
    code = int(_number(env.get(EXIT_VARIABLE), code))
    return Runtime(max(0.0, seconds), min(255, max(0, code)))


def _number(text: str | None, default: float) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        return default
    return value if math.isfinite(value) else default


@dataclass(eq=False)
class EmulatedNode:
    name: str
    machine: AgentState
    instructions: InstructionStream = field(default_factory=InstructionStream)
    registered: bool = False
    wait_seconds: float = 5.0
    retry_cap: float = MAX_BACKOFF_SECONDS
    ends: dict[tuple[int, int], asyncio.TimerHandle] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)  # job → start (usage)
    deadline: asyncio.TimerHandle | None = None
    deadline_at: float | None = None
    syncs: int = 0
    failures: int = 0


class Emulator:
    """N emulated nodes on one event loop, sharing one HTTP connection pool."""

    def __init__(self, config: EmulateConfig) -> None:
        if config.nodes < 1:
            raise ValueError("--nodes: at least 1")
        self.config = config
        # one channel, one connection pool, for all the nodes (pooled_channel's doc)
        self.channel = PooledAgentChannel(config.server_url, config.token)
        first_seq = int(time.time() * 1000)
        self.nodes = [
            EmulatedNode(
                f"{config.prefix}{config.first + i}",
                AgentState(
                    first_seq=first_seq,
                    validate=False,
                    node=f"{config.prefix}{config.first + i}",
                ),
            )
            for i in range(config.nodes)
        ]
        self._dirty: set[EmulatedNode] = set()
        self._dirty_event: asyncio.Event | None = None
        self._gate: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flushes: set[asyncio.Task[None]] = set()  # in flight, outside the TaskGroup
        self.launched = 0
        self.finished = 0
        self.flushes = 0  # non-waiting syncs sent
        self.refused = False  # the server refused the token (said once, then stop)

    # -- life ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set. Raises ``CredentialRefused`` if the server refuses the
        token (no retry can fix that)."""
        self._loop = asyncio.get_running_loop()
        self._dirty_event = asyncio.Event()
        self._gate = asyncio.Semaphore(self.config.concurrency)
        refused: CredentialRefused | None = None
        try:
            async with asyncio.TaskGroup() as tasks:
                loops = [tasks.create_task(self._node_loop(n)) for n in self.nodes]
                loops.append(tasks.create_task(self._flush_loop()))
                loops.append(tasks.create_task(self._report_loop()))
                await stop.wait()
                for task in loops:
                    task.cancel()
        except* CredentialRefused as group:
            first = group.exceptions[0]
            refused = first if isinstance(first, CredentialRefused) else None
        finally:
            for node in self.nodes:
                for handle in node.ends.values():
                    handle.cancel()
                if node.deadline is not None:
                    node.deadline.cancel()
            for flush in self._flushes:
                flush.cancel()
            await asyncio.gather(*self._flushes, return_exceptions=True)
            await self.channel.aclose()
        if refused is not None:
            raise refused

    async def _report_loop(self) -> None:
        """A line every ``REPORT_SECONDS``: how many nodes are registered, the syncs and
        failures since the last line, the jobs running."""
        syncs = failures = flushes = 0
        while True:
            await asyncio.sleep(REPORT_SECONDS)
            now_syncs = sum(n.syncs for n in self.nodes)
            now_failures = sum(n.failures for n in self.nodes)
            log.info(
                "%d/%d node(s) registered; %.1f syncs/s, %.1f flushes/s, %d failure(s); "
                "%d job(s) running, %d launched, %d ended",
                sum(n.registered for n in self.nodes),
                len(self.nodes),
                (now_syncs - syncs) / REPORT_SECONDS,
                (self.flushes - flushes) / REPORT_SECONDS,
                now_failures - failures,
                sum(len(n.ends) for n in self.nodes),
                self.launched,
                self.finished,
            )
            syncs, failures, flushes = now_syncs, now_failures, self.flushes

    # -- the network ----------------------------------------------------------------------

    async def _node_loop(self, node: EmulatedNode) -> None:
        rng = random.Random(node.name)
        failures = 0
        # spread the registrations over a second (at most), not all in one instant
        await asyncio.sleep(rng.uniform(0, min(1.0, self.config.nodes / 2000)))
        while True:
            try:
                wait = node.wait_seconds
                if not node.registered:
                    assert self._gate is not None
                    async with self._gate:
                        await self._register(node)
                    # the first long poll ends at a random point of the interval, so that
                    # the heartbeats are spread over it as N agents started apart have
                    # them: nodes registered within seconds would otherwise all come
                    # back together, a burst of N syncs every interval
                    wait = rng.uniform(0.0, node.wait_seconds)
                request = self._sync_request(node, wait, with_usage=True)
                reply = await self.channel.sync(node.name, request)
            except CredentialRefused as err:
                if self.refused:
                    raise  # said once for all the nodes
                self.refused = True
                log.error(
                    "the control plane refused the emulator's token for node %s (%s): give "
                    "it an agent token that may serve %s* (`hal user add NAME --agent`)",
                    node.name,
                    err,
                    self.config.prefix,
                )
                raise
            except AgentChannelError as err:
                node.failures += 1
                if isinstance(err, NodeForgotten):
                    node.registered = False
                delay = min(node.retry_cap, 0.5 * 2.0**failures) * rng.uniform(0.5, 1.0)
                failures += 1
                log.log(
                    logging.INFO if node.failures == 1 else logging.DEBUG,
                    "node %s: %s; retrying in %.1fs",
                    node.name,
                    err,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            failures = 0
            node.syncs += 1
            self._apply(node, reply)

    async def _register(self, node: EmulatedNode) -> None:
        request = AgentRegister(
            node=node.name,
            cpus=self.config.cpus,
            memory_bytes=self.config.memory_bytes,
            features=list(self.config.features),
            version=__version__,
            isolation="emulated",
            running=node.machine.running(),
        )
        reply = await self.channel.register(request)
        node.wait_seconds = min(
            self.config.heartbeat_interval_seconds,
            reply.heartbeat_interval_seconds,
            MAX_WAIT_SECONDS,
        )
        node.retry_cap = min(MAX_BACKOFF_SECONDS, reply.node_timeout_seconds / 3)
        node.registered = True
        node.instructions.registered(reply.instructions_from)
        kill = tuple(reply.kill)
        self._feed(node, Registered(reply.kill_wait_seconds, kill, time.time(), ()))

    async def _flush_loop(self) -> None:
        """Reports made while a node's long poll waits go at once in a non-waiting sync,
        as the agent's flush loop sends them; a few ms gather a burst's."""
        assert self._dirty_event is not None and self._gate is not None
        while True:
            await self._dirty_event.wait()
            await asyncio.sleep(FLUSH_COALESCE_SECONDS)
            self._dirty_event.clear()
            dirty, self._dirty = self._dirty, set()
            for node in dirty:
                if node.registered and node.machine.outbox:
                    await self._gate.acquire()
                    task = asyncio.create_task(self._flush(node))
                    self._flushes.add(task)
                    task.add_done_callback(self._flushes.discard)

    async def _flush(self, node: EmulatedNode) -> None:
        assert self._gate is not None
        try:
            self.flushes += 1
            reply = await self.channel.sync(node.name, self._sync_request(node, 0.0))
        except CredentialRefused:
            return  # the long poll says so and stops the emulator
        except AgentChannelError as err:
            log.debug("node %s: flush failed (%s); the long poll carries it", node.name, err)
            return
        finally:
            self._gate.release()
        self._apply(node, reply)

    def _sync_request(self, node: EmulatedNode, wait: float, with_usage: bool = False) -> AgentSync:
        machine = node.machine
        outbox = machine.outbox
        later = (r.job_id for r in outbox[MAX_REPORTS_PER_SYNC:])
        usage: list[JobUsage] = []
        free: int | None = None
        load: float | None = None
        if with_usage:
            usage, free, load = self._usage(node)
        return AgentSync(
            reports=outbox[:MAX_REPORTS_PER_SYNC],
            wait_seconds=max(0.0, wait),
            running=list(dict.fromkeys([*machine.jobs, *later])),
            usage=usage,
            free_memory_bytes=free,
            cpu_load=load,
            applied=node.instructions.applied,
        )

    def _usage(self, node: EmulatedNode) -> tuple[list[JobUsage], int, float]:
        """What the node's jobs "use": half their memory (a quarter GiB where unlimited)
        and all their CPUs since they started."""
        now = time.time()
        usage: list[JobUsage] = []
        used_memory = 0
        busy = 0
        for job in node.machine.jobs.values():
            begun = node.started.get(job.job_id)
            if begun is None:
                continue
            rss = job.memory_bytes // 2 if job.memory_bytes else 256 << 20
            cpu = max(0.0, now - begun) * job.cpus
            usage.append(
                JobUsage(
                    job_id=job.job_id,
                    attempt=job.attempt,
                    rss_bytes=rss,
                    max_rss_bytes=rss,
                    cpu_seconds=cpu,
                    user_cpu_seconds=cpu,
                    system_cpu_seconds=0.0,
                )
            )
            used_memory += rss
            busy += job.cpus
        return usage, max(0, self.config.memory_bytes - used_memory), float(busy)

    def _apply(self, node: EmulatedNode, reply: AgentInstructions) -> None:
        now = time.time()
        if reply.reregister:
            node.registered = False
        self._feed(node, ReportsAcked(reply.acked_seq, now))
        for instruction in node.instructions.fresh(reply):
            if isinstance(instruction, Launch):
                self._feed(node, LaunchRequested(instruction, now))
            elif isinstance(instruction, Cancel):
                self._feed(node, CancelRequested(instruction, now))
            elif isinstance(instruction, Limit):
                self._feed(node, LimitRequested(instruction, now))
            elif isinstance(instruction, Signal):
                self._feed(node, SignalRequested(instruction, now))
            # job steps, their input and prefetches: no script runs, so none comes

    # -- the machine ----------------------------------------------------------------------

    def _feed(self, node: EmulatedNode, event: Event) -> None:
        feed(node.machine, event, lambda command: self._execute(node, command))
        self._schedule_deadline(node)

    def _execute(self, node: EmulatedNode, command: Command) -> list[Event]:
        now = time.time()
        match command:
            case SpawnJob(launch=launch, record=record):
                key = (record.job_id, record.attempt)
                run = job_runtime(launch, self.config.runtime_seconds)
                outcome = ExitOutcome(
                    exit_code=run.exit_code,
                    max_rss_bytes=record.memory_bytes // 2 if record.memory_bytes else 256 << 20,
                    cpu_seconds=run.seconds * record.cpus,
                    user_cpu_seconds=run.seconds * record.cpus,
                    system_cpu_seconds=0.0,
                )
                node.ends[key] = self._call_later(run.seconds, node, key, outcome)
                node.started[record.job_id] = now
                self.launched += 1
                # its pid: the job's id (a real one is never 0; unique on the node)
                return [ProcessStarted(record.job_id, record.attempt, record.job_id, now)]
            case SignalJob(job_id=job_id, attempt=attempt, signum=signum):
                key = (job_id, attempt)
                if signum in ENDING_SIGNALS and key in node.ends:
                    node.ends.pop(key).cancel()
                    begun = node.started.get(job_id, now)
                    used = max(0.0, now - begun)
                    outcome = ExitOutcome(
                        exit_signal=signum,
                        cpu_seconds=used,
                        user_cpu_seconds=used,
                        system_cpu_seconds=0.0,
                    )
                    # delivered after the machine's current step, as a real exit would be
                    node.ends[key] = self._call_later(0.0, node, key, outcome)
            case ForgetJob(job_id=job_id, attempt=attempt):
                handle = node.ends.pop((job_id, attempt), None)
                if handle is not None:
                    handle.cancel()
                node.started.pop(job_id, None)
            case SendReport() | SyncSoon():
                self._sync_soon(node)
            case _:
                pass  # records, job folders, lines in output files: none here
        return []

    def _call_later(
        self, delay: float, node: EmulatedNode, key: tuple[int, int], outcome: ExitOutcome
    ) -> asyncio.TimerHandle:
        assert self._loop is not None
        return self._loop.call_later(delay, self._exited, node, key, outcome)

    def _exited(self, node: EmulatedNode, key: tuple[int, int], outcome: ExitOutcome) -> None:
        node.ends.pop(key, None)
        node.started.pop(key[0], None)
        self.finished += 1
        now = time.time()
        outcome = ExitOutcome(
            exit_code=outcome.exit_code,
            exit_signal=outcome.exit_signal,
            max_rss_bytes=outcome.max_rss_bytes,
            cpu_seconds=outcome.cpu_seconds,
            user_cpu_seconds=outcome.user_cpu_seconds,
            system_cpu_seconds=outcome.system_cpu_seconds,
            end_time=now,
        )
        self._feed(node, ProcessExited(key[0], key[1], outcome, now))

    def _schedule_deadline(self, node: EmulatedNode) -> None:
        """One timer per node: the machine's next deadline (time limit, SIGKILL after the
        grace, --signal), fed as a ``Tick``."""
        at = node.machine.next_deadline()
        if at == node.deadline_at:
            return
        if node.deadline is not None:
            node.deadline.cancel()
            node.deadline = None
        node.deadline_at = at
        if at is not None and self._loop is not None:
            # never spin, whatever the machine says (a deadline that changes nothing)
            delay = max(0.01, at - time.time())
            node.deadline = self._loop.call_later(delay, self._tick, node)

    def _tick(self, node: EmulatedNode) -> None:
        node.deadline = None
        node.deadline_at = None
        self._feed(node, Tick(time.time()))

    def _sync_soon(self, node: EmulatedNode) -> None:
        self._dirty.add(node)
        if self._dirty_event is not None:
            self._dirty_event.set()


async def run_emulator(config: EmulateConfig, stop: asyncio.Event) -> Emulator:
    """Run ``config.nodes`` emulated nodes until ``stop`` is set."""
    emulator = Emulator(config)
    with contextlib.suppress(asyncio.CancelledError):
        await emulator.run(stop)
    return emulator
