"""``DissonanceService``: the control plane's interference model (docs/harmonic.md).

**Exposure.** The service follows every job that runs (``Cluster.on_jobs_changed``):
per node, which running jobs hold how much of its CPUs and what class their profile put
them in (``job.extra[PROFILE_CLASS]``). For each running job it integrates, over its run,
its *exposure* to each class: the share of its node held by jobs of that class (on a
job of several nodes, its most exposed node), brought up to date whenever a job starts,
ends or changes class on one of its nodes.

**The signal.** When a job that ran ends, its outcome is its observed slowdown, the run
time it had over the run time the learned predictor gave it when it started (its *solo
estimate*: ``PredictionService``'s start prediction, reported through
``on_run_finished``), with its exposure averaged over that run time. The predictor
learns from every run, shared or not, so its estimates lean a little slow for work that
usually shares: the model's per-class bias term takes that up, and the matrix keeps only
what exposure to each class adds. Only runs that completed (state COMPLETED) with a
class, a model-made prediction (not a time limit) and at least ``MIN_RUN_S`` are learnt
from; a job without a class, or a failed or cancelled one, says nothing about its pace.

**Feedback drops.** A job that declared a feedback goal (``--feedback-goal``) and
reported its metric both alone and beside neighbours of known classes gives a second
outcome when it ends, whatever its final state (a service is usually cancelled): its
reported value beside neighbours against its median value alone (``feedback_outcome``),
with its exposure at those points. It is measured against the job itself, so it carries
no bias (``Outcome.biased``).

**Checked against what happened.** Each outcome is first *predicted* by the model as it
stood before it (prequential evaluation: every outcome is held out from the model that
predicts it), then learnt. The last ``EVAL_WINDOW`` predictions and outcomes give
``hal harmonic eval``'s mean absolute error, beside a baseline that predicts no
interference (the class's bias alone).

**Kept.** ``<data dir>/harmonic/dissonance.json``: the model (``DissonanceModel.export``)
and the evaluation window, written at most every ``SAVE_EVERY_S`` when it changed, and
at stop; read back at start.

**The view.** A ``hal.core.dissonance.DissonanceView`` for the scheduler, rebuilt at a
tick when the model or a running job's class changed (the scheduler's thread reads the
last one without a lock: ``DissonanceAwareRunner``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import json
import logging
import math
import os
import statistics
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hal.core.dissonance import DissonanceModel, DissonanceView, Outcome
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job
from hal.core.profiles import CLASSES, LATENCY_SENSITIVE, PROFILE_CLASS
from hal.core.states import JobState
from hal.core.traffic import identity
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan
from hal.scheduler.service import PassRunner
from hal.state.cluster import Cluster

log = logging.getLogger("hal.server.dissonance")

FILE = Path("harmonic") / "dissonance.json"
TICK_S = 5.0
SAVE_EVERY_S = 60.0
EVAL_WINDOW = 1_000  # outcomes kept for ``hal harmonic eval``
MIN_RUN_S = 60.0  # shorter runs: start-up noise, not pace
MAX_IDENTITIES = 100_000  # workload identities whose class is kept
MAX_CHANGES = 512  # exposure changes kept per running job (the older thinned past it)
MIN_POINTS = 3  # feedback points alone, and beside a neighbour, for a feedback outcome


@dataclass(slots=True)
class _Run:
    """A running job as the service follows it."""

    cls: str | None
    start: float
    shares: dict[str, float]  # node → share of its CPUs held
    at: float  # ``exposed`` is up to date to here
    exposure: dict[str, float] = field(default_factory=dict)  # now, per class
    exposed: dict[str, float] = field(default_factory=dict)  # ∫ exposure dt
    # (since when, exposure) at each change, oldest first (for its feedback's points)
    timeline: list[tuple[float, dict[str, float]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Checked:
    """One outcome and what the model predicted for it before learning it."""

    job_id: int
    victim: str
    observed: float
    predicted: float
    baseline: float  # the class's bias alone: no interference
    exposure: Mapping[str, float]
    at: float


class DissonanceService:
    def __init__(self, cluster: Cluster, data_dir: Path | None = None) -> None:
        self.cluster = cluster
        self.path = None if data_dir is None else data_dir / FILE
        self.model = DissonanceModel()
        self.checked: deque[Checked] = deque(maxlen=EVAL_WINDOW)
        self.learnt = 0  # outcomes learnt since start
        self.from_feedback = 0  # of which from jobs' reported feedback
        self._tasks: set[asyncio.Task[None]] = set()
        self.skipped = 0  # runs that ended without an outcome
        # the predictor thread reports ends: the model and ``_ended`` are shared with it
        self._lock = threading.Lock()
        self._runs: dict[int, _Run] = {}
        self._on: dict[str, set[int]] = {}  # node → running jobs
        # a run's two halves, joined whichever comes first: its exposure (event loop) and
        # its solo estimate (the predictor's thread)
        self._ended: dict[int, tuple[str, dict[str, float]]] = {}
        self._estimates: dict[int, tuple[float, int, float]] = {}  # (predicted, version, run)
        self._identities: dict[str, str] = {}  # identity → its last class
        self._protected: set[int] = set()
        self._view = DissonanceView()
        self._stale = True  # the view must be rebuilt
        self._dirty = False  # the model must be saved
        cluster.on_jobs_changed(self._jobs_changed)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self.path is not None and self.path.exists():
            try:
                await asyncio.to_thread(self._load, self.path)
            except (OSError, ValueError) as err:
                log.warning("the interference model in %s was not read (%s)", self.path, err)
        self._jobs_changed(list(self.cluster.unfinished.values()))
        self._set_view()

    async def run(self, stop: asyncio.Event) -> None:
        since_save = 0.0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
            if stop.is_set():
                break
            if self._stale:
                self._set_view()
            since_save += TICK_S
            if since_save >= SAVE_EVERY_S and self._dirty:
                since_save = 0.0
                await self.save()

    async def settled(self) -> None:
        """Wait for the feedback of the jobs that ended to be read and learnt."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop(self) -> None:
        await self.settled()
        if self._dirty:
            await self.save()

    async def save(self) -> None:
        if self.path is None:
            return
        with self._lock:
            data = self._export()
            self._dirty = False
        try:
            await asyncio.to_thread(_write, self.path, data)
        except OSError as err:
            self._dirty = True
            log.warning("the interference model was not stored (%s); tried again later", err)

    def _export(self) -> dict[str, Any]:
        return {
            "model": self.model.export(),
            "checked": [dataclasses.asdict(c) for c in self.checked],
            "identities": dict(self._identities),
        }

    def _load(self, path: Path) -> None:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        model = DissonanceModel.load(data["model"])
        checked = [Checked(**c) for c in data.get("checked", [])]
        with self._lock:
            self.model = model
            self.checked.extend(checked)
            self._identities.update(data.get("identities", {}))

    # -- following the jobs (event loop) ---------------------------------------------------
    def _jobs_changed(self, jobs: Sequence[Job]) -> None:
        now = self.cluster.clock.now()
        for job in jobs:
            run = self._runs.get(job.id)
            if job.state is JobState.RUNNING and job.allocation is not None:
                cls = _class(job)
                if job.extra.get(LATENCY_SENSITIVE) == "1":
                    self._protected.add(job.id)
                if run is not None and run.cls == cls:
                    continue
                if cls is not None:
                    self._know(job, cls)
                self._stale = True
                if run is None:
                    self._begin(job, cls, now)
                else:  # its class was measured (or changed): its neighbours see it now
                    self._touch(run.shares, now)
                    run.cls = cls
                    self._repace(job.id)
                    self._retouch(run.shares, job.id)
            elif run is not None:
                self._finish(job, run, now)
                self._stale = True
            if job.state.is_terminal:
                self._protected.discard(job.id)

    def _know(self, job: Job, cls: str) -> None:
        spec = job.spec
        known = self._identities
        known[identity(spec.user, spec.name, spec.comment)] = cls
        if len(known) > MAX_IDENTITIES:
            del known[next(iter(known))]

    def _begin(self, job: Job, cls: str | None, now: float) -> None:
        assert job.allocation is not None
        nodes = self.cluster.nodes
        shares = {}
        for name, held in zip(job.allocation.nodes, job.allocation.per_node, strict=False):
            node = nodes.get(name)
            cpus = node.resources.cpus if node is not None else 0
            shares[name] = min(1.0, held.cpus / cpus) if cpus > 0 else 1.0
        self._touch(shares, now)
        start = job.start_time if job.start_time is not None else now
        self._runs[job.id] = _Run(cls, start, shares, now)
        for name in shares:
            self._on.setdefault(name, set()).add(job.id)
        if cls is None:
            # a job of no class exposes its neighbours to nothing: only its own exposure
            # is new (a start's neighbours were worked out again for each start: a
            # plan's starts on full nodes held the event loop for it)
            self._repace(job.id)
        else:
            self._retouch(shares, None)

    def _finish(self, job: Job, run: _Run, now: float) -> None:
        self._touch(run.shares, now)
        del self._runs[job.id]
        for name in run.shares:
            self._on.get(name, set()).discard(job.id)
        if run.cls is not None:  # (one of no class exposed its neighbours to nothing)
            self._retouch(run.shares, None)
        end = job.end_time if job.end_time is not None else now
        elapsed = max(end - run.start, 0.0)
        if job.spec.feedback_goals and run.cls is not None and elapsed >= MIN_RUN_S:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # (a caller without a loop: no store to read it from)
                loop = None
            if loop is not None:
                task = loop.create_task(self._from_feedback(job, run.cls, run.timeline))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if (
            job.state is JobState.COMPLETED
            and run.cls is not None
            and elapsed >= MIN_RUN_S
            and end > run.start
        ):
            exposure = {a: x / elapsed for a, x in run.exposed.items() if x > 0}
            with self._lock:
                estimate = self._estimates.pop(job.id, None)
                if estimate is None:
                    _put(self._ended, job.id, (run.cls, exposure))
            if estimate is not None:
                self._outcome(job.id, run.cls, exposure, *estimate)
        else:
            self.skipped += 1
            with self._lock:
                self._estimates.pop(job.id, None)

    def _touch(self, shares: Mapping[str, float], now: float) -> None:
        """Bring the exposure of every job on these nodes up to ``now``."""
        for name in shares:
            for job_id in self._on.get(name, ()):
                run = self._runs[job_id]
                dt = now - run.at
                if dt > 0:
                    for a, x in run.exposure.items():
                        run.exposed[a] = run.exposed.get(a, 0.0) + x * dt
                run.at = max(run.at, now)

    def _retouch(self, shares: Mapping[str, float], also: int | None) -> None:
        """The exposure now of every job on these nodes (and of ``also``)."""
        done: set[int] = set()
        for name in shares:
            for job_id in self._on.get(name, ()):
                if job_id not in done:
                    done.add(job_id)
                    self._repace(job_id)
        if also is not None and also not in done:
            self._repace(also)

    def _repace(self, job_id: int) -> None:
        run = self._runs[job_id]
        exposure: dict[str, float] = {}
        for name in run.shares:
            per_class: dict[str, float] = {}
            for other in self._on.get(name, ()):
                o = self._runs[other]
                if other != job_id and o.cls is not None:
                    per_class[o.cls] = per_class.get(o.cls, 0.0) + o.shares.get(name, 0.0)
            for a, s in per_class.items():
                exposure[a] = max(exposure.get(a, 0.0), min(s, 1.0))
        if exposure != run.exposure or not run.timeline:
            timeline = run.timeline
            timeline.append((run.at, exposure))
            if len(timeline) > MAX_CHANGES:  # the older half thinned, as feedback series are
                half = len(timeline) // 2
                timeline[:half] = timeline[:half:2]
        run.exposure = exposure

    # -- outcomes from the job's own feedback (event loop) ---------------------------------
    async def _from_feedback(
        self, job: Job, cls: str, timeline: Sequence[tuple[float, dict[str, float]]]
    ) -> None:
        """Learn from the drop of the job's reported rate while it shared its node."""
        try:
            series = await self.cluster.db(self.cluster.store.job_feedback, [job.id])
        except Exception as err:
            log.warning("job %s's feedback was not read (%s)", job.display_id, err)
            return
        found = feedback_outcome(cls, timeline, dict(job.spec.feedback_goals), series)
        if found is not None:
            self.from_feedback += 1
            self.learn(job.id, found)

    # -- outcomes (the predictor's thread) ------------------------------------------------
    def run_finished(
        self, job: Job, predicted_s: float, model_version: int, runtime: float
    ) -> None:
        """A run ended, with the run time the predictor gave it at its start
        (``PredictionService.on_run_finished``)."""
        with self._lock:
            found = self._ended.pop(job.id, None)
            if found is None:  # (its end has not reached the event loop's listener yet)
                _put(self._estimates, job.id, (predicted_s, model_version, runtime))
                return
        self._outcome(job.id, *found, predicted_s, model_version, runtime)

    def _outcome(
        self,
        job_id: int,
        cls: str,
        exposure: dict[str, float],
        predicted_s: float,
        model_version: int,
        runtime: float,
    ) -> None:
        if model_version <= 0 or not predicted_s > 0 or not math.isfinite(predicted_s):
            self.skipped += 1  # a time limit, not an estimate of its pace
            return
        self.learn(job_id, Outcome(cls, exposure, runtime / predicted_s))

    def learn(self, job_id: int, outcome: Outcome) -> None:
        """Check the model on ``outcome``, then learn it."""
        now = self.cluster.clock.now()
        with self._lock:
            model = self.model
            if outcome.victim not in model.classes:
                return
            bias = math.exp(model.bias(outcome.victim))
            predicted = bias * model.predict(outcome.victim, outcome.exposure)
            if model.observe(outcome):
                self.checked.append(
                    Checked(
                        job_id, outcome.victim, outcome.slowdown, predicted, bias,
                        dict(outcome.exposure), now,
                    )
                )  # fmt: skip
                self.learnt += 1
                self._stale = self._dirty = True

    # -- reading ---------------------------------------------------------------------------
    def view(self) -> DissonanceView:
        return self._view

    def _set_view(self) -> None:
        with self._lock:
            matrix = self.model.matrix()
        job_class = {j: r.cls for j, r in self._runs.items() if r.cls is not None}
        self._view = DissonanceView(
            matrix, job_class, dict(self._identities), frozenset(self._protected)
        )
        self._stale = False

    def matrix(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
        with self._lock:
            return self.model.matrix(), self.model.observations()

    def evaluation(self) -> dict[str, Any]:
        """MAE of the model's predictions over the last outcomes, each predicted before
        the model learnt it, against the baseline (no interference), overall and per
        class."""
        with self._lock:
            checked = list(self.checked)
        return evaluate(checked)


def evaluate(checked: Sequence[Checked]) -> dict[str, Any]:
    def mae(rows: Sequence[Checked]) -> dict[str, Any]:
        n = len(rows)
        if not n:
            return {"outcomes": 0, "mae": None, "baseline_mae": None}
        return {
            "outcomes": n,
            "mae": sum(abs(c.predicted - c.observed) for c in rows) / n,
            "baseline_mae": sum(abs(c.baseline - c.observed) for c in rows) / n,
        }

    shared = [c for c in checked if any(x > 0 for x in c.exposure.values())]
    return {
        "all": mae(checked),
        "shared": mae(shared),  # the outcomes with some neighbour: where the model matters
        "by_class": {v: mae([c for c in checked if c.victim == v]) for v in CLASSES},
    }


def feedback_outcome(
    cls: str,
    timeline: Sequence[tuple[float, Mapping[str, float]]],
    goals: Mapping[str, str],
    series: Sequence[FeedbackSeries],
) -> Outcome | None:
    """The outcome a job's feedback gives: for the first metric with a goal that has
    at least ``MIN_POINTS`` points reported alone and as many beside a neighbour of a
    known class, the slowdown of each shared point against the median alone (the
    median value over the shared one for ``max``, the other way for ``min``), their
    geometric mean, and the mean exposure at those points; None without such a metric."""
    times = [t for t, _ in timeline]
    for s in series:
        goal = goals.get(s.metric)
        if goal is None:
            continue
        alone: list[float] = []
        shared: list[tuple[float, Mapping[str, float]]] = []
        for t, value in s.points:
            k = bisect.bisect_right(times, t) - 1
            then = timeline[k][1] if k >= 0 else {}
            if value > 0 and then:
                shared.append((value, then))
            elif value > 0:
                alone.append(value)
        if len(alone) < MIN_POINTS or len(shared) < MIN_POINTS:
            continue
        base = statistics.median(alone)
        logs = [math.log(base / v if goal == "max" else v / base) for v, _ in shared]
        mean: dict[str, float] = {}
        for _, e in shared:
            for a, x in e.items():
                mean[a] = mean.get(a, 0.0) + x / len(shared)
        return Outcome(cls, mean, math.exp(sum(logs) / len(logs)), biased=False)
    return None


def _put(kept: dict[int, Any], key: int, value: Any, bound: int = 100_000) -> None:
    kept[key] = value
    if len(kept) > bound:
        del kept[next(iter(kept))]


def _class(job: Job) -> str | None:
    found = job.extra.get(PROFILE_CLASS)
    return found if found in CLASSES else None


def _write(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class DissonanceAwareRunner:
    """A ``PassRunner`` whose passes see the interference model's current view."""

    def __init__(self, inner: PassRunner, dissonance: DissonanceService) -> None:
        self.inner = inner
        self.dissonance = dissonance

    def run_pass(self, snapshot: ClusterSnapshot) -> PassResult:
        view = self.dissonance.view()
        return self.inner.run_pass(dataclasses.replace(snapshot, dissonance=view))

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        return self.run_pass(snapshot).plan

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]:
        return self.inner.forecast(plan)


def with_dissonance(
    snapshot: ClusterSnapshot, dissonance: DissonanceService | None
) -> ClusterSnapshot:
    """``snapshot`` with the model's view (what-if calls: ``--test-only``, explain)."""
    if dissonance is None:
        return snapshot
    return dataclasses.replace(snapshot, dissonance=dissonance.view())
