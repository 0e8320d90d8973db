"""``BatchShell``: the I/O half of batch jobs on this node.

Every decision about a job is the state machine's (``state.AgentState``); this carries
out its job commands and feeds it what it sees, as ``steps.StepShell`` does for job
steps. ``SpawnJob`` writes the job's folder (``store``), deploys its artifacts first if
it has any, and has the step launcher fork its step supervisor (``supervisor``, through
the launcher's ``handshake``); a ``launcher.ChildWatch`` then follows the supervisor:
its "started" message (``ProcessStarted`` or ``LaunchFailed``) and its exit, read from
its ``status.json`` (``ProcessExited``). ``SignalJob`` reaches the job's process group
and what left it below the supervisor.

An agent that stops only stops watching: the supervisors and their jobs run on, and the
next agent adopts them from the state directory (``adopt``): alive → watched again, gone
→ their recorded end, gone without one → what they left killed (``remains``) and the
job ended as NODE_FAIL by the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import partial

from hal.agent.artifacts import ArtifactCache, ArtifactError
from hal.agent.channel import AgentChannelError
from hal.agent.cpus import CpuPool
from hal.agent.events import (
    Event,
    ForgetJob,
    JobAdopted,
    LaunchFailed,
    MarkStopping,
    PersistRecord,
    ProcessExited,
    ProcessStarted,
    SignalJob,
    SpawnJob,
    TellJob,
)
from hal.agent.forkserver import BATCH
from hal.agent.gpus import GpuInventory, denied_gpus
from hal.agent.handshake import PLAN_FILE, read_recorded, write_atomic
from hal.agent.isolation import Isolation
from hal.agent.launcher import ChildWatch, LaunchReply, StepLauncher
from hal.agent.plan import LaunchError, build_step_plan
from hal.agent.procfs import descendants
from hal.agent.pyenvs import PythonEnvError, PythonEnvs, write_job_error
from hal.agent.records import ExitOutcome, JobRecord, Phase
from hal.agent.remains import end_remains
from hal.agent.store import JobStore, StoredJob
from hal.agent.supervisor import (
    STOPPING_FILE,
    StepPlan,
    parse_started,
    read_status,
    tell_job_from_agent,
)
from hal.agent.usage import Supervised, UsageSampler
from hal.core.clock import Clock
from hal.host.clock import SystemClock
from hal.slurm.steps import cancelled_message, stamp
from hal.wire.agent import Prefetch

log = logging.getLogger("hal.agent")

LOST_MESSAGE = (
    "the step supervisor vanished without recording the job's exit status; "
    "the job's processes were killed"
)
JobCommand = SpawnJob | SignalJob | PersistRecord | ForgetJob | TellJob | MarkStopping
Work = Callable[[], Coroutine[None, None, None]]


@dataclass(slots=True)
class _Supervised:
    """One job's step supervisor, as the shell follows it."""

    job_id: int
    attempt: int
    job_dir: str
    watch: ChildWatch


class BatchShell:
    def __init__(
        self,
        node: str,
        *,
        agent: str,
        unknown_users_as_agent: bool,
        store: JobStore,
        jobs: Mapping[int, JobRecord],
        feed: Callable[[Event], None],
        usage: UsageSampler,
        clock: Clock | None = None,
        cpus: CpuPool | None = None,
        artifacts: ArtifactCache | None = None,
        pyenvs: PythonEnvs | None = None,
    ) -> None:
        self.node = node
        self.agent = agent  # the agent's cgroup name (its job markers)
        self.unknown_users_as_agent = unknown_users_as_agent
        self.store = store
        self.jobs = jobs  # the machine's records: read here, changed by ``feed`` only
        self._feed = feed  # an event to the machine, and its commands carried out
        self.usage = usage  # its samples go into a job's end
        self.clock = clock or SystemClock()
        self.cpus = cpus or CpuPool()
        self.artifacts = artifacts
        self.pyenvs = pyenvs  # the jobs' Python environments (--python-env)
        # known once the agent runs (``AgentShell.run`` sets them)
        self.isolation = Isolation("none")
        self.gpus = GpuInventory()
        self.launcher: StepLauncher | None = None
        self._supervised: dict[int, _Supervised] = {}
        self._work: asyncio.Queue[Work] = asyncio.Queue()  # run by ``run``'s task group

    # -- the machine's commands ----------------------------------------------------------

    def execute(self, command: JobCommand) -> list[Event]:
        """Carry out one of the machine's job commands; the events it observed at once."""
        match command:
            case SpawnJob():
                launch = command.launch
                if launch.artifacts or launch.python_env:  # first: they may take a while
                    self._work.put_nowait(partial(self._deploy_then_spawn, command))
                    return []
                return self._spawn(command)
            case SignalJob():
                self._signal(command)
            case PersistRecord():
                self.store.save_record(command.record)
            case ForgetJob():
                self.store.remove(command.job_id, command.attempt)
            case TellJob():
                self._tell(command)
            case MarkStopping():
                job_dir = self.store.job_dir(command.job_id, command.attempt)
                with contextlib.suppress(OSError):  # (its folder is gone: it has ended)
                    write_atomic(job_dir, STOPPING_FILE, repr(command.kill_at))
        return []

    def prefetch(self, prefetch: Prefetch) -> None:
        """A job's artifacts on a node of its other than the batch node, fetched now."""
        self._work.put_nowait(partial(self._prefetch, prefetch))

    async def run(self) -> None:
        """Deploy artifacts and fetch them ahead as that work comes, until cancelled."""
        async with asyncio.TaskGroup() as tasks:
            while True:
                work = await self._work.get()
                tasks.create_task(work())

    # -- what the agent asks ----------------------------------------------------------------

    def supervised(self) -> list[Supervised]:
        """(job, attempt, supervisor pid, its start ticks) of the supervisors followed."""
        return [
            (s.job_id, s.attempt, s.watch.pid, s.watch.ticks)
            for s in self._supervised.values()
            if s.watch.pid > 0
        ]

    def polled(self) -> bool:
        """Whether a supervisor is followed without a pidfd (``check_polled``)."""
        return any(s.watch.polled for s in self._supervised.values())

    def check_polled(self) -> None:
        for supervised in list(self._supervised.values()):
            supervised.watch.check()

    def detach(self) -> None:
        """Stop watching the supervisors without touching them: the jobs run on."""
        for supervised in self._supervised.values():
            supervised.watch.close()
        self._supervised.clear()

    # -- start ------------------------------------------------------------------------------

    async def _prefetch(self, prefetch: Prefetch) -> None:
        """A failure is only logged: the step that needs them fails saying so."""
        assert self.artifacts is not None
        try:
            if prefetch.artifacts:
                await self.artifacts.deploy(prefetch.job_id, prefetch.artifacts, {})
            if prefetch.python_env is not None and self.pyenvs is not None:
                await self.pyenvs.activate(prefetch.job_id, prefetch.python_env, {})
        except Exception as err:
            log.warning("job %d: not fetched ahead: %s", prefetch.job_id, err)

    async def _deploy_then_spawn(self, command: SpawnJob) -> None:
        launch = command.launch
        env = launch.environment
        what = "artifact"
        try:
            if launch.artifacts:
                assert self.artifacts is not None
                env = await self.artifacts.deploy(launch.job_id, launch.artifacts, env)
            if launch.python_env is not None:
                what = "python-env"
                if self.pyenvs is None:
                    raise PythonEnvError("this agent does not build Python environments")
                env = await self.pyenvs.activate(launch.job_id, launch.python_env, env)
        except Exception as err:  # whatever it was, the job fails saying so, never hangs
            if not isinstance(err, ArtifactError | AgentChannelError | PythonEnvError):
                log.exception("deploying job %d's %s", launch.job_id, what)
            message = f"cannot launch job {launch.job_id} on {self.node}: {what}: {err}"
            log.error("%s", message)
            if isinstance(err, PythonEnvError):  # its owner looks there first
                await asyncio.to_thread(
                    write_job_error, launch, self.node, str(err), self.unknown_users_as_agent
                )
            self._feed(LaunchFailed(launch.job_id, launch.attempt, message, self.clock.now()))
            return
        job = self.jobs.get(launch.job_id)
        if job is None or job.attempt != launch.attempt or job.phase is not Phase.LAUNCHING:
            return  # ended meanwhile
        if job.end_state:  # cancelled meanwhile: it never starts (the server ends it so)
            why = f"job {launch.job_id} ended while its artifacts were deployed"
            self._feed(LaunchFailed(launch.job_id, launch.attempt, why, self.clock.now()))
            return
        launch = launch.model_copy(update={"environment": env})
        for event in self._spawn(SpawnJob(launch, command.record)):
            self._feed(event)

    def _spawn(self, command: SpawnJob) -> list[Event]:
        launch = command.launch
        job_dir = self.store.job_dir(launch.job_id, launch.attempt)
        key = (launch.job_id, launch.attempt)
        try:
            plan = build_step_plan(
                launch,
                node=self.node,
                job_dir=job_dir,
                agent=self.agent,
                unknown_users_as_agent=self.unknown_users_as_agent,
                denied_gpus=denied_gpus(self.gpus, self.isolation.devices, launch.gpu_ids),
                cpu_ids=self.cpus.take(key, launch.cpus),
            )
            owner = (plan.uid, plan.gid) if plan.uid is not None and plan.gid is not None else None
            self.store.create(command.record, launch.script, owner, plan.to_json())
            started_r, started_w = os.pipe()
        except (LaunchError, OSError, ValueError) as err:
            self.cpus.give(key)
            message = f"cannot launch job {launch.job_id} on {self.node}: {err}"
            log.error("%s", message)
            return [LaunchFailed(launch.job_id, launch.attempt, message, self.clock.now())]
        assert self.launcher is not None
        supervised = self._watch(launch.job_id, launch.attempt, job_dir, started_r)
        reply = partial(self._launched, supervised)
        self.launcher.launch(launch.job_id, launch.attempt, job_dir, started_w, reply, BATCH)
        return []

    def _watch(
        self, job_id: int, attempt: int, job_dir: str, started_fd: int | None
    ) -> _Supervised:
        """Watch job ``job_id``'s supervisor: its "started" pipe now (a new launch), its
        exit once its pid is known (``ChildWatch.follow``)."""
        loop = asyncio.get_running_loop()
        supervised: _Supervised
        watch = ChildWatch(
            loop,
            started_fd,
            lambda message: self._started(supervised, message),
            lambda: self._exited(supervised),
        )
        supervised = self._supervised[job_id] = _Supervised(job_id, attempt, job_dir, watch)
        return supervised

    def _launched(self, supervised: _Supervised, reply: LaunchReply) -> None:
        if self._supervised.get(supervised.job_id) is not supervised:
            return  # (detached: the agent stops)
        if reply.error:
            # The launcher may have recorded and started a supervisor before failing.
            recorded = read_recorded(supervised.job_dir)
            if recorded is None:
                supervised.watch.close()
                self._forget(supervised)
                job = (supervised.job_id, supervised.attempt)
                self._feed(LaunchFailed(*job, reply.error, self.clock.now()))
                return
            supervised.watch.follow(*recorded)
        else:
            supervised.watch.follow(reply.pid, reply.ticks)

    def _started(self, supervised: _Supervised, message: bytes) -> None:
        parsed = parse_started(message)
        if parsed is None:
            # Killed before it started the job (it reports every launch error): its exit,
            # without a status, ends the job as lost, as one killed later does.
            return
        job = (supervised.job_id, supervised.attempt)
        if isinstance(parsed, str):
            self._feed(LaunchFailed(*job, parsed, self.clock.now()))
        else:
            self._feed(ProcessStarted(*job, *parsed))

    def _exited(self, supervised: _Supervised) -> None:
        self._forget(supervised)
        status = read_status(supervised.job_dir)
        if status is None:
            self._end_remains(supervised)
        self._feed(self._end_event(supervised, status))

    def _forget(self, supervised: _Supervised) -> None:
        if self._supervised.get(supervised.job_id) is supervised:
            del self._supervised[supervised.job_id]
        self.cpus.give((supervised.job_id, supervised.attempt))

    def _end_event(self, supervised: _Supervised, status: ExitOutcome | str | None) -> Event:
        now = self.clock.now()
        job = (supervised.job_id, supervised.attempt)
        if isinstance(status, ExitOutcome) and 0 < status.end_time < now:
            # when the supervisor saw the script end: it may have ended while no agent
            # ran (a restarted agent's "now" counted its downtime into Elapsed)
            now = status.end_time
        if isinstance(status, str):
            return LaunchFailed(*job, status, now)
        if status is None:
            status = ExitOutcome(lost=True, message=LOST_MESSAGE)
        return ProcessExited(*job, self.usage.finished(job, status), now)

    # -- signals ------------------------------------------------------------------------------

    def _tell(self, command: TellJob) -> None:
        """slurmstepd's line of why the job ends, in its error output (Slurm 22.05.8:
        ``slurmstepd-n1: error: *** JOB 7 ON n1 CANCELLED AT 2026-11-26T22:42:26 DUE TO
        TIME LIMIT ***``), written by a thread as the job's user."""
        when = stamp(command.time)
        text = cancelled_message(self.node, command.job_id, when, command.why) + "\n"
        job_dir = self.store.job_dir(command.job_id, command.attempt)
        threading.Thread(target=tell_job_from_agent, args=(job_dir, text), daemon=True).start()

    def _signal(self, command: SignalJob) -> None:
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
        supervised = self._supervised.get(command.job_id)
        if supervised is None or supervised.attempt != command.attempt:
            return
        if supervised.watch.pid <= 0:
            return
        for pid in descendants(supervised.watch.pid):
            with contextlib.suppress(OSError):  # ended meanwhile, or not ours to signal
                if os.getpgid(pid) != command.pid:
                    os.kill(pid, command.signum)

    # -- restart ------------------------------------------------------------------------------

    def adopt(self) -> None:
        """Take over the jobs an earlier agent launched, without launching them again."""
        for stored in self.store.load():
            self._adopt(stored)

    def _adopt(self, stored: StoredJob) -> None:
        record = stored.record
        job = (record.job_id, record.attempt)
        now = self.clock.now()
        if stored.supervisor is None:
            # The earlier agent stopped before recording a supervisor, so none was told
            # to start the job: it never ran.
            self._feed(JobAdopted(record.evolve(phase=Phase.LAUNCHING, pid=0), now))
            self._feed(LaunchFailed(*job, "the agent stopped before the job started", now))
            return
        if record.phase is Phase.LAUNCHING and stored.started is not None and record.plain_start:
            # started before: the earlier agent kept the start in memory only (and
            # reported it, unless it stopped first — as when it persisted the start)
            record = record.start(*stored.started)
        self._feed(JobAdopted(record, now))
        if record.phase is Phase.LAUNCHING and stored.started is not None:
            self._feed(ProcessStarted(*job, *stored.started))
        self.cpus.note(job, _bound_cpus(stored.job_dir))
        supervised = self._watch(*job, stored.job_dir, None)
        supervised.watch.follow(*stored.supervisor)  # gone already: its end comes now
        if self._supervised.get(record.job_id) is supervised:
            log.info("re-adopted job %d (supervisor %d)", record.job_id, supervised.watch.pid)

    def _end_remains(self, supervised: _Supervised) -> None:
        """The supervisor died without a status (someone SIGKILLed it): kill the processes
        its job left behind and remove its cgroup (``remains``), as its own cleanup would
        have. This blocks the loop briefly (~1 s at worst), for a rare event."""
        job = (supervised.job_id, supervised.attempt)
        watch = supervised.watch
        strays = end_remains(self.isolation, self.agent, job, (watch.pid, watch.ticks))
        log.error(
            "job %d: step supervisor %d died without recording an exit status; killed %d "
            "process(es) of the job",
            supervised.job_id,
            watch.pid,
            strays,
        )


def _bound_cpus(job_dir: str) -> tuple[int, ...]:
    """The host CPUs an adopted job was bound to, from its plan (none if unreadable)."""
    try:
        with open(os.path.join(job_dir, PLAN_FILE)) as f:
            return StepPlan.from_json(f.read()).cpu_ids
    except (OSError, ValueError, TypeError, KeyError):
        return ()
