"""A prediction never kills anyone: over random workloads replayed with every predictor
(including ones that under-predict wildly), each job runs exactly min(its run time, its
requested time) — the time it asked for is always honoured, whatever was planned."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.predict import (
    Avg2Predictor,
    LearnedPredictor,
    PinnedPredictor,
    Predictor,
    UserPredictor,
)
from hal.sim import ClusterModel, Simulation, scheduler_for
from hal.sim.swf import SwfRecord
from hal.sim.workload import TraceJob
from hal.testing.examples import examples

# (whether it is installed, not imported: its import, pandas' and scipy's with it, cost each
# pytest-xdist worker 0.4 s of CPU at collection; the tests that train import it)
if importlib.util.find_spec("lightgbm") is None:
    pytest.skip("lightgbm is a dependency: pip install -e .", allow_module_level=True)


class Tiny:
    """Predicts one second for everything: the most dangerous plan there is."""

    name = "tiny"

    def predict(self, job: Job) -> float:
        return 1.0

    def observe(self, job: Job, runtime_s: float) -> None:
        return None


jobs_strategy = st.lists(
    st.tuples(
        st.integers(0, 500),  # submit gap
        st.integers(1, 3000),  # run time
        st.integers(1, 8),  # processors
        st.integers(1, 3000),  # requested time
        st.integers(1, 4),  # user
    ),
    min_size=1,
    max_size=60,
)


def trace(rows: list[tuple[int, int, int, int, int]]) -> tuple[TraceJob, ...]:
    out, t = [], 0.0
    for i, (gap, run, procs, req, user) in enumerate(rows, start=1):
        t += gap
        rec = SwfRecord(i, t, -1, run, procs, -1, -1, procs, req, -1, 1, user, 1, 1, 1, 1, -1, -1)
        out.append(TraceJob(i, t, float(run), procs, float(req), user, rec))
    return tuple(out)


def predictors() -> list[Predictor]:
    # learned pinned with its own expiry correction (the simulator's default for it), and
    # a tiny prediction re-planned to the request on expiry
    return [
        UserPredictor(),
        Avg2Predictor(),
        LearnedPredictor(min_train=10),
        PinnedPredictor(LearnedPredictor(min_train=10, min_tail=1), correction="model"),
        PinnedPredictor(Tiny(), correction="request"),
        Tiny(),
    ]


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=jobs_strategy, policy=st.sampled_from(["easy", "conservative", "easy-sjbf"]))
def test_every_job_runs_its_full_time_whatever_the_prediction(
    rows: list[tuple[int, int, int, int, int]], policy: str
) -> None:
    jobs = trace(rows)
    for predictor in predictors():
        run = Simulation(
            jobs, ClusterModel.for_procs(8), scheduler_for(policy, predictor), predictor=predictor
        ).run()
        for o in run.outcomes:
            # (a start at a predicted end is a fraction of a second: float rounding only)
            expected = min(o.job.run, o.job.requested)
            assert o.end - o.start == pytest.approx(expected, abs=1e-6), (predictor.name, o)
            assert o.start >= o.job.submit
