"""``FeedbackLoop``: the control plane acting on what jobs report (docs/feedback.md).

Every ``tick_s`` it does two things, each decided by ``hal.core.malleable`` (the same
code the simulator runs) and each an event with its reason:

**Resizing malleable jobs** (``job.resized``). The running jobs that declared
``--malleable`` with a range and a feedback goal, and the malleable jobs that wait, are
the controller's candidates: each with its size now, its range, the most its QoS,
account and partition allow (``cap``), and its mean reported rate at each size it ran
at (its first goal's metric; the sizes of its runs are kept in ``job.extra[RUNS]``).
The CPUs it may grow jobs into are those free on UP nodes less what rigid waiting jobs
ask for. A job the controller resizes is checkpointed and requeued, as a preempted job
is: sent its ``--signal`` (or ``SIGUSR1`` to its batch shell, as elastic launchers
expect) and ended after its grace time (its ``@SECS``, at most
``preempt.SIGNAL_GRACE_MAX_S``; ``DEFAULT_GRACE_S`` without ``--signal``) unless it
exits first, then put back in the queue keeping its submit time, its range's high end
lowered (or raised) to the new size: the scheduler starts it again at as many units of
``[LO, new]`` as it can.

**Moving one of two clashing jobs** (``job.moved``). A job with a feedback goal whose
reported value fell and stayed down (``feedback_fell``) while a neighbour on one of its
nodes is of a class the interference model says slows its own by at least
``MOVE_SLOWDOWN`` has one of the two requeued (``mover``: the checkpointable one, of two
the lower priority) with a preferred ``--apart`` rule from the other, so the scheduler
places it away from that job where it can. A job is moved, or causes a move, at most
once per ``move_interval_s``.

HTC sessions grow and shrink by themselves (their broker asks for worker jobs as tasks
queue): they are not malleable jobs and this loop leaves them alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from hal.core.dissonance import DissonanceView
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job, JobSpec
from hal.core.job_rules import MAX_RULES, NODE, JobRule
from hal.core.malleable import (
    ACTION,
    CPUS,
    Candidate,
    Mover,
    Policy,
    Resize,
    feedback_fell,
    mover,
    plan_resizes,
    rates_by_size,
)
from hal.core.preemption import GRACE_END, PREEMPTED_BY
from hal.core.profiles import PROFILE_CLASS
from hal.core.states import JobState, NodeState, PendingReason
from hal.server.feedback import FeedbackService
from hal.state import agents, preempt
from hal.state.cluster import Cluster
from hal.state.store import EventRow

log = logging.getLogger("hal.server.malleable")

RUNS = "malleable_runs"  # job.extra: "START:SIZE ..." of its runs, oldest first
MOVED_AT = "moved_at"  # job.extra: when it was last moved (or its neighbour was)
RUNS_KEPT = 32  # runs remembered per job
DEFAULT_GRACE_S = 60.0  # to checkpoint after SIGUSR1, for a job without --signal
MOVE_SLOWDOWN = 1.2  # a neighbour class that slows the job's own class this much clashes
GROW, SHRINK = "grow", "shrink"  # a resize's direction (hal_jobs_resized_total)
DISSONANCE = "dissonance"  # why a job was moved (hal_jobs_moved_total): a clash
_FOR_ROOM = (PendingReason.RESOURCES, PendingReason.PRIORITY, PendingReason.WAITING_FOR_SCHEDULING)


class FeedbackLoop:
    """The loop; its intervals and gain are ``[harmonic]``'s as the cluster's
    configuration has them now (``scontrol reconfigure`` changes them)."""

    def __init__(
        self,
        cluster: Cluster,
        feedback: FeedbackService,
        dissonance: Callable[[], DissonanceView] | None,
    ) -> None:
        """``dissonance``: the interference model's current view
        (``DissonanceService.view``); None: no moves."""
        self.cluster = cluster
        self.feedback = feedback
        self.dissonance = dissonance
        self.resized = 0  # since start
        self.moved = 0
        # told of each action (partition, direction: grow/shrink; partition, reason), set
        # by the server to its metrics (hal_jobs_resized_total, hal_jobs_moved_total)
        self.on_resized: Callable[[str, str], None] = lambda partition, direction: None
        self.on_moved: Callable[[str, str], None] = lambda partition, reason: None

    @property
    def policy(self) -> Policy:
        h = self.cluster.config.harmonic
        return Policy(min_gain=h.resize_min_gain, min_interval_s=h.resize_interval_s)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.cluster.config.harmonic.feedback_tick_s)
            if stop.is_set():
                break
            try:
                await self.tick()
            except Exception:  # a bad tick must not end the loop; the next one tries again
                log.exception("the feedback loop's tick failed")

    async def tick(self) -> None:
        """One round: resizes, then moves."""
        running = [j for j in self.cluster.unfinished.values() if _settled(j)]
        malleable = [j for j in running if j.spec.malleable and j.spec.feedback_goals]
        watched = [j for j in running if j.spec.feedback_goals]
        if not watched:
            return
        series = await self.feedback.series([j.id for j in watched])
        by_job: dict[int, list[FeedbackSeries]] = {}
        for s in series:
            by_job.setdefault(s.job_id, []).append(s)
        if malleable:
            await self._resize(malleable, by_job)
        if self.dissonance is not None:
            await self._move(watched, by_job)

    # -- resizing --------------------------------------------------------------------------
    async def _resize(
        self, jobs: Sequence[Job], series: Mapping[int, list[FeedbackSeries]]
    ) -> None:
        now = self.cluster.clock.now()
        candidates = [self._candidate(j, series.get(j.id, [])) for j in jobs]
        waiting = [j for j in _waiting_for_room(self.cluster) if j.spec.malleable]
        for j in waiting:
            unit = _unit_cpus(j, None)
            candidates.append(
                Candidate(j.id, 0, *_bounds(j), unit, {}, now, j.priority, self._cap(j, unit))
            )
        spare = self._spare_cpus(waiting)
        plan = plan_resizes(candidates, spare, now, self.policy)
        due = [r for r in plan if r.old > 0]
        if due:
            await self._apply_resizes(due, now)

    def _candidate(self, job: Job, series: Sequence[FeedbackSeries]) -> Candidate:
        """``job`` as the controller sees it (running, malleable)."""
        assert job.spec.malleable is not None and job.start_time is not None
        runs = _runs(job)
        size = _size(job)
        if not runs or runs[-1] != (job.start_time, size):
            runs.append((job.start_time, size))
        goal_metric, goal = job.spec.feedback_goals[0]
        points = next((s.points for s in series if s.metric == goal_metric), ())
        rates = rates_by_size(points, runs, goal)
        unit = _unit_cpus(job, job)
        low, high = _bounds(job)
        return Candidate(
            job.id, size, low, high, unit, rates, job.start_time, job.priority, self._cap(job, unit)
        )

    def _cap(self, job: Job, cpus_per_unit: int) -> int:
        """The most units ``job``'s QoS, account (and its parents), partition and nodes
        allow; 0: none below its range."""
        spec = job.spec
        assert spec.malleable is not None
        config = self.cluster.config.priority
        limits = [q.max_tres_per_job for q in config.qos if q.name == spec.qos]
        accounts = {a.name: a for a in config.accounts}
        name, seen = spec.account, set()
        while name and name in accounts and name not in seen:
            seen.add(name)
            limits.append(accounts[name].max_tres_per_job)
            name = accounts[name].parent
        caps = [lim.cpus // max(cpus_per_unit, 1) for lim in limits if lim.cpus is not None]
        partition = self.cluster.partitions.get(job.partition)
        members = [
            n
            for n in self.cluster.nodes.values()
            if partition is None or partition.contains(n.name)
        ]
        if spec.malleable.unit == CPUS:
            tasks = spec.ntasks_per_node or spec.ntasks
            widest = max((n.resources.cpus for n in members), default=0)
            caps.append(widest // max(tasks, 1))
        else:
            caps += [lim.nodes for lim in limits if lim.nodes is not None]
            if partition is not None and partition.max_nodes:
                caps.append(partition.max_nodes)
            caps.append(len(members))
        return max(min(caps), 1) if caps else 0

    def _spare_cpus(self, malleable_waiting: Iterable[Job]) -> int:
        """CPUs free on UP nodes, less what rigid waiting jobs ask for."""
        free = 0
        for node in self.cluster.nodes.values():
            if node.state is not NodeState.UP or node.drain:
                continue
            used = self.cluster.usage.get(node.name)
            held = used.allocated.cpus if used is not None else 0
            free += max(node.resources.cpus - held, 0)
        skip = {j.id for j in malleable_waiting}
        asked = sum(
            j.spec.ntasks * j.spec.cpus_per_task
            for j in _waiting_for_room(self.cluster)
            if j.id not in skip
        )
        return max(free - asked, 0)

    async def _apply_resizes(self, resizes: Sequence[Resize], now: float) -> None:
        changed: list[Job] = []
        directions: list[str] = []
        events: list[EventRow] = []
        async with self.cluster.change() as change:
            for r in resizes:
                job = self.cluster.jobs.get(r.job_id)
                if job is None or not _settled(job):
                    continue  # it ended or was marked meanwhile
                m = job.spec.malleable
                assert m is not None and job.start_time is not None
                runs = _runs(job)
                if not runs or runs[-1] != (job.start_time, r.old):
                    runs.append((job.start_time, r.old))
                words = f"resized {r.old} → {r.new} {m.unit} (range {m.low}-{m.high}): {r.reason}"
                extra = {**job.extra, RUNS: _runs_text(runs), ACTION: f"{_at(now)} {words}"}
                new = _ending(job.evolve(spec=_resized_spec(job, r.new), extra=extra), now)
                changed.append(new)
                directions.append(GROW if r.new > r.old else SHRINK)
                events.append(
                    EventRow(
                        now,
                        "job.resized",
                        job_id=job.id,
                        state=new.state.value,
                        data={"from": r.old, "to": r.new, "unit": m.unit, "reason": r.reason},
                    )
                )
            await change.commit(changed, events)
        for job in changed:
            _notify(self.cluster, job)
        self.resized += len(changed)
        for job, direction in zip(changed, directions, strict=True):
            log.info("job %s %s", job.display_id, job.extra[ACTION])
            self.on_resized(job.partition, direction)

    # -- moving ----------------------------------------------------------------------------
    async def _move(self, jobs: Sequence[Job], series: Mapping[int, list[FeedbackSeries]]) -> None:
        assert self.dissonance is not None
        view = self.dissonance()
        now = self.cluster.clock.now()
        interval = self.cluster.config.harmonic.move_interval_s
        on: dict[str, list[Job]] = {}
        for j in self.cluster.unfinished.values():
            if j.state is JobState.RUNNING and j.allocation is not None:
                for name in j.allocation.nodes:
                    on.setdefault(name, []).append(j)
        moves: list[tuple[Job, Job, str]] = []
        taken: set[int] = set()
        for job in jobs:
            if job.id in taken or _recent(job, now, interval):
                continue
            metric, goal = job.spec.feedback_goals[0]
            points = next((s.points for s in series.get(job.id, []) if s.metric == metric), ())
            if not feedback_fell(points, goal):
                continue
            mine = job.extra.get(PROFILE_CLASS) or view.job_class.get(job.id)
            if mine is None:
                continue
            worst: tuple[float, Job] | None = None
            assert job.allocation is not None
            for name in job.allocation.nodes:
                for other in on.get(name, ()):
                    theirs = other.extra.get(PROFILE_CLASS) or view.job_class.get(other.id)
                    if other.id == job.id or theirs is None or other.id in taken:
                        continue
                    if not _settled(other) or _recent(other, now, interval):
                        continue
                    slow = view.of(mine, theirs)
                    if slow >= MOVE_SLOWDOWN and (worst is None or slow > worst[0]):
                        worst = (slow, other)
            if worst is None:
                continue
            slow, other = worst
            pick = mover(_as_mover(job), _as_mover(other))
            if pick is None:
                continue
            moved, stays = (job, other) if pick.job_id == job.id else (other, job)
            why = (
                f"job {job.display_id}'s {metric} fell and stayed down beside job "
                f"{other.display_id} ({theirs} work slows {mine} work ×{slow:.2f} as learnt); "
                f"job {moved.display_id} moved (checkpointable, lower priority)"
            )
            moves.append((moved, stays, why))
            taken |= {job.id, other.id}
        if moves:
            await self._apply_moves(moves, now)

    async def _apply_moves(self, moves: Sequence[tuple[Job, Job, str]], now: float) -> None:
        changed: list[Job] = []
        events: list[EventRow] = []
        async with self.cluster.change() as change:
            for moved, stays, why in moves:
                job = self.cluster.jobs.get(moved.id)
                other = self.cluster.jobs.get(stays.id)
                if job is None or not _settled(job):
                    continue
                rule = JobRule(job_id=stays.id, level=NODE, required=False)
                apart = job.spec.apart
                if rule not in apart and len(apart) < MAX_RULES:
                    apart = (*apart, rule)
                extra = {**job.extra, ACTION: f"{_at(now)} moved: {why}", MOVED_AT: repr(now)}
                new = _ending(job.evolve(spec=job.spec.with_changes(apart=apart), extra=extra), now)
                changed.append(new)
                if other is not None:
                    changed.append(other.evolve(extra={**other.extra, MOVED_AT: repr(now)}))
                events.append(
                    EventRow(
                        now,
                        "job.moved",
                        job_id=job.id,
                        state=new.state.value,
                        data={"away_from": stays.id, "reason": why},
                    )
                )
            await change.commit(changed, events)
        moved_ids = {m.id for m, _, _ in moves}
        for job in changed:
            if job.id in moved_ids:
                _notify(self.cluster, job)
                self.on_moved(job.partition, DISSONANCE)
        self.moved += len(events)


# -- helpers -------------------------------------------------------------------------------
def _waiting_for_room(cluster: Cluster) -> list[Job]:
    """The pending jobs that wait for CPUs (behind others or for resources): not held,
    not waiting for a dependency, a begin time or a reservation."""
    return [
        j
        for j in cluster.unfinished.values()
        if j.state is JobState.PENDING and j.reason in _FOR_ROOM and not j.held
    ]


def _settled(job: Job) -> bool:
    """Running, launched, and not already being ended, requeued or preempted."""
    return (
        job.state is JobState.RUNNING
        and job.launched
        and job.allocation is not None
        and job.start_time is not None
        and preempt.REQUEUE not in job.extra
        and GRACE_END not in job.extra
        and PREEMPTED_BY not in job.extra
        and preempt.INTERRUPTED not in job.extra
    )


def _size(job: Job) -> int:
    m = job.spec.malleable
    assert m is not None and job.allocation is not None
    return job.spec.cpus_per_task if m.unit == CPUS else len(job.allocation.nodes)


def _bounds(job: Job) -> tuple[int, int]:
    m = job.spec.malleable
    assert m is not None
    return m.low, m.high


def _unit_cpus(job: Job, running: Job | None) -> int:
    """CPUs one unit holds: a node's share of the job (per node), or its tasks (CPUs per
    task)."""
    spec = job.spec
    assert spec.malleable is not None
    if spec.malleable.unit == CPUS:
        return max(spec.ntasks, 1)
    if running is not None and running.allocation is not None and running.allocation.per_node:
        return max(running.allocation.per_node[0].cpus, 1)
    return max(spec.cpus_per_node(max(spec.nodes_min, 1)), 1)


def _resized_spec(job: Job, new: int) -> JobSpec:
    spec = job.spec
    m = spec.malleable
    assert m is not None
    if m.unit == CPUS:
        return spec.with_changes(cpus_per_task=new)
    low = min(m.low, new)
    ntasks = spec.ntasks_per_node * low if spec.ntasks_per_node else spec.ntasks
    return spec.with_changes(nodes_min=low, nodes_max=new, fewest_nodes=False, ntasks=ntasks)


def _ending(job: Job, now: float) -> Job:
    """``job`` marked to end and come back to the queue: RUNNING for its grace time
    (it is signalled), or COMPLETING at once where it has none."""
    extra = {**job.extra, preempt.REQUEUE: "1"}
    grace = _grace(job)
    if grace > 0:
        return job.evolve(extra={**extra, GRACE_END: repr(now + grace)})
    return job.evolve(state=JobState.COMPLETING, extra=extra)


def _grace(job: Job) -> float:
    sig = job.spec.signal
    if sig is None:
        return DEFAULT_GRACE_S
    return float(min(sig.seconds_before, preempt.SIGNAL_GRACE_MAX_S))


def _notify(cluster: Cluster, job: Job) -> None:
    """Tell the job's agent: its checkpoint signal, or the end of its run."""
    if job.state is JobState.COMPLETING:
        agents.send_cancel(cluster, job, JobState.PENDING)
        return
    sig = job.spec.signal
    if sig is None:
        agents.send_signal(cluster, job, signal.SIGUSR1, batch_only=True)
    else:
        agents.send_signal(cluster, job, sig.signum, batch_only=sig.batch_only)


def _as_mover(job: Job) -> Mover:
    able = (job.spec.signal is not None or job.spec.requeue) and not job.spec.interactive
    return Mover(job.id, able, job.priority)


def _recent(job: Job, now: float, interval: float) -> bool:
    try:
        return now - float(job.extra.get(MOVED_AT, "-inf")) < interval
    except ValueError:
        return False


def _runs(job: Job) -> list[tuple[float, int]]:
    found = []
    for part in job.extra.get(RUNS, "").split():
        start, _, size = part.partition(":")
        with contextlib.suppress(ValueError):
            found.append((float(start), int(size)))
    return found


def _runs_text(runs: Sequence[tuple[float, int]]) -> str:
    return " ".join(f"{t!r}:{n}" for t, n in runs[-RUNS_KEPT:])


def _at(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
