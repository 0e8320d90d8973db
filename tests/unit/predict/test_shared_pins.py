"""``SharedPredictor`` (the server's): a running job keeps the prediction it was first
planned with while the model learns from other jobs; a requeued run is predicted afresh;
the expiry correction still applies."""

from __future__ import annotations

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.predict import Avg2Predictor
from hal.predict.protocol import planned_runtime
from hal.predict.shared import SharedPredictor


def job(jid: int, limit: int = 3600) -> Job:
    return Job(id=jid, spec=JobSpec(user="ann", script=""), time_limit_s=limit)


def test_a_running_job_keeps_its_prediction_until_it_ends() -> None:
    shared = SharedPredictor(Avg2Predictor())
    shared.observe(job(1), 100.0)
    running = job(2).evolve(state=JobState.RUNNING, start_time=1000.0)
    assert shared.predict(running) == 100.0
    shared.observe(job(3), 300.0)  # avg2 is now 200 for ann
    assert shared.predict(job(4)) == 200.0  # a waiting job: what is known now
    assert shared.predict(running) == 100.0  # the running one: as planned
    assert shared.try_planned_runtime(running) == 100.0  # hal show agrees with backfill
    # outlived: the stepwise correction extends the pinned value (Tsafrir's first step)
    assert planned_runtime(shared, running, elapsed_s=150.0) == 100.0 + 60.0
    again = running.evolve(start_time=5000.0)  # requeued and started again
    assert shared.predict(again) == 200.0
    shared.unpin(running)
    shared.replace(Avg2Predictor())  # a rebuilt model: pins of running jobs survive it
    assert shared.predict(again) == 200.0
