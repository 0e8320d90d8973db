"""Malleable training-like jobs in the simulator: a share of a trace's jobs can run on
any node count in a range, each with its own goodput curve, and the controller of
``hal.core.malleable`` (the server's, unchanged) resizes them as they run.

**Which jobs.** Of the trace's jobs that ran at least ``MIN_RUN_S``, a seeded share
(``share``) is malleable, as long training runs are in a mixed cluster. Job ``j`` asked
for ``n0`` nodes and ran ``run`` seconds; its range is ``[max(n0 // 2, 1), max(2 n0, 4)]``
(at most half the machine), its serial share ``a`` is drawn from ``SERIAL`` (seeded per
job), and its work is ``run * s(n0)`` with Amdahl's ``s(n) = n / (1 + a (n - 1))``: on
``n0`` nodes it runs exactly as the trace says.

**Three ways to run them** (``MODES``):

* ``static``: at the ``n0`` nodes they asked for, as the trace ran them (the fixed
  allocation);
* ``moldable``: they start at as many nodes of their range as the scheduler can give
  (``--nodes=LO-HI``), and keep that size;
* ``feedback``: as ``moldable``, and the controller resizes them while they run.

**A resize** is what the server does: the job checkpoints and is requeued (keeping its
submit time, so its place in the queue) with its range's high end lowered to the new
size, and the real scheduler starts it again at as many nodes of ``[LO, new]`` as it
can. Each start after the first costs ``restart_s`` of lost progress (the restore).
The controller sees what a job would report through the feedback API: its rate at each
size it ran ``REPORT_AFTER_S`` at (the true rate, with ``NOISE`` seeded noise), and it
may only grow jobs into CPUs no waiting job asks for (``spare``).

Rigid jobs (the others) run as in any replay. Figures: each malleable job's completion
time (end − submit) and every job's, per mode.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hal.core.job import Job
from hal.core.malleable import Candidate, Policy, plan_resizes, speedup
from hal.core.states import JobState
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import Placement
from hal.sim.cluster import ClusterModel
from hal.sim.engine import SimRun, Simulation, _Replay
from hal.sim.fitscreen import Need
from hal.sim.workload import TraceJob

MODES = ("static", "moldable", "feedback")
MIN_RUN_S = 600.0  # shorter jobs are not long enough to be worth resizing
SERIAL = (0.01, 0.25)  # the serial shares drawn, uniformly
REPORT_AFTER_S = 60.0  # a job reports its rate once it ran this long at a size
NOISE = 0.03  # relative noise on reported rates


@dataclass(frozen=True, slots=True)
class MalleableJob:
    """What makes a trace job malleable: its range, serial share and work (solo
    seconds on one node)."""

    low: int
    high: int
    serial: float
    work: float


def _draw(job_id: int, seed: int, what: str) -> float:
    digest = hashlib.blake2b(f"{seed}:{what}:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def pick_malleable(
    jobs: Sequence[TraceJob], cluster: ClusterModel, share: float, seed: int = 1
) -> dict[int, MalleableJob]:
    """The malleable jobs of ``jobs`` (module docstring), by id."""
    cores = cluster.cores_per_node
    most = max(cluster.nodes // 2, 1)
    found = {}
    for j in jobs:
        if j.run < MIN_RUN_S or _draw(j.id, seed, "pick") >= share:
            continue
        n0 = min(-(-j.procs // cores), cluster.nodes)
        low, high = min(max(n0 // 2, 1), most), min(max(2 * n0, 4), most)
        if high <= low or n0 > most:
            continue
        a = SERIAL[0] + (SERIAL[1] - SERIAL[0]) * _draw(j.id, seed, "serial")
        found[j.id] = MalleableJob(low, high, a, j.run * speedup(n0, a))
    return found


@dataclass
class MalleableModel:
    """How the malleable jobs run in one replay (``mode``, the controller's ``policy``,
    the restart cost)."""

    jobs: dict[int, MalleableJob]
    mode: str = "feedback"
    policy: Policy = field(default_factory=Policy)
    restart_s: float = 60.0
    seed: int = 1
    resizes: int = 0  # what the replay did
    sizes: dict[int, list[int]] = field(default_factory=dict)  # nodes of each run, per job

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")


class MalleableSimulation(Simulation):
    """A ``Simulation`` whose malleable jobs run as ``model`` says."""

    def __init__(
        self,
        jobs: tuple[TraceJob, ...],
        cluster: ClusterModel,
        scheduler: Scheduler,
        model: MalleableModel,
    ) -> None:
        super().__init__(jobs, cluster, scheduler)
        self.model = model

    def _run(self) -> SimRun:
        import time

        wall0 = time.perf_counter()
        replay = _MalleableReplay(self, self.model)
        replay.loop()
        return replay.result(wall0)


@dataclass(slots=True)
class _Progress:
    left: float  # work left, in solo seconds on one node
    size: int = 0  # nodes of the current run
    start: float = 0.0  # of the current run
    runs: int = 0
    end: float = math.inf  # the current run's end (an entry of ``ends`` that is not: stale)
    rates: dict[int, float] = field(default_factory=dict)  # reported, per size


class _MalleableReplay(_Replay):
    def __init__(self, sim: MalleableSimulation, model: MalleableModel) -> None:
        super().__init__(sim)
        self.model = model
        self.cores = sim.cluster.cores_per_node
        chosen = model.jobs if model.mode != "static" else {}
        self.progress = {jid: _Progress(m.work) for jid, m in chosen.items()}

    # -- arrivals: malleable jobs ask for their range ---------------------------------
    def _arrive(self, now: float) -> tuple[float, list[Need | None]]:
        before = len(self.arrived)
        smallest, needs = super()._arrive(now)
        for k in range(before, len(self.arrived)):
            job = self.arrived[k]
            if job.id in self.progress:
                self.arrived[k] = self._requeue(job, self.model.jobs[job.id].high)
        return smallest, needs

    def _requeue(self, job: Job, high: int) -> Job:
        """``job`` pending with its range's top at ``high`` nodes."""
        m = self.model.jobs[job.id]
        low = min(m.low, high)
        spec = job.spec.with_changes(
            nodes_min=low,
            nodes_max=high,
            ntasks=low * self.cores,
            ntasks_per_node=self.cores,
            fewest_nodes=False,
        )
        # the limit a user would give: the whole work at the low end, and the restores
        limit = math.ceil(m.work / speedup(low, m.serial) + 4 * self.model.restart_s)
        if job.id in self.pending:
            self.screen.remove(self.pending[job.id])
        new = job.evolve(spec=spec, time_limit_s=max(limit, 60))
        self.pending[job.id] = new
        self.screen.add(new)
        heapq.heappush(self.need, (low * self.cores, job.id))
        return new

    # -- starts and ends ---------------------------------------------------------------
    def _start(self, placement: Placement, now: float) -> None:
        super()._start(placement, now)
        p = self.progress.get(placement.job_id)
        if p is None:
            return
        m = self.model.jobs[placement.job_id]
        p.size, p.start = len(placement.allocation.nodes), now
        self.model.sizes.setdefault(placement.job_id, []).append(p.size)
        lost = self.model.restart_s if p.runs else 0.0
        p.runs += 1
        p.end = now + lost + p.left / speedup(p.size, m.serial)
        heapq.heappush(self.ends, (p.end, placement.job_id))

    def _complete(self, now: float) -> bool:
        ends = self.ends
        due = []
        while ends and ends[0][0] <= now:
            due.append(heapq.heappop(ends))
        kept: set[int] = set()
        for t, jid in due:
            p = self.progress.get(jid)
            if jid in kept or (p is not None and (jid not in self.running or p.end != t)):
                continue  # stale: the job was resized since, or its run's end is elsewhere
            kept.add(jid)
            heapq.heappush(ends, (t, jid))
        completed = super()._complete(now)
        if self.model.mode == "feedback":
            completed = self._control(now) or completed
        return completed

    # -- the controller ----------------------------------------------------------------
    def _control(self, now: float) -> bool:
        """Run the controller on the running malleable jobs; requeue those it resizes."""
        candidates = []
        for jid in self.running:
            p = self.progress.get(jid)
            if p is None:
                continue
            m = self.model.jobs[jid]
            self._report(jid, p, now)
            candidates.append(
                Candidate(jid, p.size, m.low, m.high, self.cores, dict(p.rates), p.start)
            )
        for jid in self.pending:
            if jid in self.progress:  # waiting: the plan may make room for it
                w = self.model.jobs[jid]
                rates = dict(self.progress[jid].rates)
                candidates.append(Candidate(jid, 0, w.low, w.high, self.cores, rates, now))
        if not candidates:
            return False
        asked = sum(
            j.spec.ntasks * j.spec.cpus_per_task
            for jid, j in self.pending.items()
            if jid not in self.progress
        )
        spare = max(self.free_cpus - asked, 0)
        resizes = plan_resizes(candidates, spare, now, self.model.policy)
        done = 0
        for r in resizes:
            if r.old > 0:  # (a waiting job is given the room the others make)
                self._resize(r.job_id, r.new, now)
                done += 1
        self.model.resizes += done
        return done > 0

    def _report(self, jid: int, p: _Progress, now: float) -> None:
        """The rate the job reports at its size, once it ran long enough there."""
        if p.size in p.rates or now - p.start < REPORT_AFTER_S + self.model.restart_s:
            return
        m = self.model.jobs[jid]
        noise = 1.0 + NOISE * (2 * _draw(jid * 1000 + p.size, self.model.seed, "noise") - 1)
        p.rates[p.size] = speedup(p.size, m.serial) * noise

    def _resize(self, jid: int, new: int, now: float) -> None:
        """Checkpoint ``jid`` and requeue it at up to ``new`` nodes (its submit time kept)."""
        job = self.running.pop(jid)
        assert job.allocation is not None
        p = self.progress[jid]
        m = self.model.jobs[jid]
        lost = self.model.restart_s if p.runs > 1 else 0.0
        done = max(now - p.start - lost, 0.0) * speedup(p.size, m.serial)
        p.left = max(p.left - done, 1.0)
        p.end = math.inf
        self.table.release(job.allocation, exclusive=job.spec.exclusive)
        self.free_cpus += job.allocation.total().cpus
        self.busy -= self.by_id[jid].procs
        self.settled = None
        back = job.evolve(
            state=JobState.PENDING, start_time=None, allocation=None, restarts=job.restarts + 1
        )
        self._requeue(back, new)


def mean_jct(run: SimRun, ids: set[int] | None = None) -> float:
    """The mean completion time (end − submit) of the jobs that ran (of ``ids``)."""
    done = [
        o.end - o.job.submit
        for o in run.outcomes
        if not math.isnan(o.end) and (ids is None or o.job.id in ids)
    ]
    return float(np.mean(done)) if done else math.nan
