"""``SharedPredictor`` (the server's) over the planning policy ``planning_predictor``
builds: a running job keeps the prediction it was first planned with while the model
learns from other jobs; a requeued run is predicted afresh; the expiry correction still
applies."""

from __future__ import annotations

import random

import pytest

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.predict import Avg2Predictor, LearnedPredictor, PinnedPredictor, planning_predictor
from hal.predict.protocol import planned_runtime
from hal.predict.shared import SharedPredictor
from hal.scheduler.plugins.backfill.plugin import Backfill


def job(jid: int, limit: int = 3600) -> Job:
    return Job(id=jid, spec=JobSpec(user="ann", script=""), time_limit_s=limit)


def learned_job(jid: int, user: str, name: str, limit: int) -> Job:
    return Job(id=jid, spec=JobSpec(user=user, script="", name=name, ntasks=4), time_limit_s=limit)


def feed(p: LearnedPredictor, n: int) -> None:
    """Users whose jobs run about as long as their name says (2 min or 2 h, ±10 %)."""
    rng = random.Random(1)
    for i in range(n):
        kind = rng.choice(("short", "long"))
        runtime = (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1)
        done = learned_job(i, f"u{rng.randrange(20)}", kind, 36_000)
        p.observe(done.evolve(state=JobState.COMPLETED, submit_time=i * 60.0), runtime)


def test_a_running_job_keeps_its_prediction_until_it_ends() -> None:
    shared = SharedPredictor(planning_predictor("avg2"))
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
    shared.replace(Avg2Predictor())  # a rebuilt model: pins of running jobs survive it
    assert shared.predict(again) == 200.0
    shared.forget(again.id)  # requeued again: its next run is predicted afresh
    assert shared.predict(again.evolve(start_time=9000.0)) == 3600.0  # (the new model)


def test_learned_corrects_an_outlived_prediction_with_its_own_rule() -> None:
    """With ``learned`` the server re-predicts a running job that has outlived its plan
    as the simulator does at the instant it expires (``LearnedPredictor.extended`` of
    the plan it outlived, the "model" correction), pins that, and re-predicts from the
    first prediction when it expires again; the backfill plugin and ``hal show`` read
    the same value."""
    pytest.importorskip("lightgbm", reason="lightgbm is a dependency: pip install -e .")
    model = LearnedPredictor(min_train=200, retrain_every=200, under_rate=0.5)
    feed(model, 1200)
    shared = SharedPredictor(PinnedPredictor(model, correction="model"))
    running = learned_job(5_000, "u3", "long", 36_000).evolve(
        state=JobState.RUNNING, start_time=1_000.0
    )
    first = shared.predict(running)
    assert 3_000 < first < 20_000, first  # the model knows u3's "long" jobs
    elapsed = first * 1.02
    again = shared.planned(running, elapsed)
    assert again == model.extended(running, first, first)  # as of the instant it expired
    assert again != planned_runtime(model, running, elapsed)  # not Tsafrir's step
    assert elapsed < again < 36_000
    assert shared.predict(running) == again  # pinned: every reader sees it
    assert shared.try_planned_runtime(running, elapsed + 1) == again  # not yet outlived
    plugin = Backfill(None, predictor=shared)
    assert plugin.runtime(running, elapsed + 1) == again
    later = again + 5.0  # expired once more: re-predicted from the first prediction
    assert plugin.runtime(running, later) == model.extended(running, first, again)
    rerun = running.evolve(start_time=90_000.0)  # requeued: its new run is predicted afresh
    assert shared.planned(rerun, 10.0) == model.predict(rerun)


def test_a_predictor_without_its_own_rule_still_gets_the_steps() -> None:
    shared = SharedPredictor(planning_predictor("avg2", "model"))
    shared.observe(job(1), 100.0)
    running = job(2).evolve(state=JobState.RUNNING, start_time=0.0)
    assert shared.planned(running, 150.0) == 160.0
    assert Backfill(None, predictor=shared).runtime(running, 350.0) == 100.0 + 300.0
