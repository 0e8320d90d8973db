"""The event loop: arrivals, completions and kills on a virtual clock, with the real
scheduler deciding every start.

At each instant where something happens, in this order::

    1. completions (a job ends at start + min(run time, requested time): a job that
       would run longer is killed at its requested time, like a real system)
    2. arrivals (jobs submitted at this instant join the queue)
    3. one scheduler pass on a ``ClusterSnapshot`` of the moment → ``Plan``; placements
       start now, terminations end jobs unrun
    4. a sample for the time series (queue length, busy processors)

The simulator is the server's bottom half in memory: it owns the job table, the virtual
clock and a ``NodeTable`` kept up to date incrementally (taken at each start, released
at each end) instead of rebuilt from the snapshot every pass; ``check_tables=True``
verifies it against ``NodeTable.build`` at every pass. The pass is ``Scheduler.run_pass``
itself, so a decision here is the decision the server would take on the same snapshot.

When passes run (the server has its own rule: debounce and interval): at every instant
with a completion, an arrival or an expired prediction (a running job reaching its planned
end without ending: the expiry correction moves that end, and with it the reservation
that counted on it, so jobs may now fit that did not; the server, which passes every
second while jobs wait, sees this within its bf_interval), except where no
pass could start anything:

* the free CPUs of the whole cluster are fewer than the smallest pending job needs
  (every placement needs its CPUs free);
* nothing but arrivals happened at this instant, backfill runs at every pass (bf_interval
  0), planned ends cannot move between events (the ``user`` and ``perfect`` predictors;
  the others' expiries are queued from the prediction each job started with, which only
  a ``PinnedPredictor`` keeps, so the rule stays off for them), and every new job needs
  more CPUs than are free. The jobs already waiting either failed the last pass on
  these same resources (no completion since: free CPUs and planned ends have not moved,
  and a later window only holds less) or needed more CPUs than are free; only a new job
  could start, and none fits;
* backfill runs at every pass and no job that could start finds its nodes: as many
  nodes of its partition, UP and without an exclusive job, with its CPUs per node free
  (``fitscreen.py``; the jobs that could start are the new ones in the case above,
  every pending job otherwise). A few CPUs freed on a busy machine of many-core nodes
  start no wide job;
* nothing but arrivals happened since a pass that started nothing and whose EASY
  backfill stage settled (its head reserved), backfill runs at every pass, planned ends
  are fixed between events (every predictor but an unpinned moving one), no plugin of
  the profile reads the clock for the simulator's jobs (``_CLOCK_FREE``), and none of
  the new jobs could start: ``backfill.SettledStage.could_start`` asks each what the
  pass would (the old jobs' verdicts are those of that pass). On a busy machine most
  arrivals find the head's reservation in their way;
* under the same conditions, nothing but expiries happened since such a pass and every
  corrected end still comes no later than the head's reserved start
  (``SettledStage.outlasts``): the head's reservation stays, and a release that moved
  later leaves no job more room than it had.

This is a choice of *when* to run passes, as the server's debounce is; every pass that
runs is the real one. Node choices are exactly reproducible with one core per node (ties
go to the lowest row); with several cores per node a reservation's nodes could in
principle differ.

``every_event=True`` runs a pass at every instant; the scenario tests check that both
give the same schedule.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hal.core.clock import VirtualClock
from hal.core.job import Job, JobSpec
from hal.core.states import JobState, PendingReason
from hal.predict import (
    PerfectPredictor,
    PinnedPredictor,
    Predictor,
    UserPredictor,
    planned_runtime,
)
from hal.scheduler.framework.backfill import SettledStage
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.scheduler import PassResult, Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot, Placement
from hal.sim.cluster import PARTITION, ClusterModel
from hal.sim.data import CacheModel, Read
from hal.sim.fitscreen import FitScreen, Need
from hal.sim.interference import InterferenceModel
from hal.sim.traffic import TrafficModel
from hal.sim.workload import TraceJob

FloatArray = npt.NDArray[np.float64]
# Told, at each instant where jobs arrive, before they do: the index (in the whole trace)
# of the first of them, whether nothing runs or waits then, and the passes run and
# skipped so far; True stops the replay there (``hal.sim.parallel``).
Watch = Callable[[int, bool, int, int], bool]

# Plugins whose verdicts on the simulator's jobs do not depend on when they are asked:
# ``hold`` reads the clock only for a begin time and ``reservation`` only for advance
# reservations, neither of which a trace job has; the others never read it. (Not
# ``datalocality`` or ``topology``: their scores count the time a job has waited.)
_CLOCK_FREE = frozenset(
    {
        "priority",
        "hold",
        "partition",
        "dependency",
        "arraythrottle",
        "reservation",
        "noderesources",
        "exclusiveuser",  # (who holds which node: changes only with starts and ends)
        "nvlink",
        "affinity",  # (who holds which node, as exclusiveuser; never the clock)
        "backfill",
        "harmonic",  # (where jobs go, from the traffic graph: never whether one starts)
        "dissonance",  # (where jobs go, from the interference model: likewise)
    }
)


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job's fate: ``start``/``end`` are NaN for a job that never ran."""

    job: TraceJob
    start: float
    end: float
    state: JobState
    predicted: float = np.nan  # the planned run time when it started (NaN: no predictor)
    read: Read | None = None  # its --data inputs at start (with a data plane)


@dataclass(frozen=True, slots=True)
class SimRun:
    """Everything a run produced; ``metrics`` turns it into numbers."""

    outcomes: tuple[JobOutcome, ...]
    machine_procs: int
    series_t: FloatArray  # sample instants
    series_queue: FloatArray  # pending jobs after the pass
    series_busy: FloatArray  # processors held by running jobs (as the trace counts them)
    passes: int
    skipped_passes: int
    wall_s: float


class Simulation:
    def __init__(
        self,
        jobs: tuple[TraceJob, ...],
        cluster: ClusterModel,
        scheduler: Scheduler,
        *,
        predictor: Predictor | None = None,
        check_tables: bool = False,
        every_event: bool = False,
        explain: bool = False,
        data: CacheModel | None = None,
        inputs: Mapping[int, tuple[str, ...]] | None = None,
        first: int = 0,
        watch: Watch | None = None,
        traffic: TrafficModel | None = None,
        interference: InterferenceModel | None = None,
    ) -> None:
        self.jobs = jobs
        self.cluster = cluster
        self.scheduler = scheduler
        # Told every finished job (a learning predictor trains on them); its prediction at
        # each start is kept in the outcome for the accuracy figures.
        self.predictor = predictor
        self.check_tables = check_tables
        self.every_event = every_event
        # Reasons of jobs behind a blocked queue are not needed here: see
        # ``Scheduler.run_pass(explain=False)`` (same placements, fewer PreFilter calls).
        self.explain = explain
        self.clock = VirtualClock(jobs[0].submit if jobs else 0.0)
        # The data plane (``hal.sim.data``): jobs read ``inputs[id]`` when they start and
        # run that much longer; each pass sees the caches' contents.
        self.data = data
        self.inputs = inputs or {}
        # ``jobs`` start at this index of the whole trace (what ``watch`` is told), and
        # ``watch`` may stop the replay before an instant where jobs arrive: the run then
        # has the outcomes of the jobs before them only.
        self.first = first
        self.watch = watch
        # Communication (``hal.sim.traffic``): jobs carry its workload labels, each pass
        # sees its traffic graph, and a communication-bound job runs longer the more
        # switches lie between it and its peers.
        self.traffic = traffic
        # Interference (``hal.sim.interference``): jobs sharing a node slow each other
        # down, so a job's end moves whenever a neighbour starts or ends; each pass sees
        # the interference model (learned, or the truth).
        self.interference = interference

    def run(self) -> SimRun:
        """Replay the jobs. Python's cyclic garbage collector is off meanwhile, as it is
        during a pass (``Scheduler.run_pass``): the loop makes no reference cycles
        (reference counting frees what it drops), while every so many allocations the
        collector walked the young objects and now and then the whole job table (about
        3 % of the CPU on Curie's first 20,000 jobs, with the same peak memory). Left
        alone when the caller already turned it off."""
        if not gc.isenabled():
            return self._run()
        gc.disable()
        try:
            return self._run()
        finally:
            gc.enable()

    def _run(self) -> SimRun:
        wall0 = time.perf_counter()
        replay = _Replay(self)
        replay.loop()
        return replay.result(wall0)


class _Replay:
    """One run of a ``Simulation``: the job table, the node table kept up to date, the
    queues of coming events and the figures so far. ``loop`` walks the instants; each
    step of an instant (the module docstring's order) is a method of its own."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.jobs = sim.jobs
        self.clock = sim.clock
        self.scheduler = sim.scheduler
        self.predictor = predictor = sim.predictor
        self.nodes = sim.cluster.build_nodes()
        self.partitions = sim.cluster.partitions()
        self.table = NodeTable(self.nodes, self.partitions)
        self.free_cpus = int(self.table.free_cpus.sum())
        self.specs: dict[tuple[object, ...], JobSpec] = {}
        self.predicted: dict[int, float] = {}
        self.reads: dict[int, Read] = {}
        self.slowed: dict[int, float] = {}  # seconds a job's communication adds to its run
        # Planned ends stay put with the requested time (it is the kill time) and with the
        # truth; any other prediction can expire and be corrected between events, which
        # moves a reservation, so the arrivals-only shortcut (``_pass_snapshot``) no
        # longer holds.
        self.moving_ends = predictor is not None and not isinstance(
            predictor, UserPredictor | PerfectPredictor
        )
        self.by_id = {j.id: j for j in self.jobs}
        # (planned end, id) of running jobs that will outlive their prediction: an instant
        # where the plan changes although nothing ended or arrived (lazily cleaned).
        self.expiries: list[tuple[float, int]] = []
        self.pending: dict[int, Job] = {}
        self.need: list[tuple[int, int]] = []  # (cpus, id) of pending jobs, lazily cleaned
        self.screen = FitScreen()  # pending jobs' nodes and CPUs per node (fitscreen.py)
        self.running: dict[int, Job] = {}
        self.ends: list[tuple[float, int]] = []
        # with interference, each running job's current end: an entry of ``ends`` that
        # is not is stale (the job's pace changed since) and is skipped
        self.end_at: dict[int, float] = {}
        self.outcomes: dict[int, JobOutcome] = {}
        self.series_t: list[float] = []
        self.series_q: list[int] = []
        self.series_b: list[int] = []
        self.busy = 0
        self.interval = self.scheduler.backfill_interval_s
        self.last_backfill = -np.inf
        # the last pass's settled backfill stage (rule 4), while only arrivals follow it
        self.settled: SettledStage | None = None
        self.arrived: list[Job] = []  # jobs submitted since that pass
        self.rule4 = (
            not (sim.every_event or sim.explain or self.interval)
            and sim.data is None
            and (not self.moving_ends or isinstance(predictor, PinnedPredictor))
            and _clock_free(self.scheduler)
        )
        self.passes = self.skipped = 0
        # the pending jobs' reasons and expected starts in each plan (``hal.sim.cloud``
        # reads them; the scheduler's decisions are the same either way)
        self.updates = False
        self.revision = 0
        self.i, self.n_jobs = 0, len(self.jobs)

    def loop(self) -> None:
        """Every instant where something happens, until no job is left to end or arrive
        (or ``watch`` stops the replay)."""
        while self.i < self.n_jobs or self._live_ends():
            now = self._next_instant()
            moved = self._expire(now)  # 0. expired predictions
            completed = self._complete(now)  # 1. completions
            if self._watch_stops(now):
                self.n_jobs = self.i  # the replay stops before these jobs arrive
                break
            smallest_new, new_needs = self._arrive(now)  # 2. arrivals
            # 3. one pass, unless nothing could possibly start
            snap = self._pass_snapshot(now, moved, completed, smallest_new, new_needs)
            if snap is not None:
                self._pass(now, snap)
            elif self.pending:
                self.skipped += 1
            self.series_t.append(now)  # 4. a sample
            self.series_q.append(len(self.pending))
            self.series_b.append(self.busy)
            if self.i >= self.n_jobs and not self.ends and self.pending:
                break  # nothing will ever free resources for what is left

    def _live_ends(self) -> bool:
        """Whether a job will still end (stale ends of moved jobs dropped first)."""
        ends, end_at = self.ends, self.end_at
        if self.sim.interference is not None:
            while ends and end_at.get(ends[0][1]) != ends[0][0]:
                heapq.heappop(ends)
        return bool(ends)

    def _next_instant(self) -> float:
        """The next instant with an arrival, a completion or an expired prediction; the
        clock moves there."""
        expiries, running = self.expiries, self.running
        self._live_ends()
        t_next = self.jobs[self.i].submit if self.i < self.n_jobs else np.inf
        if self.ends and self.ends[0][0] <= t_next:
            t_next = self.ends[0][0]
        while expiries and expiries[0][1] not in running:
            heapq.heappop(expiries)
        if expiries and expiries[0][0] < t_next:
            t_next = expiries[0][0]
        now = float(t_next)
        self.clock.set(max(now, self.clock.now()))
        self.revision += 1
        return now

    def _expire(self, now: float) -> list[float]:
        """Expired predictions: the job's plan is extended (the correction) and the next
        expiry queued if the job will outlive that too. Returns the corrected planned
        ends."""
        expiries, predictor = self.expiries, self.predictor
        moved: list[float] = []
        while expiries and expiries[0][0] <= now:
            _, jid = heapq.heappop(expiries)
            job = self.running.get(jid)
            if job is None or job.start_time is None or predictor is None:
                continue
            if isinstance(predictor, PinnedPredictor):
                predictor.expired(job)
            start = job.start_time
            planned = start + planned_runtime(predictor, job, now - start)
            if planned <= now:  # rounding left it just short of its end: look again
                planned = now + 1.0
            moved.append(planned)  # the plan moved: a pass must see it, but see (5)
            slowed = self.slowed.get(jid, 0.0)
            end = self.end_at.get(jid)
            if end is None:
                end = start + _lifetime(self.by_id[jid], job, self.reads.get(jid), slowed)
            if planned < end:
                heapq.heappush(expiries, (planned, jid))
        return moved

    def _complete(self, now: float) -> bool:
        """The jobs that end now free their nodes; whether any did."""
        ends, predictor = self.ends, self.predictor
        completed = False
        interference = self.sim.interference
        while ends and ends[0][0] <= now:
            t, jid = heapq.heappop(ends)
            if interference is not None:
                if self.end_at.get(jid) != t:
                    continue  # stale: the job's pace changed since
                del self.end_at[jid]
                for other, end in interference.ended(jid, now):
                    self.end_at[other] = end
                    heapq.heappush(ends, (end, other))
            completed = True
            job = self.running.pop(jid)
            assert job.allocation is not None and job.start_time is not None
            self.table.release(job.allocation, exclusive=job.spec.exclusive)
            self.free_cpus += job.allocation.total().cpus
            tj = self.by_id[jid]
            self.busy -= tj.procs
            state = final_state(tj)
            if self.sim.traffic is not None:
                self.sim.traffic.ended(jid)
                self.slowed.pop(jid, None)
            p = self.predicted.pop(jid, np.nan)
            read = self.reads.pop(jid, None)
            self.outcomes[jid] = JobOutcome(tj, job.start_time, now, state, p, read)
            if predictor is not None:
                predictor.observe(job.evolve(state=state, end_time=now), now - job.start_time)
        return completed

    def _watch_stops(self, now: float) -> bool:
        """Whether ``watch`` stops the replay before the jobs that arrive now."""
        watch, i = self.sim.watch, self.i
        if watch is None or i >= self.n_jobs or self.jobs[i].submit > now:
            return False
        idle = not self.running and not self.pending
        return watch(self.sim.first + i, idle, self.passes, self.skipped)

    def _arrive(self, now: float) -> tuple[float, list[Need | None]]:
        """The jobs submitted now join the queue. Returns the fewest CPUs one of them
        needs (inf: none came) and their nodes and CPUs per node (``FitScreen.add``)."""
        jobs, n_jobs, inputs, traffic = self.jobs, self.n_jobs, self.sim.inputs, self.sim.traffic
        smallest_new = np.inf
        new_needs: list[Need | None] = []
        while self.i < n_jobs and jobs[self.i].submit <= now:
            tj = jobs[self.i]
            self.i += 1
            rec = tj.record
            keys = inputs.get(tj.id, ())
            label = traffic.comment(tj.id) if traffic is not None else ""
            key = (tj.procs, tj.user, rec.group, rec.executable, rec.queue, label, *keys)
            spec = self.specs.get(key)
            if spec is None:
                spec = with_trace_fields(self.sim.cluster.spec_for(tj.procs, tj.user), tj)
                spec = spec.with_changes(comment=label) if label else spec
                spec = self.specs[key] = spec.with_changes(data=keys) if keys else spec
            self.pending[tj.id] = job = Job(
                id=tj.id,
                spec=spec,
                partition=PARTITION,
                submit_time=tj.submit,
                time_limit_s=int(np.ceil(tj.requested)),
            )
            new_needs.append(self.screen.add(job))
            self.arrived.append(job)
            cpus_needed = spec.ntasks * spec.cpus_per_task
            heapq.heappush(self.need, (cpus_needed, tj.id))
            smallest_new = min(smallest_new, cpus_needed)
        return smallest_new, new_needs

    def _pass_snapshot(
        self,
        now: float,
        moved: list[float],
        completed: bool,
        smallest_new: float,
        new_needs: list[Need | None],
    ) -> ClusterSnapshot | None:
        """The snapshot for this instant's pass, or None where no pass could start
        anything (the rules in the module docstring; ``new_needs`` empty: no arrival)."""
        sim, need, pending, settled = self.sim, self.need, self.pending, self.settled
        while need and need[0][1] not in pending:
            heapq.heappop(need)
        # (5) only planned ends moved since a settled pass, none past the head's start
        kept = False
        if moved and not completed and not new_needs and settled is not None:
            kept = settled.outlasts(moved)
        completed = completed or (bool(moved) and not kept)
        could_start = not kept and bool(need) and need[0][0] <= self.free_cpus
        only_new = not (sim.every_event or completed or self.interval or self.moving_ends)
        if could_start and only_new:
            could_start = smallest_new <= self.free_cpus
        if could_start and not (sim.every_event or self.interval):
            # (3) no job that could start finds its nodes now
            could_start = self.screen.any_fits(self.table, new_needs if only_new else None)
        if completed:
            self.settled = settled = None
        if not (pending and could_start):
            return None
        snap = ClusterSnapshot(
            revision=self.revision,
            now=now,
            nodes=self.nodes,
            partitions=self.partitions,
            pending=tuple(pending.values()),
            running=tuple(self.running.values()),
            data=None if sim.data is None else sim.data.view(),
            traffic=None if sim.traffic is None else sim.traffic.view(now),
            dissonance=None if sim.interference is None else sim.interference.view(now),
        )
        if settled is not None:
            # (4) only arrivals since a settled pass, and none of them could start
            ctx = PassContext.from_snapshot(snap, self.table.copy())
            could_start = settled.could_start(ctx, self.arrived)
            self.arrived.clear()
        return snap if could_start else None

    def _pass(self, now: float, snap: ClusterSnapshot) -> None:
        """One scheduler pass: its placements start now, its terminations end jobs
        unrun."""
        sim = self.sim
        do_backfill = self.interval is not None and now - self.last_backfill >= self.interval
        if do_backfill:
            self.last_backfill = now
        if sim.check_tables:
            _check(self.table, snap)
        result = self.scheduler.run_pass(
            snap,
            nodes=self.table.copy(),
            backfill=do_backfill,
            explain=sim.explain,
            updates=self.updates,  # (else no pending job's reason is kept)
        )
        self.passes += 1
        self.settled = result.settled if self.rule4 else None
        self.arrived.clear()
        for placement in result.plan.placements:
            self._start(placement, now)
        for term in result.plan.terminations:
            job = self.pending.pop(term.job_id)
            self.screen.remove(job)
            self.outcomes[job.id] = JobOutcome(self.by_id[job.id], np.nan, np.nan, term.state)
        self._passed(result)

    def _passed(self, result: PassResult) -> None:
        """After each pass, its plan applied (a subclass's hook)."""

    def _start(self, placement: Placement, now: float) -> None:
        """A placed job starts: its nodes are taken and its end (and the expiry of its
        prediction, when that comes first and may move) queued."""
        job = self.pending.pop(placement.job_id)
        self.screen.remove(job)
        alloc = placement.allocation
        self.table.take(alloc, exclusive=job.spec.exclusive)
        self.free_cpus -= alloc.total().cpus
        tj = self.by_id[job.id]
        self.busy += tj.procs
        if placement.time_limit_s is not None:  # lowered within --time-min
            job = job.evolve(time_limit_s=placement.time_limit_s)
        self.running[job.id] = job.evolve(
            state=JobState.RUNNING,
            reason=PendingReason.NONE,
            start_time=now,
            allocation=alloc,
        )
        data = self.sim.data
        if data is not None and job.spec.data:
            self.reads[job.id] = data.read(job.spec.data, alloc.nodes)
        if self.sim.traffic is not None:
            self.slowed[job.id] = self.sim.traffic.started(job, alloc.nodes, now)
        lifetime = _lifetime(tj, job, self.reads.get(job.id), self.slowed.get(job.id, 0.0))
        interference = self.sim.interference
        if interference is None:
            heapq.heappush(self.ends, (now + lifetime, job.id))
        else:  # its end, and those of the neighbours it slows, move with their pace
            # (its run time only: reads and traffic are not combined with interference)
            for other, end in interference.started(job, alloc, now, tj.run):
                if other == job.id:
                    lifetime = end - now
                self.end_at[other] = end
                heapq.heappush(self.ends, (end, other))
        predictor = self.predictor
        if predictor is not None:
            p = self.predicted[job.id] = planned_runtime(predictor, job)
            if self.moving_ends and p < lifetime:
                heapq.heappush(self.expiries, (now + p, job.id))

    def result(self, wall0: float) -> SimRun:
        """The run: every job's outcome in trace order (those still waiting PENDING), the
        time series, the pass counts and the wall time since ``wall0``."""
        outcomes, by_id = self.outcomes, self.by_id
        for jid in self.pending:
            outcomes[jid] = JobOutcome(by_id[jid], np.nan, np.nan, JobState.PENDING)
        ordered = tuple(outcomes[j.id] for j in self.jobs[: self.n_jobs])
        return SimRun(
            ordered,
            self.sim.cluster.total_cpus,
            np.asarray(self.series_t, dtype=np.float64),
            np.asarray(self.series_q, dtype=np.float64),
            np.asarray(self.series_b, dtype=np.float64),
            self.passes,
            self.skipped,
            time.perf_counter() - wall0,
        )


def _clock_free(scheduler: Scheduler) -> bool:
    """Whether every plugin of the scheduler's profile is in ``_CLOCK_FREE``."""
    p = scheduler.profile
    plugins = [
        p.queue_sort,
        *p.pre_filter,
        *p.filter,
        *p.post_filter,
        *p.pre_score,
        *(plugin for plugin, _ in p.score),
        *p.reserve,
        *p.permit,
        *p.placement_score,
        *(x for x in (p.backfill, p.placement_generate) if x is not None),
    ]
    return all(plugin.name in _CLOCK_FREE for plugin in plugins)


def _lifetime(tj: TraceJob, job: Job, read: Read | None, slowed: float = 0.0) -> float:
    """How long a started job holds its nodes: its run time (plus reading its inputs,
    plus ``slowed``: what its traffic's switches add), killed at the requested time if
    it would run longer."""
    run = tj.run + (read.seconds if read is not None else 0.0) + slowed
    return min(run, float(job.time_limit_s))


def final_state(tj: TraceJob) -> JobState:
    """As the trace tells it (SWF status 0 failed, 5 cancelled), or TIMEOUT when the
    job would have run past its request."""
    if tj.run >= tj.requested and tj.record.run > tj.requested:
        return JobState.TIMEOUT
    return {0: JobState.FAILED, 5: JobState.CANCELLED}.get(tj.record.status, JobState.COMPLETED)


def with_trace_fields(spec: JobSpec, tj: TraceJob) -> JobSpec:
    """The SWF fields a predictor can learn from, where a live job carries them: the
    executable as the job name, the group as the account, the queue as the QoS. (Not the
    requested memory: it would change placements on the model's nodes.)"""
    rec = tj.record
    return spec.with_changes(
        name=f"exe{rec.executable}" if rec.executable > 0 else spec.name,
        account=f"group{rec.group}" if rec.group > 0 else None,
        qos=f"queue{rec.queue}" if rec.queue > 0 else None,
    )


def _check(table: NodeTable, snap: ClusterSnapshot) -> None:
    """The incremental table must be what the server would build from the snapshot."""
    fresh = NodeTable.build(snap.nodes, snap.partitions, snap.running)
    for attr in ("free_cpus", "free_memory", "free_gpus", "jobs_on", "exclusive_on"):
        if not np.array_equal(getattr(fresh, attr), getattr(table, attr)):
            raise AssertionError(f"simulator table drifted from the snapshot: {attr}")
