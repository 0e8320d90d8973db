"""The server's side of power saving (``[power]``, Slurm's ``SuspendProgram`` /
``ResumeProgram``): owned nodes powered down when idle and up for waiting jobs.

Each pass (every second):

- a node whose power-down was requested (``scontrol update state=power_down``) and
  that runs no job any more is powered down;
- a node powering down for ``suspend_timeout`` is powered down (``~``);
- a node powering up whose agent joined is back in service; one whose agent has not
  joined within ``resume_timeout`` goes DOWN with a reason (``node.resume_failed``),
  and the jobs it was woken for wait for other nodes;
- the waiting jobs, in priority order, wake the powered-down nodes they need
  (``hal.core.power.plan_resume``), at most ``resume_rate`` a minute;
- an idle, responding node outside ``exclude_nodes`` / ``exclude_partitions`` and the
  ``[cloud]`` groups is powered down after ``suspend_time``, at most ``suspend_rate``
  a minute.

Powering down drains the node (nothing new lands on it), then runs ``suspend_program
HOSTLIST``; powering up runs ``resume_program HOSTLIST`` with ``SLURM_RESUME_FILE``
(Slurm's JSON: the jobs and the nodes woken for them). Both run as the server's user,
in the background; a program that fails is logged with its output's end. A node's phase
is its drain reason (``hal.core.power.REASONS``), so a restarted server carries on; its
clocks (idle time, phase start) start again with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hal.config.power import PowerConfig
from hal.core.errors import Conflict, InvalidRequest, NotFound
from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.power import (
    REASONS,
    Asleep,
    Phase,
    Want,
    capacity,
    fits,
    phase_of,
    plan_resume,
    rate_left,
    to_suspend,
)
from hal.core.states import JobState, NodeState, PendingReason
from hal.server.room import job_partitions, nodes_with_room
from hal.slurm.syntax import compress_hostlist
from hal.state.agents import set_node_state
from hal.state.cluster import Cluster
from hal.state.node_reasons import server_user
from hal.state.store import EventRow

log = logging.getLogger(__name__)
PASS_S = 1.0
# the reasons of a job waiting for nodes (not for a dependency, a hold, a limit ...)
DEMAND = {
    PendingReason.NONE,
    PendingReason.PRIORITY,
    PendingReason.RESOURCES,
    PendingReason.BAD_CONSTRAINTS,
    PendingReason.REQ_NODE_NOT_AVAIL,
    PendingReason.NODE_DOWN,
    PendingReason.CLOUD_BUDGET,
}
RESUME_FAILED = "power: not back within {timeout:g} s of its resume (resume_timeout)"
BOOTS_KEPT = 20  # the resume durations the expected boot time is the median of
OUTPUT_KEPT = 2000  # characters of a failed program's output logged


@dataclass(slots=True)
class Waking:
    """A node being powered up: when, and the jobs it was woken for."""

    since: float
    jobs: tuple[int, ...] = ()


class PowerService:
    def __init__(self, cluster: Cluster, config: PowerConfig) -> None:
        self.cluster = cluster
        self.config = config
        self.idle_since: dict[str, float] = {}
        self.since: dict[str, float] = {}  # node → when its power phase began
        self.waking: dict[str, Waking] = {}
        self._downs: deque[float] = deque(maxlen=10_000)  # when nodes were powered down
        self._ups: deque[float] = deque(maxlen=10_000)
        self.boots: deque[float] = deque(maxlen=BOOTS_KEPT)  # resume → joined, seconds
        self._programs: set[asyncio.Task[None]] = set()

    def configure(self, config: PowerConfig) -> None:
        """``scontrol reconfigure``: the new ``[power]`` (its programs checked by
        ``check_programs``)."""
        self.config = config

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if self.config.enabled and await self.cluster.database_ok():
                    await self.step()
            except Exception:
                log.exception("the power saving pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PASS_S)

    async def stop(self) -> None:
        """Wait a moment for the programs still running (they run on if they outlast it)."""
        if self._programs:
            await asyncio.wait(list(self._programs), timeout=5)

    # -- what others read ------------------------------------------------------------
    def boot_seconds(self) -> float:
        """The expected time from a resume to the node's agent joining: the median of the
        last resumes seen, ``resume_timeout`` before any."""
        if not self.boots:
            return self.config.resume_timeout
        ordered = sorted(self.boots)
        return ordered[len(ordered) // 2]

    def capacity(self) -> list[Asleep]:
        """The owned nodes asleep or waking, and when each could start a job if woken
        now (``hal.core.power.capacity``): for a burst decision, capacity with a boot
        time."""
        return capacity(
            self.cluster.nodes.values(),
            self.since,
            self.cluster.clock.now(),
            boot_s=self.boot_seconds(),
            suspend_timeout=self.config.suspend_timeout,
        )

    def waking_for(self, job_id: int) -> list[tuple[str, float]]:
        """(node, when its resume began) of each node being powered up for the job."""
        return [(n, w.since) for n, w in sorted(self.waking.items()) if job_id in w.jobs]

    # -- scontrol update nodename=X state=power_down|power_up -------------------------
    async def power_down(self, name: str, user: str) -> Node:
        """Power ``name`` down once it runs no job (Slurm's ``state=power_down``): it is
        drained now; the next pass powers it down when its jobs have ended."""
        node = self._owned(name)
        phase = phase_of(node)
        if phase in (Phase.POWERING_DOWN, Phase.POWERED_DOWN, Phase.REQUESTED):
            return node
        if phase is Phase.POWERING_UP:
            raise Conflict(
                f"node {name} is powering up; power it down once it is back (at most "
                f"{self.config.resume_timeout:g} s, resume_timeout)"
            )
        return await self._enter(name, Phase.REQUESTED, user)

    async def power_up(self, name: str, user: str) -> Node:
        """Power ``name`` up now (Slurm's ``state=power_up``); a requested power-down not
        carried out yet is called off."""
        node = self._owned(name)
        phase = phase_of(node)
        if phase is Phase.REQUESTED:
            self.since.pop(name, None)
            return await set_node_state(self.cluster, name, "RESUME", "", user=user)
        if phase is Phase.POWERING_DOWN:
            raise Conflict(
                f"node {name} is powering down; power it up once it shows powered down "
                f"(~, at most {self.config.suspend_timeout:g} s, suspend_timeout)"
            )
        if phase is not Phase.POWERED_DOWN:
            return node  # awake or waking already
        await self._resume([node], {}, user)
        return self.cluster.nodes[name]

    def _owned(self, name: str) -> Node:
        if not self.config.enabled:
            raise InvalidRequest(
                "power saving is off: add [power] with suspend_program and resume_program "
                "to hal.toml (docs/admin/power.md), then scontrol reconfigure",
                field="state",
            )
        node = self.cluster.nodes.get(name)
        if node is None:
            raise NotFound(f"Invalid node name specified: {name}")
        if name in self.cluster.cloud_templates:
            raise Conflict(f"node {name} is a [cloud] group's: the autoscaler makes and removes it")
        return node

    # -- the pass ----------------------------------------------------------------------
    async def step(self) -> None:
        now = self.cluster.clock.now()
        await self._advance(now)
        await self._resume_for_jobs(now)
        if self.config.automatic:
            await self._suspend_idle(now)

    async def _advance(self, now: float) -> None:
        """Each node in a power phase one step on, as its clock and its agent say."""
        phases = {n.name: p for n in self.cluster.nodes.values() if (p := phase_of(n))}
        for name in [n for n in self.since if n not in phases]:
            del self.since[name]  # resumed, drained or removed by someone else
        for name in [n for n in self.waking if phases.get(n) is not Phase.POWERING_UP]:
            del self.waking[name]
        requested: list[Node] = []
        for name, phase in sorted(phases.items()):
            node = self.cluster.nodes[name]
            began = self.since.setdefault(name, now)  # (a restarted server's: from now)
            if phase is Phase.REQUESTED:
                usage = self.cluster.usage.get(name)
                if usage is None or not usage.jobs:
                    requested.append(node)
            elif phase is Phase.POWERING_DOWN and now - began >= self.config.suspend_timeout:
                await self._enter(name, Phase.POWERED_DOWN, server_user())
            elif phase is Phase.POWERING_UP:
                if self._joined(name, began):
                    await self._back(name, now - began)
                elif now - began >= self.config.resume_timeout:
                    await self._resume_failed(name)
            elif phase is Phase.POWERED_DOWN and self._joined(
                name, began + self.config.suspend_timeout
            ):
                log.warning("node %s: its agent joined while powered down; back in service", name)
                await self._back(name, None)
        allowed = rate_left(self._downs, self.config.suspend_rate, now)
        if requested and allowed:
            await self._suspend(requested[:allowed], "requested")

    def _joined(self, name: str, after: float) -> bool:
        """Its agent registered since ``after`` (as slurmd must register after a resume;
        a sync is no sign: the server ends a long poll it held for a dead agent too)."""
        if name not in self.cluster.agent_sessions:
            return False
        return self.cluster.nodes[name].last_heartbeat > after

    async def _back(self, name: str, took: float | None) -> None:
        waking = self.waking.pop(name, None)
        self.since.pop(name, None)
        await set_node_state(self.cluster, name, "RESUME", "", user=server_user())
        if took is not None:
            self.boots.append(took)
            log.info("node %s: back in %.1f s after its resume", name, took)
        await self._event(
            "node.powered_up", name, seconds=took, jobs=list(waking.jobs) if waking else []
        )

    async def _resume_failed(self, name: str) -> None:
        waking = self.waking.pop(name, None)
        self.since.pop(name, None)
        reason = RESUME_FAILED.format(timeout=self.config.resume_timeout)
        log.warning("node %s: %s", name, reason)
        # DOWN: any job on it is requeued (NODE_FAIL), as Slurm's; the jobs it was woken
        # for are still pending and wake other nodes at the next pass
        await set_node_state(self.cluster, name, "DOWN", reason, user=server_user())
        await self._event(
            "node.resume_failed",
            name,
            timeout=self.config.resume_timeout,
            jobs=list(waking.jobs) if waking else [],
        )

    # -- powering up for the waiting jobs ----------------------------------------------
    async def _resume_for_jobs(self, now: float) -> None:
        asleep, waking = [], []
        for node in self.cluster.nodes.values():
            phase = phase_of(node)
            if phase is Phase.POWERED_DOWN:
                asleep.append(node)
            elif phase is Phase.POWERING_UP:
                waking.append(node)
        if not asleep:
            return
        allowed = rate_left(self._ups, self.config.resume_rate, now)
        if not allowed:
            return
        wants = self._waiting()
        if not wants:
            return
        chosen = plan_resume(wants, asleep, waking, allowed)
        if chosen:
            nodes = [self.cluster.nodes[n] for n in sorted(chosen)]
            await self._resume(nodes, chosen, server_user())

    def _waiting(self) -> list[Want]:
        jobs = [
            j
            for j in self.cluster.unfinished.values()
            if j.state is JobState.PENDING and not j.held and j.reason in DEMAND
        ]
        jobs.sort(key=lambda j: (-j.priority, j.submit_time, j.id))
        wants = []
        for j in jobs:
            partitions = job_partitions(self.cluster, j)
            wants.append(Want(j.id, j.spec, partitions, self._awake(j, partitions)))
        return wants

    def _awake(self, job: Job, partitions: tuple[Partition, ...]) -> int:
        """The schedulable nodes with room for the job's share now."""
        return nodes_with_room(self.cluster, job.spec, partitions, fits)

    async def _resume(
        self, nodes: Sequence[Node], jobs: dict[str, tuple[int, ...]], user: str
    ) -> None:
        now = self.cluster.clock.now()
        names = [n.name for n in nodes]
        for name in names:
            await self._enter(name, Phase.POWERING_UP, user)
            self.waking[name] = Waking(now, jobs.get(name, ()))
            self._ups.append(now)
            await self._event("node.power_up", name, jobs=list(jobs.get(name, ())), user=user)
        hostlist = compress_hostlist(names)
        log.info("powering up %s (%s)", hostlist, self.config.resume_program)
        self._start(self.config.resume_program, hostlist, self._resume_file(names, jobs))

    def _resume_file(self, names: Sequence[str], jobs: dict[str, tuple[int, ...]]) -> str:
        """Slurm's ``SLURM_RESUME_FILE``: every node resumed, and each job with the nodes
        woken for it (``nodes_alloc`` and ``nodes_resume``: HAL places a job once its
        nodes are back, so both name the nodes woken for it)."""
        per_job: dict[int, list[str]] = {}
        for name in names:
            for job_id in jobs.get(name, ()):
                per_job.setdefault(job_id, []).append(name)
        entries = []
        for job_id, nodes in sorted(per_job.items()):
            job = self.cluster.jobs.get(job_id)
            entries.append(
                {
                    "extra": None,
                    "features": ",".join(job.spec.constraint) if job else None,
                    "job_id": job_id,
                    "nodes_alloc": compress_hostlist(nodes),
                    "nodes_resume": compress_hostlist(nodes),
                    "oversubscribe": "OK",
                    "partition": job.partition if job else None,
                    "reservation": (job.spec.reservation or None) if job else None,
                }
            )
        body = {"all_nodes_resume": compress_hostlist(list(names)), "jobs": entries}
        fd, path = tempfile.mkstemp(prefix="hal-resume-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out)
        return path

    # -- powering down -----------------------------------------------------------------
    async def _suspend_idle(self, now: float) -> None:
        eligible = set(self._eligible())
        for name in [n for n in self.idle_since if n not in eligible]:
            del self.idle_since[name]
        for name in eligible:
            since = self.idle_since.setdefault(name, now)
            usage = self.cluster.usage.get(name)
            if usage is not None and usage.released_at > since:
                self.idle_since[name] = usage.released_at
        allowed = rate_left(self._downs, self.config.suspend_rate, now)
        due = to_suspend(self.idle_since, self.config.suspend_time, now, allowed)
        if due:
            await self._suspend([self.cluster.nodes[n] for n in due], "idle")

    def _eligible(self) -> Iterable[str]:
        """The nodes power saving may take down on its own now: up, responding, without
        a job or an open reservation, and not excluded."""
        config = self.config
        cluster = self.cluster
        now = cluster.clock.now()
        excluded_parts = [
            cluster.partitions[p] for p in config.exclude_partitions if p in cluster.partitions
        ]
        reserved = {n for r in cluster.reservations.values() if r.active(now) for n in r.nodes}
        for node in cluster.nodes.values():
            name = node.name
            if node.state is not NodeState.UP or name not in cluster.agent_sessions:
                continue
            if name in cluster.cloud_templates or name in config.exclude_nodes or name in reserved:
                continue
            if any(p.contains(name) for p in excluded_parts):
                continue
            usage = cluster.usage.get(name)
            if usage is not None and usage.jobs:
                continue
            yield name

    async def _suspend(self, nodes: Sequence[Node], why: str) -> None:
        now = self.cluster.clock.now()
        names = [n.name for n in nodes]
        for name in names:
            idle = now - self.idle_since.pop(name, now)
            await self._enter(name, Phase.POWERING_DOWN, server_user())
            self._downs.append(now)
            await self._event("node.power_down", name, why=why, idle_seconds=round(idle, 3))
        hostlist = compress_hostlist(names)
        log.info("powering down %s (%s, %s)", hostlist, why, self.config.suspend_program)
        self._start(self.config.suspend_program, hostlist, None)

    async def _enter(self, name: str, phase: Phase, user: str) -> Node:
        self.since[name] = self.cluster.clock.now()
        return await set_node_state(self.cluster, name, "DRAIN", REASONS[phase], user=user)

    # -- the programs ------------------------------------------------------------------
    def _start(self, program: str, hostlist: str, resume_file: str | None) -> None:
        task = asyncio.create_task(self._run(program, hostlist, resume_file))
        self._programs.add(task)
        task.add_done_callback(self._programs.discard)

    async def _run(self, program: str, hostlist: str, resume_file: str | None) -> None:
        """``program HOSTLIST`` as the server's user, its output kept for the log; the
        resume file is removed once it has ended."""
        env = dict(os.environ)
        if resume_file is not None:
            env["SLURM_RESUME_FILE"] = resume_file
        try:
            with tempfile.TemporaryFile() as output:
                try:
                    proc = await asyncio.create_subprocess_exec(
                        program,
                        hostlist,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=output,
                        stderr=output,
                        env=env,
                        start_new_session=True,
                    )
                except OSError as err:
                    log.error("power: could not run %s %s: %s", program, hostlist, err)
                    return
                code = await proc.wait()
                if code != 0:
                    output.seek(0)
                    text = output.read().decode(errors="replace")[-OUTPUT_KEPT:]
                    log.error("power: %s %s exited %d: %s", program, hostlist, code, text)
        finally:
            if resume_file is not None:
                with contextlib.suppress(OSError):
                    os.unlink(resume_file)

    async def _event(self, kind: str, node: str, **data: object) -> None:
        await self.cluster.record_events(
            [EventRow(self.cluster.clock.now(), kind, node=node, data=dict(data))]
        )
