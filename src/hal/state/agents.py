"""The server side of the agent channel: sessions, instructions, reports, node health.

An agent registers, then long-polls ``sync``: it hands in reports (job started / finished)
and takes instructions (launch / signal / cancel). Reports are applied in one transaction
and acknowledged by sequence number, so a lost response makes the agent resend, and the
transitions below ignore anything already applied.

Instructions are numbered per session and stay in the session's outbox until the agent
says it applied them (``AgentSync.applied``): every reply carries all that are left,
oldest first, so a lost reply loses nothing and a reply that overtook an older one does
not reorder them (the agent applies each number once, in order). Launches are also re-sent
until the agent confirms them (``started``/``finished``): for agents that do not number
instructions, and after a re-registration; the agent deduplicates by ``(job_id, attempt)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hal.core.errors import Unavailable
from hal.core.feedback import ENV_TOKEN, job_token
from hal.core.gpu_islands import complete_islands
from hal.core.job import Job
from hal.core.node import Node, check_features
from hal.core.resources import ResourceVector
from hal.core.states import JobState, NodeState, PendingReason
from hal.core.topology_labels import check_labels
from hal.state import command_exit, interruptions, preempt, profiles
from hal.state.codec import SYSTEM_CPU, USER_CPU
from hal.state.launch import build_launch
from hal.state.node_reasons import NOT_RESPONDING, server_user
from hal.state.return_to_service import stays_down
from hal.state.store import (
    CommitOutcomeUnknown,
    DatabaseUnavailable,
    EventRow,
    JobUse,
)
from hal.state.store_protocol import StateTransaction
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentRegistered,
    AgentSync,
    CacheReport,
    Cancel,
    Instruction,
    InterruptionNotice,
    JobReport,
    JobUsage,
    Launch,
    Limit,
    Prefetch,
    Signal,
)
from hal.wire.jobs import GpuUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from hal.state.cluster import Change, Cluster

RESEND_AFTER_S = 5.0
GPU_HEALTH = "gpu health: "  # the start of a drain reason the GPUs' health check wrote
GPU_USAGE = "gpu_usage"  # job.extra mark: the agent's GPU use at the end (JSON GpuUsage)
LAUNCH_ERROR = "launch_error"  # job.extra mark: why a launch failed, as its agent said
FINISHED_STATES = {s.value: s for s in JobState if s.is_terminal}


def _first_number() -> int:
    """A new session's first instruction number: the wall clock in microseconds, above
    any number an earlier session of the node gave (each took longer than that to make),
    so an agent's stale acknowledgement acknowledges nothing of the new session's."""
    return time.time_ns() // 1000


@dataclass(slots=True)
class AgentSession:
    node: str
    acked_seq: int = 0
    last_seen: float = 0.0
    # instructions the agent has not said it applied, oldest first; ``first_id`` numbers
    # ``outbox[0]`` (or the next one pushed), the others follow one by one
    outbox: list[Instruction] = field(default_factory=list)
    first_id: int = field(default_factory=_first_number)
    unconfirmed: dict[int, tuple[Launch, float]] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lost_check_after: float = 0.0  # when to declare unreported jobs lost (after register)
    # its running jobs' latest usage samples, by job id, with when they came (memory
    # only: they change all the time; ``usage_of``)
    usage: dict[int, tuple[float, JobUsage]] = field(default_factory=dict)
    # its jobs whose profiles put them in a new class: the class and how many samples in
    # a row said it (``profiles.changed_classes``)
    class_votes: profiles.Votes = field(default_factory=dict)
    # the host's MemAvailable and load average from its latest heartbeat (None: not
    # reported yet); memory only, as ``usage``
    free_memory_bytes: int | None = None
    cpu_load: float | None = None
    gpu_problems: list[str] | None = None  # the agent's last GPU health read; None: none
    # interruption notices the agent sent that a database outage kept from being acted on
    notices: list[InterruptionNotice] = field(default_factory=list)
    # its artifact cache as last reported, and when (``hal artifact nodes``; memory only)
    cache: tuple[float, CacheReport] | None = None

    def push(self, instruction: Instruction) -> None:
        self.outbox.append(instruction)
        self.wake.set()

    def applied(self, number: int | None) -> None:
        """The agent has applied every instruction up to ``number`` (None: all sent so far,
        for an agent that does not number them): they leave the outbox."""
        done = len(self.outbox) if number is None else number - self.first_id + 1
        done = min(max(done, 0), len(self.outbox))
        del self.outbox[:done]
        self.first_id += done


def _session_for(cluster: Cluster, job: Job) -> AgentSession | None:
    if job.allocation is None or not job.allocation.nodes:
        return None
    return cluster.agent_sessions.get(job.allocation.nodes[0])


def usage_of(cluster: Cluster, job: Job) -> tuple[float, JobUsage] | None:
    """A running job's latest usage sample from its agent (``sstat``), and when it came;
    None when the job is not running or no sample has come yet."""
    if not job.state.is_active:
        return None
    session = _session_for(cluster, job)
    found = session.usage.get(job.id) if session is not None else None
    return found if found is not None and found[1].attempt == job.restarts else None


def gpu_usage_measured(job: Job) -> GpuUsage | None:
    """What an ended job's processes did with its GPUs, as its agent reported at the end
    (a mark kept with the job); None for a job without GPUs or sampled none."""
    text = job.extra.get(GPU_USAGE)
    return GpuUsage.model_validate_json(text) if text else None


def send_launch(cluster: Cluster, job: Job) -> None:
    if job.spec.het is not None and job.spec.het.offset > 0:
        return  # a het job's script runs once, on component 0's first node
    session = _session_for(cluster, job)
    if session is None:
        return  # delivered when the agent registers
    het = job.spec.het
    components = cluster.het_components(het.job_id) if het is not None else []
    launch = build_launch(job, cluster.config.cluster_name, components)
    launch.hal_url_default = feedback_environment(cluster, job, launch.environment)
    session.unconfirmed[job.id] = (launch, cluster.clock.now())
    session.push(launch)
    ahead = launch.artifacts or launch.python_env or launch.container
    if ahead and job.allocation is not None:  # the other nodes fetch (and build) them now
        for node in job.allocation.nodes[1:]:
            other = cluster.agent_sessions.get(node)
            if other is not None:
                other.push(
                    Prefetch(
                        job_id=job.id,
                        artifacts=launch.artifacts,
                        python_env=launch.python_env,
                        container=launch.container,
                    )
                )


def send_cancel(
    cluster: Cluster, job: Job, final: JobState, *, kill_wait_s: int | None = None
) -> None:
    """End ``job`` on its agent (SIGTERM, SIGKILL after ``kill_wait_s``, default
    KillWait); the agent reports it finished in state ``final``. Components 1.. of a het
    job run nothing: they end with component 0 (``Cluster.het_followers_end``)."""
    if job.spec.het is not None and job.spec.het.offset > 0:
        return
    session = _session_for(cluster, job)
    if session is None:
        return
    session.unconfirmed.pop(job.id, None)
    wait = cluster.config.kill_wait_seconds if kill_wait_s is None else kill_wait_s
    session.push(
        Cancel(job_id=job.id, state=final.value, kill_wait_seconds=wait, attempt=job.restarts)
    )


def send_end(cluster: Cluster, job: Job) -> None:
    """Tell a COMPLETING job's agent (again) to end it: in the state its marks say
    (CANCELLED, PENDING for a requeue, a preemption victim's own) and with what is left
    of its grace time."""
    wait = preempt.grace_left(job, cluster.clock.now()) + cluster.config.kill_wait_seconds
    send_cancel(cluster, job, preempt.cancel_state(job), kill_wait_s=wait)


def send_limit(cluster: Cluster, job: Job) -> None:
    """A running job's new time limit, for its agent to enforce."""
    session = _session_for(cluster, job)
    if session is not None:
        limit = Limit(job_id=job.id, attempt=job.restarts, time_limit_seconds=job.time_limit_s)
        session.push(limit)


def send_signal(cluster: Cluster, job: Job, signum: int, *, batch_only: bool = False) -> None:
    session = _session_for(cluster, job)
    if session is not None:
        session.push(Signal(job_id=job.id, signal=signum, batch_only=batch_only))


class AgentGone(Exception):
    """The agent stopped waiting for its registration's answer: nothing was registered."""


REGISTRATIONS_PER_COMMIT = 256  # the most one transaction writes (one node row and event each)
SYNCS_PER_COMMIT = 256  # the most syncs' reports one transaction writes
YIELD_EVERY_SYNCS = 32  # of a batch, the syncs whose reports are read between two turns


@dataclass(slots=True, eq=False)
class Registration:
    """A registration waiting for its commit (``register``); ``done`` is set once it is
    in the store and the mirror, or to why it is not."""

    request: AgentRegister
    node: Node
    session: AgentSession
    gone: Callable[[], Awaitable[bool]] | None
    done: asyncio.Future[None]


async def register(
    cluster: Cluster, reg: AgentRegister, gone: Callable[[], Awaitable[bool]] | None = None
) -> AgentRegistered:
    """A node's agent (re)registers. ``gone`` says whether the agent stopped waiting for
    its answer, and one that did is not registered when its turn comes (``AgentGone``):
    10,000 agents starting together had waited past their request timeout, registered
    again, and the server spent its CPU on registrations nobody read (24,569 for 10,002
    nodes).

    Registrations commit in batches: each waits in ``cluster.registering`` for the
    cluster's lock, and whichever gets it first commits all those waiting (at most
    ``REGISTRATIONS_PER_COMMIT``) in one transaction, in the order they came; the others
    find theirs done when their turn comes. One at a time, a commit each, 10,000 agents
    registered at about 80 a second on PostgreSQL (the commit's round trips, not CPU)."""
    now = cluster.clock.now()
    old = cluster.nodes.get(reg.node)
    state, reason, reason_user, reason_time, drain = NodeState.UP, "", "", None, False
    # an operator's drain outlives the agent's restart; a DOWN node comes back as
    # ReturnToService says (by default one the timeout set DOWN, not an operator's)
    rts = cluster.config.return_to_service
    if old is not None and (old.state is NodeState.DRAIN or stays_down(old, rts)):
        state, reason, drain = old.state, old.reason, old.drain
        reason_user, reason_time = old.reason_user, old.reason_time
    elif old is not None and old.drain:  # DOWN+DRAIN back in service: drained, as Slurm's
        state, reason = NodeState.DRAIN, old.reason
        reason_user, reason_time = old.reason_user, old.reason_time
    check_labels(reg.topology_labels)  # a bad label is refused, not silently dropped
    check_features(reg.features)
    labels = cluster.node_labels(reg.node, reg.topology_labels)
    node = Node(
        name=reg.node,
        resources=ResourceVector(reg.cpus, reg.memory_bytes, reg.gpus),
        state=state,
        reason=reason,
        reason_user=reason_user,
        reason_time=reason_time,
        drain=drain,
        features=tuple(reg.features),
        gpu_model=reg.gpu_model,
        gpu_islands=complete_islands(tuple(tuple(i) for i in reg.gpu_islands), reg.gpus)
        if reg.gpu_islands
        else (),
        address=reg.address,
        last_heartbeat=now,
        topology=cluster.topology_path(reg.node, labels),
        labels=labels,
        nvlink_domain=reg.nvlink_domain,
    )
    kill: list[int] = []
    for running in reg.running:
        job = cluster.jobs.get(running.job_id)
        if (
            job is None
            or not job.state.is_active
            or job.restarts != running.attempt
            or job.allocation is None
            or job.allocation.nodes[0] != reg.node
        ):
            kill.append(running.job_id)
    session = AgentSession(
        node=reg.node,
        last_seen=now,
        lost_check_after=now + cluster.config.heartbeat_interval_seconds * 3,
    )
    mine = Registration(reg, node, session, gone, asyncio.get_running_loop().create_future())
    await _wait_batched(cluster, cluster.registering, mine, _commit_registrations)
    await mine.done  # (AgentGone, or why the commit failed)
    return AgentRegistered(
        node=reg.node,
        heartbeat_interval_seconds=cluster.config.heartbeat_interval_seconds,
        node_timeout_seconds=cluster.config.node_timeout_seconds,
        kill_wait_seconds=cluster.config.kill_wait_seconds,
        kill=kill,
        server_time=now,
        instructions_from=session.first_id,
        artifact_cache_bytes=cluster.config.artifacts.node_cache_bytes,
    )


async def _commit_registrations(cluster: Cluster, change: Change) -> None:
    """Commit the registrations waiting (under the lock: ``change``), and set each one's
    ``done`` (``_commit_batch``); one whose agent left meanwhile fails ``AgentGone``."""
    batch = _take(cluster.registering, REGISTRATIONS_PER_COMMIT)
    await _commit_batch(batch, partial(_commit_together, cluster, change), _waited_for)


async def _waited_for(batch: list[Registration]) -> list[Registration]:
    """The registrations of ``batch`` whose agents still wait; the others fail
    ``AgentGone``."""
    kept: list[Registration] = []
    for waiting in batch:
        if waiting.gone is not None and await waiting.gone():
            waiting.done.set_exception(AgentGone(waiting.request.node))
        else:
            kept.append(waiting)
    return kept


class _Waiting(Protocol):
    @property
    def done(self) -> asyncio.Future[Any]: ...


W = TypeVar("W", bound=_Waiting)


async def _wait_batched(
    cluster: Cluster,
    queue: list[W],
    mine: W,
    commit: Callable[[Cluster, Change], Awaitable[None]],
) -> None:
    """Queue ``mine`` and take the cluster's lock in turn until a ``commit`` (this
    task's or another's, which takes the queue's first batch) has set its ``done``. A
    task cancelled while ``mine`` still waits in the queue takes it out, so no later
    batch commits what nobody is waiting for."""
    queue.append(mine)
    try:
        while not mine.done.done():  # (more waited than one commit takes: the next batch)
            async with cluster.change() as change:
                if not mine.done.done():
                    await commit(cluster, change)
    finally:
        if not mine.done.done():
            with contextlib.suppress(ValueError):  # (a commit took it: its batch answers it)
                queue.remove(mine)  # (by identity: the waiting items compare so)
                mine.done.cancel()


def _take(queue: list[W], limit: int) -> list[W]:
    """The first ``limit`` items of ``queue``, taken out of it."""
    batch = queue[:limit]
    del queue[:limit]
    return batch


async def _commit_batch(
    batch: list[W],
    together: Callable[[list[W]], Awaitable[None]],
    keep: Callable[[list[W]], Awaitable[list[W]]] | None = None,
) -> None:
    """Commit what waits in ``batch`` (those ``keep`` keeps) with ``together``, which
    sets each one's ``done``. An outage of the store (``Unavailable``, the commit's
    outcome unknown among them) is every one's error; any other failure may be one
    item's row the store refuses, so they are committed again one at a time, and only
    the refused one fails."""
    try:
        kept = batch if keep is None else await keep(batch)
        if not kept:
            return
        try:
            await together(kept)
        except Unavailable:
            raise
        except Exception:
            if len(kept) == 1:
                raise
            for waiting in kept:
                try:
                    await together([waiting])
                except Unavailable:
                    raise
                except Exception as err:
                    waiting.done.set_exception(err)
    except Exception as err:
        for waiting in batch:
            if not waiting.done.done():
                waiting.done.set_exception(_own_copy(err))
    except BaseException:  # (cancelled: the server stops)
        for waiting in batch:
            waiting.done.cancel()
        raise


async def _commit_together(cluster: Cluster, change: Change, kept: list[Registration]) -> None:
    """Commit ``kept`` in one transaction, mirror them and set their ``done``."""
    events = [
        EventRow(
            r.node.last_heartbeat,
            "node.registered",
            node=r.node.name,
            state=r.node.state.value,
            data={"cpus": r.request.cpus, "gpus": r.request.gpus},
        )
        for r in kept
    ]

    def upsert(tx: StateTransaction) -> None:
        tx.upsert_nodes([r.node for r in kept])

    await change.commit([], events, extra=upsert)
    for r in kept:
        _mirror_registration(cluster, r)
        r.done.set_result(None)


def _own_copy(err: Exception) -> Exception:
    """``err`` for one of several waiters: an exception of its type, message and
    attributes, raised from it; one object raised in every waiter's task would gather
    all their tracebacks. (Made without its ``__init__``, which may build the message
    from other arguments than the ``args`` it leaves.)"""
    mine = type(err).__new__(type(err), *err.args)
    mine.args = err.args
    mine.__dict__.update(err.__dict__)
    mine.__cause__ = err
    return mine


def _mirror_registration(cluster: Cluster, registration: Registration) -> None:
    """A committed registration in the mirror: its node, its new session, and what the
    agent must be told again."""
    reg, session = registration.request, registration.session
    cluster.nodes[reg.node] = registration.node
    # new time limits the agent may not have applied: applying one again is harmless
    # (a signal is not carried: the old agent may have delivered it)
    before = cluster.agent_sessions.get(reg.node)
    if before is not None:
        session.outbox = [i for i in before.outbox if isinstance(i, Limit)]
    cluster.agent_sessions[reg.node] = session
    # (job, attempt): an older attempt still there is killed, and the current one is
    # (re)sent: the agent starts it once the old one has ended
    reported = {(r.job_id, r.attempt) for r in reg.running}
    # jobs the server placed here that the agent has not confirmed: (re)send them
    # (those holding this node, not the whole queue: 10,000 nodes registering again
    # beside 100,000 queued jobs each walked all of them)
    held = cluster.usage.get(reg.node)
    for job_id in sorted(held.jobs) if held is not None else ():
        job = cluster.unfinished.get(job_id)
        if job is None:
            continue
        if (
            job.state is JobState.RUNNING
            and job.allocation is not None
            and job.allocation.nodes[0] == reg.node
            and (job.id, job.restarts) not in reported
            and not job.launched
        ):
            send_launch(cluster, job)
        elif (
            job.state is JobState.COMPLETING
            and job.allocation is not None
            and job.allocation.nodes[0] == reg.node
        ):
            send_end(cluster, job)


async def sync(cluster: Cluster, node: str, request: AgentSync) -> AgentInstructions:
    session = cluster.agent_sessions.get(node)
    now = cluster.clock.now()
    if session is None or node not in cluster.nodes:
        return AgentInstructions(acked_seq=0, server_time=now, reregister=True)
    session.last_seen = now
    if request.usage:  # a sample covers all the node's jobs: the older one goes
        session.usage = {u.job_id: (now, u) for u in request.usage}
    if request.free_memory_bytes is not None:  # flushes of reports carry none
        session.free_memory_bytes = request.free_memory_bytes
    if request.cpu_load is not None:
        session.cpu_load = request.cpu_load
    if request.artifact_cache is not None:
        session.cache = (now, request.artifact_cache)
    if request.applied is not None:
        session.applied(request.applied)
    fresh = [r for r in request.reports if r.seq > session.acked_seq]
    try:
        if fresh:
            await apply_reports(cluster, node, fresh)
            session.acked_seq = max(r.seq for r in fresh)
        # (only once its reports are in: a job it finished is not in ``running``)
        await _check_lost(cluster, session, set(request.running), now)
        if request.usage:  # the classes its jobs' profiles put them in, when they change
            await profiles.record(cluster, session.class_votes, request.usage)
        if request.gpu_problems is not None:
            session.gpu_problems = request.gpu_problems
            await _gpu_health(cluster, node, request.gpu_problems)
        if request.notices or session.notices:  # (the agent sends each until answered)
            session.notices = [*session.notices, *request.notices][-4:]
            await interruptions.on_notices(cluster, node, session.notices)
            session.notices = []
    except (DatabaseUnavailable, CommitOutcomeUnknown):
        # The agent keeps what is not acknowledged and sends it again with its next sync
        # (at the latest when the database is back: ``Cluster._database_back``). The
        # sync itself goes on: the agent is alive and may have instructions waiting.
        pass
    if not session.outbox and request.wait_seconds > 0 and not cluster.closing:
        session.wake.clear()
        # a healthy agent must be back well before the node timeout
        wait = min(request.wait_seconds, cluster.config.node_timeout_seconds / 3)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.wake.wait(), timeout=wait)
    now = cluster.clock.now()
    session.last_seen = now
    queued = {i.job_id for i in session.outbox if isinstance(i, Launch)}
    for job_id, (launch, sent) in list(session.unconfirmed.items()):
        if job_id not in queued and job_id not in request.running and now - sent > RESEND_AFTER_S:
            session.outbox.append(launch)
            session.unconfirmed[job_id] = (launch, now)
    reply = AgentInstructions(
        acked_seq=session.acked_seq,
        instructions=list(session.outbox),
        first_id=session.first_id,
        server_time=now,
    )
    if request.applied is None:  # an agent that does not number them gets each once
        session.applied(None)
    return reply


async def _check_lost(
    cluster: Cluster, session: AgentSession, running: set[int], now: float
) -> None:
    """Jobs confirmed started here that the agent no longer supervises and never reported
    finished were lost with the node (e.g. a reboot): they end as NODE_FAIL."""
    if now < session.lost_check_after:
        return
    # the jobs holding the node (its usage, kept by the mirror), not the whole queue: a
    # sync per node every few seconds must not walk 20,000 unfinished jobs
    used = cluster.usage.get(session.node)
    here = (cluster.unfinished.get(jid) for jid in sorted(used.jobs)) if used else ()
    lost = [
        j
        for j in here
        if j is not None
        and j.state in (JobState.RUNNING, JobState.SUSPENDED)
        and j.launched
        and j.allocation is not None
        and j.allocation.nodes[0] == session.node
        and j.id not in running
    ]
    if not lost:
        return
    async with cluster.change() as change:
        changed, events = [], []
        for job in lost:
            current = cluster.jobs.get(job.id)
            if current is None or current.state not in (JobState.RUNNING, JobState.SUSPENDED):
                continue
            new, event = cluster.finish(current, JobState.NODE_FAIL, now)
            changed.append(new)
            events.append(event)
        followers, ends = cluster.het_followers_end(changed, now)
        await change.commit(changed + followers, events + ends)


@dataclass(slots=True, eq=False)
class Reporting:
    """One sync's reports waiting for their commit (``apply_reports``); ``done``'s
    result: whether they ended a job."""

    node: str
    reports: list[JobReport]
    done: asyncio.Future[bool]


async def apply_reports(cluster: Cluster, node: str, reports: list[JobReport]) -> None:
    """Apply a node's reports (in their order), durable when this returns.

    Syncs' reports commit in batches, as registrations do: each waits in
    ``cluster.reporting`` for the cluster's lock, and whichever gets it first applies
    all those waiting (at most ``SYNCS_PER_COMMIT``) in one transaction, in the order
    they came; the others find theirs done when their turn comes. A commit each cost a
    start two transactions (its "started" and its end, each in a sync of its own) of
    three round trips and a connection's check-out; their fixed part was most of the
    store's CPU per start."""
    mine = Reporting(node, reports, asyncio.get_running_loop().create_future())
    await _wait_batched(cluster, cluster.reporting, mine, _commit_reports)
    if await mine.done:
        # what they held is free: victims suspended for them go on before the next
        # scheduling pass can give those CPUs to someone else
        await preempt.resume_freed(cluster)


async def _commit_reports(cluster: Cluster, change: Change) -> None:
    """Commit the reports waiting (under the lock: ``change``), and set each one's
    ``done`` (``_commit_batch``)."""
    batch = _take(cluster.reporting, SYNCS_PER_COMMIT)
    await _commit_batch(batch, partial(_commit_reports_together, cluster, change))


async def _commit_reports_together(
    cluster: Cluster, change: Change, batch: list[Reporting]
) -> None:
    """Apply ``batch``'s reports in one transaction and set their ``done``."""
    changed: dict[int, Job] = {}
    events: list[EventRow] = []
    usage: list[JobUse] = []
    by_sync: list[set[int]] = []  # the jobs each sync's reports changed
    for i, waiting in enumerate(batch):
        if i and not i % YIELD_EVERY_SYNCS:
            # (requests go on meanwhile; the lock is held: no change reads the batch's
            # jobs under it, and nothing is mirrored before the commit)
            await asyncio.sleep(0)
        mine: set[int] = set()
        _apply(cluster, waiting.node, waiting.reports, changed, events, usage, mine)
        by_sync.append(mine)
    followers, ends = cluster.het_followers_end(list(changed.values()), cluster.clock.now())
    for job in followers:
        changed.setdefault(job.id, job)
    events.extend(ends)

    def extra(tx: StateTransaction) -> None:
        tx.record_usage(usage)

    if changed:  # (no usage: no write of it, so that a launch alone wakes no pass)
        await change.commit(list(changed.values()), events, extra if usage else None)
    for waiting, mine in zip(batch, by_sync, strict=True):
        if not waiting.done.done():
            waiting.done.set_result(any(not changed[i].state.is_active for i in mine))


def _apply(
    cluster: Cluster,
    node: str,
    reports: list[JobReport],
    changed: dict[int, Job],
    events: list[EventRow],
    usage: list[JobUse],
    mine: set[int],
) -> None:
    """Add what ``node``'s ``reports`` change to ``changed``, ``events`` and ``usage``
    (the batch's so far: a job another sync of the batch changed is read from there);
    ``mine``: the ids of the jobs they changed."""
    session = cluster.agent_sessions.get(node)
    for r in sorted(reports, key=lambda r: r.seq):
        job = changed.get(r.job_id) or cluster.jobs.get(r.job_id)
        if session is not None and r.kind in ("started", "finished", "launch_failed"):
            session.unconfirmed.pop(r.job_id, None)
        if job is None or job.restarts != r.attempt or not job.state.is_active:
            continue  # stale or already applied
        if job.allocation is not None and node not in job.allocation.nodes:
            continue  # another node's job: an agent speaks for its own node only
        if r.kind == "started":
            if not job.launched:
                changed[job.id] = job.evolve(launched=True)
                mine.add(job.id)
            continue
        if r.kind == "launch_failed":
            # a job cancelled while it launched ends as the user asked, not FAILED
            cancelled = job.state is JobState.COMPLETING and job.cancelled_by
            ended = JobState.CANCELLED if cancelled else JobState.FAILED
            new, event = cluster.finish(job, ended, r.time, exit_code=1)
            event.data["message"] = r.message  # type: ignore[index]
            if new.state is JobState.FAILED:  # Slurm's reason: its script never ran
                why = {LAUNCH_ERROR: r.message[:2000]}  # for hal explain (a mark, kept)
                new = new.evolve(
                    reason=PendingReason.JOB_LAUNCH_FAILURE, extra={**new.extra, **why}
                )
        else:
            state = FINISHED_STATES.get(r.state)
            if r.state == JobState.PENDING.value and job.extra.get(preempt.REQUEUE) == "1":
                state = JobState.PENDING  # a requeue ending its run (Cluster.finish)
            code, sig = r.exit_code, r.exit_signal
            recorded = command_exit.recorded(job)
            if recorded is not None and state in (None, JobState.COMPLETED, JobState.FAILED):
                # an allocation's holding script ended: salloc's command's status
                (code, sig), state = recorded, None
            if state is None:
                state = JobState.COMPLETED if code == 0 and not sig else JobState.FAILED
            if job.state is JobState.COMPLETING and job.cancelled_by:
                state = JobState.CANCELLED
            new, event = cluster.finish(job, state, r.time, exit_code=code, exit_signal=sig)
            user, system = r.user_cpu_seconds, r.system_cpu_seconds
            if user is None or system is None:  # an older agent's: not known
                user = system = None
            usage.append((job.id, r.max_rss_bytes, r.cpu_seconds, user, system))
            measured = {"max_rss": str(r.max_rss_bytes), "cpu_seconds": str(r.cpu_seconds)}
            if user is not None and system is not None:
                measured |= {USER_CPU: str(user), SYSTEM_CPU: str(system)}
            if r.gpu is not None:  # a mark: kept with the job (jobs.marks)
                measured[GPU_USAGE] = r.gpu.model_dump_json()
            # (an earlier run's parts go: this run's are these, or not known)
            kept = {k: v for k, v in new.extra.items() if k not in (USER_CPU, SYSTEM_CPU)}
            new = new.evolve(extra={**kept, **measured})
        changed[job.id] = new
        mine.add(job.id)
        events.append(event)


async def check_nodes(cluster: Cluster) -> list[str]:
    """Mark nodes whose agent went silent DOWN and end or requeue their jobs."""
    now = cluster.clock.now()
    timeout = cluster.config.node_timeout_seconds

    def silent() -> list[Node]:
        # after a database outage every agent gets a full timeout again: one that backed
        # off while its syncs failed is not declared dead for the database's downtime
        since = cluster.db_back_at
        return [
            n
            for n in cluster.nodes.values()
            if _watched(cluster, n)
            and now - max(n.last_heartbeat, _last_seen(cluster, n.name), since) > timeout
        ]

    if not silent() or not await cluster.database_ok():
        return []
    async with cluster.change() as change:
        dead = silent()  # again: an agent may have registered while this waited
        if not dead:
            return []
        # an operator's DOWN or DRAIN stays as it is, with its reason (Slurm's drained
        # node that stops answering is `drain*`, still drained when it comes back); its
        # jobs are lost all the same
        nodes = [
            n.evolve(
                state=NodeState.DOWN,
                reason=NOT_RESPONDING,
                reason_user=server_user(),
                reason_time=now,
            )
            for n in dead
            if n.state is NodeState.UP
        ]
        names = {n.name for n in dead}
        events = [
            EventRow(now, "node.down", node=n.name, state="DOWN", data={"reason": NOT_RESPONDING})
            for n in nodes
        ]
        changed, lost, to_stop = _lose_jobs(cluster, names, now)
        events.extend(lost)

        def extra(tx: StateTransaction) -> None:
            for n in nodes:
                tx.upsert_node(n)

        await change.commit(changed, events, extra)
        for job in to_stop:  # (where the batch node is silent too, no agent hears it)
            send_cancel(cluster, job, JobState.NODE_FAIL)
        for n in nodes:
            cluster.nodes[n.name] = n
        for name in names:
            cluster.agent_sessions.pop(name, None)
    return sorted(names)


def _lose_jobs(
    cluster: Cluster, names: set[str], now: float
) -> tuple[list[Job], list[EventRow], list[Job]]:
    """The active jobs on the nodes ``names`` end NODE_FAIL (requeued where they may be),
    as Slurm ends a job on all its nodes when one fails, with their het job's other
    components: (the jobs changed, their events, the runs to stop on their agents: each
    lost job as it ran, and a het job's component 0 whose component 1.. lost a node)."""
    changed: list[Job] = []
    events: list[EventRow] = []
    ran: list[Job] = []
    for job in cluster.unfinished.values():
        if job.state.is_active and job.allocation and names & set(job.allocation.nodes):
            new, event = cluster.finish(job, JobState.NODE_FAIL, now)
            changed.append(new)
            events.append(event)
            ran.append(job)
    followers, ends = cluster.het_followers_end(changed, now)
    ids = {j.id for j in changed}
    changed.extend(j for j in followers if j.id not in ids)
    events.extend(ends)
    # a het job whose component 1.. lost a node ends whole: its script is stopped
    # (component 0's report then ends or requeues the rest)
    stopping = _het_leaders_to_stop(cluster, changed)
    changed.extend(stopping)
    events.extend(
        EventRow(now, "job.cancelling", job_id=j.id, state="COMPLETING") for j in stopping
    )
    return changed, events, [*stopping, *ran]


def _watched(cluster: Cluster, node: Node) -> bool:
    """Whether ``node``'s agent must keep heartbeating: any node UP, and one an operator
    drained or set DOWN while its jobs run on (or its agent is still connected)."""
    if node.state is NodeState.UP:
        return True
    usage = cluster.usage.get(node.name)
    return node.name in cluster.agent_sessions or (usage is not None and bool(usage.jobs))


def _het_leaders_to_stop(cluster: Cluster, ended: list[Job]) -> list[Job]:
    """Component 0 (running, not in ``ended``) of each het job a component of which
    is in ``ended``, as COMPLETING."""
    done = {j.id for j in ended}
    out: list[Job] = []
    for job in ended:
        het = job.spec.het
        if het is None or het.offset == 0 or het.job_id in done:
            continue
        leader = cluster.jobs.get(het.job_id)
        if leader is None or leader.state not in (JobState.RUNNING, JobState.SUSPENDED):
            continue
        done.add(leader.id)
        out.append(leader.evolve(state=JobState.COMPLETING))
    return out


async def _gpu_health(cluster: Cluster, name: str, problems: list[str]) -> None:
    """Drain a node whose agent reads problems on its GPUs, with them as the reason (as a
    site's health check does with ``scontrol update State=DRAIN``); resume it once none
    are left, if that drain is still the node's (an operator's drain or down stays)."""
    node = cluster.nodes.get(name)
    if node is None:
        return
    ours = node.state is NodeState.DRAIN and node.reason.startswith(GPU_HEALTH)
    reason = (GPU_HEALTH + "; ".join(problems))[:1024]
    if problems and (node.state is NodeState.UP or (ours and node.reason != reason)):
        await set_node_state(cluster, name, "DRAIN", reason, user=server_user())
    elif not problems and ours:
        await set_node_state(cluster, name, "RESUME", "", user=server_user())


def _last_seen(cluster: Cluster, node: str) -> float:
    session = cluster.agent_sessions.get(node)
    return session.last_seen if session else 0.0


async def set_node_state(
    cluster: Cluster, name: str, state: str, reason: str, *, user: str
) -> Node:
    """Operator drain / resume / down; ``user`` set the reason (an operator's name, or
    ``server_user()`` for the server's own). A node resumed without an agent stays down,
    not responding, in the server's name. A drained node set DOWN keeps Slurm's DRAIN
    flag (``DOWN+DRAIN``, sinfo's ``drained``; ``Node.drain``) until it is resumed, as in
    Slurm 22.05.8; so does a DOWN+DRAIN node set DOWN again (a new reason)."""
    from hal.core.errors import InvalidRequest, NotFound

    node = cluster.nodes.get(name)
    if node is None:
        raise NotFound(f"Invalid node name specified: {name}")
    now = cluster.clock.now()
    if state in ("DRAIN", "DOWN") and not reason:
        raise InvalidRequest(f"{state.lower()} needs a reason (--reason)", field="reason")
    if state == "DRAIN":
        new = node.evolve(
            state=NodeState.DRAIN, reason=reason, reason_user=user, reason_time=now, drain=False
        )
    elif state == "DOWN":
        drain = node.state is NodeState.DRAIN or node.drain
        new = node.evolve(
            state=NodeState.DOWN, reason=reason, reason_user=user, reason_time=now, drain=drain
        )
    elif name in cluster.agent_sessions:  # UP / RESUME
        new = node.evolve(
            state=NodeState.UP, reason="", reason_user="", reason_time=None, drain=False
        )
    else:
        new = node.evolve(
            state=NodeState.DOWN,
            reason=NOT_RESPONDING,
            reason_user=server_user(),
            reason_time=now,
            drain=False,
        )
    async with cluster.change() as change:
        event = EventRow(
            now,
            "node.updated",
            node=name,
            state=new.state.value,
            data={"reason": new.reason, "user": user},
        )
        # a node set DOWN loses its jobs, as Slurm's: NODE_FAIL, requeued where they may
        # be, and their processes ended on every node
        changed, lost, to_stop = (
            _lose_jobs(cluster, {name}, now) if state == "DOWN" else ([], [], [])
        )

        def extra(tx: StateTransaction) -> None:
            tx.upsert_node(new)

        await change.commit(changed, [event, *lost], extra)
        cluster.nodes[name] = new
        for job in to_stop:
            send_cancel(cluster, job, JobState.NODE_FAIL)
    return new


async def forget_node(cluster: Cluster, name: str, reason: str) -> bool:
    """Remove a node the compute control plane (``hal.server.cloud``) deleted: its record
    and its agent's session, as Slurm's ``scontrol delete nodename`` does. False, and
    nothing changed, while a job holds it. Its instance will not sync again; if it did,
    it would register as a new node."""
    async with cluster.change() as change:
        usage = cluster.usage.get(name)
        if name not in cluster.nodes or (usage is not None and usage.jobs):
            return False
        now = cluster.clock.now()

        def extra(tx: StateTransaction) -> None:
            tx.delete_node(name)

        await change.commit(
            [], [EventRow(now, "node.removed", node=name, data={"reason": reason})], extra
        )
        cluster.nodes.pop(name, None)
        cluster.usage.pop(name, None)
        session = cluster.agent_sessions.pop(name, None)
        if session is not None:
            session.wake.set()  # a held sync answers now
        cluster.changed.set()
    return True


def feedback_environment(cluster: Cluster, job: Job, env: dict[str, str]) -> bool:
    """The job's feedback token (docs/feedback.md), good for this run only, and where to
    send it: the server's URL where the submitter exported none. True when that URL was
    put there (``Launch.hal_url_default``: the agent lists every server instead)."""
    if cluster.feedback_key is not None:
        env[ENV_TOKEN] = job_token(cluster.feedback_key, job.id, job.restarts)
    if cluster.url and not env.get("HAL_URL"):
        env["HAL_URL"] = cluster.url
        return True
    return False
