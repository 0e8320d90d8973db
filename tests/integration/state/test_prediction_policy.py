"""The server plans with the policy the simulator measures: for the same ``[scheduler]
predictor`` and ``correction`` (``hal sim run --predictor --correction``) and the same
history, a running job that outlives its prediction is planned to end at the same
moment by the server's prediction service (``hal show job``, and the backfill planner
through the same ``SharedPredictor.planned``) as by the simulator's replay.

The simulator side is a real replay (``Simulation`` with ``hal.sim.run.make_predictor``)
of a hand-made trace: one user's 300 jobs, each starting as it arrives and all ended
before the last job, a long one, starts and outlives its prediction several times. Each
correction the replay makes is recorded as it happens. The server side is a real
``ControlPlane`` for the same configuration on SQLite, its accounting holding the same
300 runs and the long job running: at start its prediction service replays that
history into a fresh model, as the simulator trained its own, and is then asked the
long job's expected end at moments between the simulator's corrections.
"""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import JobState
from hal.predict import PinnedPredictor, planned_runtime
from hal.server.control_plane import ControlPlane
from hal.sim import ClusterModel, Simulation, load_workload, scheduler_for
from hal.sim.cluster import PARTITION
from hal.sim.engine import with_trace_fields
from hal.sim.run import make_predictor
from hal.sim.workload import TraceJob, Workload

HISTORY = 300
PROCS = 64
LONG_RUN_S, LONG_LIMIT_S = 30_000, 36_000


class Recording(PinnedPredictor):
    """The simulator's predictor, keeping the plan each expiry left a job with: (time run
    then, the run time the simulator plans it with from then on, as it works it out:
    ``planned_runtime`` at that instant of its clock). As the bench's ``TimedPinned`` it
    must stay a ``PinnedPredictor`` for the simulator to tell it of expiries."""

    def __init__(self, pinned: PinnedPredictor) -> None:
        super().__init__(pinned.inner, correction=pinned.correction)
        self.clock = VirtualClock(0.0)  # the simulation's, once it is made
        self.plans: dict[int, list[tuple[float, float]]] = {}

    def expired(self, job: Job) -> None:
        assert job.start_time is not None
        plans = self.plans.setdefault(job.id, [(0.0, planned_runtime(self, job))])
        super().expired(job)
        elapsed = self.clock.now() - job.start_time
        plans.append((elapsed, planned_runtime(self, job, elapsed)))


def trace(tmp_path: Path) -> Path:
    """One user (one executable, group and queue: the model's categorical codes do not
    depend on the order in which values are first seen), three requested times, jobs
    running a tenth to a half of them, one at a time; then the long job."""
    rng = random.Random(5)
    lines = [f"; MaxProcs: {PROCS}", f"; MaxNodes: {PROCS}"]
    t = 0
    for jid in range(1, HISTORY + 1):
        req = rng.choice((600, 3600, 7200))
        run = int(req * rng.uniform(0.1, 0.5))
        procs = rng.choice((1, 2, 4))
        f = [jid, t, -1, run, procs, -1, -1, procs, req, -1, 1, 1, 1, 1, 1, 1, -1, -1]
        lines.append(" ".join(str(v) for v in f))
        t += run + 7  # the next one arrives once this one has ended
    f = [HISTORY + 1, t, -1, LONG_RUN_S, 4, -1, -1, 4, LONG_LIMIT_S, -1, 1, 1, 1, 1, 1, 1, -1, -1]
    lines.append(" ".join(str(v) for v in f))
    path = tmp_path / "one-user.swf"
    path.write_text("\n".join(lines) + "\n")
    return path


def as_job(tj: TraceJob, cluster: ClusterModel) -> Job:
    """The job the simulator made of ``tj``: what a live job would carry."""
    return Job(
        id=tj.id,
        spec=with_trace_fields(cluster.spec_for(tj.procs, tj.user), tj),
        partition=PARTITION,
        submit_time=tj.submit,
        time_limit_s=math.ceil(tj.requested),
    )


def simulated(
    workload: Workload, predictor: str, correction: str
) -> tuple[list[tuple[float, float]], dict[int, tuple[float, float]]]:
    """The long job's plans (time run, plan: at start, then after each expiry) and
    every job's run."""
    pinned = make_predictor(predictor, workload, correction)
    assert isinstance(pinned, PinnedPredictor)
    recording = Recording(pinned)
    cluster = ClusterModel.for_procs(PROCS, 1)
    simulation = Simulation(
        workload.jobs, cluster, scheduler_for("easy-sjbf", recording), predictor=recording
    )
    recording.clock = simulation.clock
    run = simulation.run()
    runs = {o.job.id: (o.start, o.end) for o in run.outcomes}
    long = run.outcomes[-1]
    assert long.start == long.job.submit and long.end == long.start + LONG_RUN_S
    plans = recording.plans.get(long.job.id, [])
    assert plans[:1] == [(0.0, long.predicted)]  # (its plan at start)
    return plans, runs


def served(
    tmp_path: Path,
    workload: Workload,
    runs: dict[int, tuple[float, float]],
    config: HalConfig,
    elapsed: list[float],
) -> list[tuple[float, float | None] | None]:
    """The server's estimates of the long job after each of ``elapsed`` seconds."""
    cluster_model = ClusterModel.for_procs(PROCS, 1)
    jobs = []
    for tj in workload.jobs:
        start, end = runs[tj.id]
        job = as_job(tj, cluster_model)
        if tj.id == HISTORY + 1:
            jobs.append(job.evolve(state=JobState.RUNNING, start_time=start))
        else:
            jobs.append(job.evolve(state=JobState.COMPLETED, start_time=start, end_time=end))
    long = jobs[-1]
    started = long.start_time
    assert started is not None
    now = started + 1.0
    plane = ControlPlane(config, f"sqlite:///{tmp_path / 'hal.db'}", VirtualClock(now))
    store = plane.store
    store.migrate()
    with store.transaction() as tx:
        tx.reserve_job_ids(len(jobs))
        tx.insert_scripts([(1, "#!/bin/sh\n")])
        tx.insert_jobs(jobs, [1] * len(jobs))

    async def main() -> list[tuple[float, float | None] | None]:
        await plane.cluster.load()
        service = plane.predictions
        await service.start()
        try:
            for _ in range(600):
                if not service.replaying and long.id in service.at_start:
                    break
                await asyncio.sleep(0.05)
            assert service.replayed == HISTORY
            assert service.predictor.name == config.scheduler_predictor
            if config.scheduler_predictor == "learned":
                assert service.predictor.model_version() > 0  # the model plans, not avg2
            return [service.estimate(long, started + e) for e in elapsed]
        finally:
            await service.stop()
            await plane.cluster.close()

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("predictor", "correction"),
    [("learned", "default"), ("learned", "steps"), ("learned", "request"), ("avg2", "default")],
)
def test_an_outlived_prediction_ends_where_the_simulator_planned_it(
    tmp_path: Path, predictor: str, correction: str
) -> None:
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    workload = load_workload(trace(tmp_path))
    plans, runs = simulated(workload, predictor, correction)
    first = plans[0][1]
    corrected = next(p for _, p in plans if p != first)  # (it outlived its first plan)
    start = runs[HISTORY + 1][0]
    # the middle of the time each plan stood (from its expiry to the next one, or to the
    # job's end); not the second the simulator waits when, rounded, a corrected end
    # fell a hair before the instant of its expiry
    ends = [e for e, _ in plans[1:]] + [float(LONG_RUN_S)]
    stood = [
        ((e + end) / 2, plan) for (e, plan), end in zip(plans, ends, strict=True) if end - e >= 2.0
    ]
    config = HalConfig(scheduler_predictor=predictor, scheduler_correction=correction)
    estimates = served(tmp_path, workload, runs, config, [m for m, _ in stood])
    assert len(stood) >= 2
    for (moment, plan), got in zip(stood, estimates, strict=True):
        assert got == (plan, start + plan), (moment, plans)
    if correction == "default" and predictor == "learned":
        # learned's own rule, not Tsafrir's steps: the first correction is no step
        assert corrected - first not in (60.0, 300.0, 900.0, 1800.0, 3600.0)
    elif correction == "request":
        assert corrected == LONG_LIMIT_S
    else:
        assert corrected == first + 60.0
