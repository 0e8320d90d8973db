"""The learned predictor on synthetic histories where the truth is known."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys

import pytest

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.predict import LearnedPredictor, planned_runtime

# looked up, not imported: the predictor imports it when it trains (collection, in each
# xdist worker, would pay a second of CPU for it)
if importlib.util.find_spec("lightgbm") is None:
    pytest.skip("lightgbm is a dependency: pip install -e .", allow_module_level=True)


def job(jid: int, user: str, name: str, limit: int, submit: float = 0.0) -> Job:
    spec = JobSpec(user=user, script="", name=name, ntasks=4)
    return Job(id=jid, spec=spec, time_limit_s=limit, submit_time=submit)


def feed(p: LearnedPredictor, n: int, seed: int = 1) -> None:
    """Users whose jobs always run about as long as their name says, with requests that
    say nothing (always 10 hours): only the learned history can tell them apart."""
    rng = random.Random(seed)
    for i in range(n):
        user = f"u{rng.randrange(20)}"
        kind = rng.choice(("short", "long"))
        runtime = (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1)
        p.observe(job(i, user, kind, 36_000, i * 60.0).evolve(state=JobState.COMPLETED), runtime)


def test_before_its_first_model_it_answers_like_avg2() -> None:
    p = LearnedPredictor(min_train=50)
    assert p.predict(job(1, "ann", "x", 3600)) == 3600.0
    p.observe(job(1, "ann", "x", 3600), 100.0)
    assert p.model_version == 0
    assert p.predict(job(2, "ann", "x", 3600)) == 100.0


def test_it_learns_what_the_requests_do_not_say() -> None:
    p = LearnedPredictor(min_train=200, retrain_every=200, under_rate=0.5)
    feed(p, 1200)
    assert p.model_version >= 2
    short = p.predict(job(10_001, "u3", "short", 36_000))
    long = p.predict(job(10_002, "u3", "long", 36_000))
    assert 60 < short < 400, short
    assert 3600 < long < 14_400, long


def test_calibration_controls_the_underprediction_rate() -> None:
    """With a target of 20 % under-predictions, a fresh stretch of the same workload runs
    past its prediction about that often (not half the time, not never)."""
    p = LearnedPredictor(min_train=200, retrain_every=300, under_rate=0.2)
    feed(p, 2000, seed=2)
    rng = random.Random(3)
    under = 0
    for i in range(500):
        kind = rng.choice(("short", "long"))
        j = job(20_000 + i, f"u{rng.randrange(20)}", kind, 36_000)
        actual = (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1)
        under += p.predict(j) < actual
    assert 0.08 <= under / 500 <= 0.35


def test_never_beyond_the_request_and_never_below_a_second() -> None:
    p = LearnedPredictor(min_train=200, retrain_every=200)
    feed(p, 400)
    assert p.predict(job(9_001, "u1", "long", 60)) == 60.0
    assert planned_runtime(p, job(9_002, "u1", "short", 36_000)) >= 1.0


def test_it_never_trains_on_a_job_before_the_job_finished() -> None:
    """Predicting is pure: asking about pending jobs adds nothing to the training data."""
    p = LearnedPredictor(min_train=200, retrain_every=200)
    feed(p, 300)
    version, trained = p.model_version, p.trained_on
    for i in range(1000):
        p.predict(job(50_000 + i, "u1", "short", 36_000))
    assert (p.model_version, p.trained_on) == (version, trained)


def test_a_batch_gives_the_same_answers_as_one_job_at_a_time() -> None:
    one, many = LearnedPredictor(min_train=200), LearnedPredictor(min_train=200)
    feed(one, 500)
    feed(many, 500)
    jobs = [job(70_000 + i, f"u{i % 20}", ("short", "long")[i % 2], 36_000) for i in range(100)]
    many.prepare(jobs)
    assert [many.predict(j) for j in jobs] == [one.predict(j) for j in jobs]


def test_a_saved_model_predicts_the_same_after_loading(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = LearnedPredictor(min_train=200, retrain_every=200)
    feed(p, 600)
    p.save(tmp_path / "learned.json")
    q = LearnedPredictor()
    assert q.load(tmp_path / "learned.json")
    q.history = p.history  # the history is rebuilt from accounting on a real restart
    j = job(80_001, "u2", "long", 36_000)
    assert q.predict(j) == p.predict(j)
    assert q.model_version == p.model_version
    assert not LearnedPredictor().load(tmp_path / "missing.json")


def test_a_loaded_model_meets_the_codes_it_was_trained_with(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """After a restart the history is replayed in another order than it was first seen
    (here: users in reverse): the categorical codes come from the model file, so the
    same job gets the same prediction."""
    p = LearnedPredictor(min_train=200, retrain_every=200)
    feed(p, 600)
    p.save(tmp_path / "learned.json")
    q = LearnedPredictor()
    for u in reversed(range(20)):  # numbered before the load, in another order
        q.history.features(job(90_000 + u, f"u{u}", "short", 36_000))
    assert q.load(tmp_path / "learned.json")
    rng = random.Random(1)
    for i in range(600):  # the same history feed(p, 600) built
        user, kind = f"u{rng.randrange(20)}", rng.choice(("short", "long"))
        runtime = (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1)
        q.history.add(job(i, user, kind, 36_000, i * 60.0), runtime)
    q.caught_up()
    for u in range(20):
        j = job(80_100 + u, f"u{u}", "long", 36_000)
        assert q.history.features(j)[5] == p.history.features(j)[5]
        assert q.predict(j) == p.predict(j)
    new = job(80_200, "newcomer", "x", 36_000)  # a value no model has seen: a fresh code
    known = {q.history.features(job(1, f"u{u}", "x", 1))[5] for u in range(20)}
    assert q.history.features(new)[5] not in known


def test_without_lightgbm_it_keeps_answering_like_avg2(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A machine without the OpenMP runtime cannot load lightgbm: no crash, no model,
    avg2's answers, and the reason is kept for `hal predict status`."""
    import sys

    monkeypatch.setitem(sys.modules, "lightgbm", None)  # makes `import lightgbm` fail
    p = LearnedPredictor(min_train=50)
    feed(p, 200)
    assert p.model_version == 0
    assert "lightgbm cannot be loaded" in p.unavailable
    p.observe(job(9_100, "zed", "x", 3600), 100.0)
    assert p.predict(job(9_101, "zed", "x", 3600)) == 100.0


def test_warm_up_loads_lightgbm_before_any_training() -> None:
    """A fresh process: the learned predictor imports lightgbm only when warmed up (the
    server does so once its first training is near) or at its first training, not at
    construction."""
    code = (
        "import sys; from hal.predict.learned import LearnedPredictor; p = LearnedPredictor(); "
        "before = 'lightgbm' in sys.modules; p.warm_up(); "
        "print(before, 'lightgbm' in sys.modules, p.unavailable or '')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_its_first_model_is_near_from_half_of_min_train_finished_jobs() -> None:
    """What the server waits for before it warms up (imports lightgbm): a fresh
    predictor's first model is not near, and is from half of ``min_train`` jobs on."""
    p = LearnedPredictor(min_train=100)
    assert not p.near_training()
    feed(p, 49)
    assert not p.near_training()
    feed(p, 1, seed=2)
    assert p.near_training()


def test_a_minimum_retrain_interval_keeps_one_model_through_a_burst(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The live server's setting: the first model as soon as there are enough jobs, then
    none until the interval has passed, however many jobs end meanwhile."""
    now = [1000.0]
    monkeypatch.setattr("hal.predict.learned.time.monotonic", lambda: now[0])
    p = LearnedPredictor(min_train=100, retrain_every=100, min_retrain_interval_s=60.0)
    feed(p, 600)
    assert p.model_version == 1
    now[0] += 61.0
    feed(p, 100, seed=2)  # the next model once the interval is over
    assert p.model_version == 2
    unthrottled = LearnedPredictor(min_train=100, retrain_every=100)
    feed(unthrottled, 600)
    assert unthrottled.model_version >= 3


def test_the_expiry_correction_reads_the_residuals_beyond_the_elapsed_time() -> None:
    """Run times here vary by ±10 %: a long job just past its prediction is planned a
    little longer (the residuals beyond it say so), a short one at least a minute more;
    one that has run three times its prediction is beyond anything seen, so it is
    planned to its request."""
    p = LearnedPredictor(min_train=200, retrain_every=200, under_rate=0.3, expiry_quantile=0.5)
    fresh = job(9_999, "u3", "short", 36_000)
    assert p.extended(fresh, 100.0, 150.0) == 36_000.0  # no model yet: the request
    feed(p, 1200)
    long = job(10_000, "u3", "long", 36_000)
    first = p.predict(long)
    again = p.extended(long, first, first * 1.02)
    assert first * 1.02 + 60 < again < first * 1.5, (first, again)
    p.expiry_quantile = 0.9  # a more cautious reading of the same tail: later
    assert again < p.extended(long, first, first * 1.02) <= 36_000
    p.expiry_quantile = 0.5
    assert p.extended(long, first, first * 3) == 36_000.0
    short = job(10_001, "u3", "short", 36_000)
    first = p.predict(short)
    assert p.extended(short, first, first * 1.02) == first * 1.02 + 60.0
    assert p.extended(job(10_002, "u3", "short", 200), first, 199.0) == 200.0  # capped


def feed_flaky(p: LearnedPredictor, n: int, seed: int = 1) -> None:
    """Like ``feed``, but a fifth of the jobs fail within a second: a short last run
    then says little about the next job, and the model learns so."""
    rng = random.Random(seed)
    for i in range(n):
        user = f"u{rng.randrange(20)}"
        kind = rng.choice(("short", "long"))
        runtime = (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1)
        if rng.random() < 0.2:
            runtime = 1.0
        p.observe(job(i, user, kind, 36_000, i * 60.0).evolve(state=JobState.COMPLETED), runtime)


def test_a_user_whose_jobs_change_is_predicted_by_avg2_until_the_model_catches_up() -> None:
    """A user whose two-hour jobs suddenly all end in a second (a burst of failing jobs;
    on HPC2N a thousand of them): the model, which has learned that one short run says
    little, keeps predicting hours; avg2 follows after two jobs, so after a few of them
    that user's jobs are predicted like avg2. Other users keep the model; when the model
    is the better one again, the user goes back to it."""
    p = LearnedPredictor(min_train=200, retrain_every=10_000, under_rate=0.5)
    alone = LearnedPredictor(min_train=200, retrain_every=10_000, under_rate=0.5, switch_window=0)
    feed_flaky(p, 1500)
    feed_flaky(alone, 1500)
    version = p.model_version
    for i in range(6):
        p.observe(job(30_000 + i, "u3", "long", 36_000), 1.0)
        alone.observe(job(30_000 + i, "u3", "long", 36_000), 1.0)
    assert p.model_version == version  # no retrain: only the switch reacts
    nxt = job(30_100, "u3", "long", 36_000)
    assert alone.predict(nxt) > 600  # the model alone still says long after six
    assert p.predict(nxt) == 1.0  # avg2's answer
    assert p.predict(job(30_101, "u4", "long", 36_000)) > 3600  # others: the model
    for i in range(4):  # long again: avg2 lags (mean of 1 s and 2 h), the model is right
        p.observe(job(30_200 + i, "u3", "long", 36_000), 7200.0)
    assert p.predict(job(30_300, "u3", "long", 36_000)) > 3600
    assert "u3" not in p._switched


def test_switch_window_zero_keeps_the_model_for_everybody() -> None:
    p = LearnedPredictor(min_train=200, retrain_every=10_000, switch_window=0)
    feed_flaky(p, 1500)
    for i in range(6):
        p.observe(job(30_000 + i, "u3", "long", 36_000), 1.0)
    assert p.predict(job(30_100, "u3", "long", 36_000)) > 60
    assert not p._switched


def replay_with_lag(p: LearnedPredictor, n: int, seed: int) -> list[float]:
    """``feed``, with the predictions of a few waiting jobs read after every finished
    job: what a replay plans with."""
    rng = random.Random(seed)
    probes = [job(90_000 + k, f"u{k}", ("short", "long")[k % 2], 36_000) for k in range(6)]
    seen: list[float] = []
    for i in range(n):
        user = f"u{rng.randrange(20)}"
        kind = rng.choice(("short", "long"))
        runtime = (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1)
        p.observe(job(i, user, kind, 36_000, i * 60.0).evolve(state=JobState.COMPLETED), runtime)
        if i % 3 == 0:
            p.prepare(probes)
        seen.extend(p.predict(j) for j in probes)
    return seen


def test_background_training_is_the_model_trained_at_its_swap_point(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A model trained on a worker thread (``train_lag``) predicts exactly what the same
    model trained on the caller's thread at its fixed swap point predicts, however slow
    the thread is (here it sleeps a random while before each model), and each model is
    used from the same finished job on: the replay does not depend on the timing."""
    import time

    import hal.predict.learned as learned

    fit = learned._fit
    jitter = random.Random(5)

    def slow_fit(*args):  # type: ignore[no-untyped-def]
        time.sleep(jitter.uniform(0.0, 0.05))
        return fit(*args)

    def run(background: bool, slow: bool) -> tuple[list[float], int]:
        monkeypatch.setattr(learned, "_fit", slow_fit if slow else fit)
        p = LearnedPredictor(min_train=100, retrain_every=150, train_lag=60, background=background)
        return replay_with_lag(p, 1000, seed=4), p.model_version

    synchronous, versions = run(background=False, slow=False)
    assert versions >= 5
    assert run(background=True, slow=False) == (synchronous, versions)
    assert run(background=True, slow=True) == (synchronous, versions)


def test_a_model_is_used_only_from_its_swap_point_on() -> None:
    """With a lag of 60 the first model (due at the 100th finished job) answers from the
    160th on; until then the predictor answers like ``avg2``. A retrain due before the
    lag runs out installs the pending model first."""
    p = LearnedPredictor(min_train=100, retrain_every=150, train_lag=60)
    feed(p, 159)
    assert p.model_version == 0 and p._training is not None
    feed(p, 1, seed=9)
    assert p.model_version == 1 and p._training is None
    q = LearnedPredictor(min_train=100, retrain_every=100, train_lag=500)
    feed(q, 100)
    assert q.model_version == 0  # training, not used yet
    feed(q, 100, seed=9)  # the next retrain is due: the first model goes in, a new starts
    assert q.model_version == 1 and q._training is not None


def test_a_damaged_model_file_is_refused_not_fatal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A model file whose JSON is whole but whose content is not what ``save`` wrote
    (its model string cut short, a field missing or of the wrong type) is refused, and
    the server trains anew from its history: LightGBM aborts the whole process on a
    damaged model string, so that one is checked before it gets there (in a child
    process here, which such an abort would kill)."""
    p = LearnedPredictor(min_train=200, retrain_every=200)
    feed(p, 600)
    path = tmp_path / "learned.json"
    p.save(path)
    good = json.loads(path.read_text())
    damaged = {
        "cut.json": {**good, "model": good["model"][: len(good["model"]) // 2]},
        "no-version.json": {k: v for k, v in good.items() if k != "model_version"},
        "bad-codes.json": {**good, "codes": [["x", "y"]]},
        "not-text.json": {**good, "model": 5},
    }
    for name, meta in damaged.items():
        (tmp_path / name).write_text(json.dumps(meta))
    code = (
        "import sys; from pathlib import Path; from hal.predict import LearnedPredictor\n"
        "print([LearnedPredictor().load(Path(a)) for a in sys.argv[1:]])\n"
    )
    names = [str(path), *(str(tmp_path / n) for n in damaged)]
    out = subprocess.run(
        [sys.executable, "-c", code, *names],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([True, False, False, False, False])
