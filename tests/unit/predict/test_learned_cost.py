"""What the learned predictor keeps, and what asking its model costs: bounded per-key
history, training rows in one window, rows that own their memory, model answers equal to
LightGBM's own, and no garbage left for a collector that a replay turns off."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import random
import tracemalloc
from collections import deque
from types import ModuleType

import numpy as np
import pytest

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.predict import LearnedPredictor
from hal.predict.features import CATEGORICAL, NAMES, History
from hal.predict.learned import _fit, _Window
from hal.predict.trees import Trees

if importlib.util.find_spec("lightgbm") is None:
    pytest.skip("lightgbm is a dependency: pip install -e .", allow_module_level=True)


@pytest.fixture(scope="module")
def lgb() -> ModuleType:
    """LightGBM, imported by the tests that use it rather than at collection, which each
    xdist worker does for every module (a second of CPU)."""
    import lightgbm

    return lightgbm


def job(jid: int, user: str, name: str, limit: int, ntasks: int = 4) -> Job:
    spec = JobSpec(user=user, script="", name=name, ntasks=ntasks)
    return Job(id=jid, spec=spec, time_limit_s=limit, submit_time=jid * 60.0)


def feed(p: LearnedPredictor, n: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    for i in range(n):
        kind = rng.choice(("short", "long"))
        runtime = (120.0 if kind == "short" else 7200.0) * rng.uniform(0.9, 1.1)
        done = job(i, f"u{rng.randrange(20)}", kind, 36_000).evolve(state=JobState.COMPLETED)
        p.observe(done, runtime)


def rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(NAMES)))
    for c in CATEGORICAL:
        x[:, c] = rng.integers(0, 30, n)
    x[rng.random(x.shape) < 0.2] = np.nan  # features a job has no history for
    return x


def test_the_model_answers_as_lightgbm_does(lgb: ModuleType) -> None:
    x = rows(3000, 1)
    booster = _fit(lgb, x, x[:, 0] + np.nan_to_num(x[:, 9]), 50)[0]
    trees = Trees(lgb, booster)
    asked = rows(500, 2)
    expected = booster.predict(asked, num_threads=1)
    assert np.array_equal(trees.many(asked), expected)
    assert [trees.one(r) for r in asked] == list(expected)
    with pytest.raises(ValueError):
        trees.one(asked[0][:-1])  # the C call would read past the row


def test_asking_the_model_leaves_no_garbage_behind(lgb: ModuleType) -> None:
    """``Booster.predict`` leaves reference cycles at every call (two ``c_void_p`` and
    two dicts); a replay runs with the collector off, so they piled up for the whole
    replay. The cycles are told by their ctypes objects: other threads of the test
    process (xdist's channel) may leave garbage of their own while the collector is off."""
    x = rows(2000, 3)
    trees = Trees(lgb, _fit(lgb, x, x[:, 0], 20)[0])
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for r in x[:200]:
            trees.one(r)
        trees.many(x)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, ctypes._SimpleCData)]
        collected = len(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not left, f"{len(left)} ctypes objects left in reference cycles"
    assert collected < 200, f"{collected} objects in cycles after 201 calls"


def test_the_training_window_keeps_the_last_rows_in_order() -> None:
    window = _Window(2500, 3)
    kept: deque[tuple[np.ndarray, float]] = deque(maxlen=2500)
    for i in range(6000):
        row = np.array([i, 2.0 * i, -i], dtype=np.float64)
        window.append(row, float(i) / 7)
        kept.append((row, float(i) / 7))
        if i in (0, 1023, 1024, 2499, 2500, 4999, 5999):
            x, y = window.arrays()
            assert len(window) == len(kept) == len(x)
            assert np.array_equal(x, np.vstack([r for r, _ in kept]))
            assert list(y) == [t for _, t in kept]


def test_rows_a_batch_caches_do_not_hold_the_batch() -> None:
    """A job's cached row (later its training row) is its own: a row of the batch's
    matrix would keep the whole matrix alive for as long as any of its jobs waits."""
    p = LearnedPredictor(min_train=200, retrain_every=200)
    feed(p, 400)
    waiting = [job(10_000 + i, f"u{i % 20}", "short", 36_000) for i in range(300)]
    p.prepare(waiting)
    cached = [p._cache[j.id][2] for j in waiting]
    assert all(row.base is None and row.flags.owndata for row in cached)


def test_the_sorted_residuals_follow_the_calibration_window() -> None:
    p = LearnedPredictor(min_train=200, retrain_every=200, calibration=300)
    feed(p, 1500)
    assert len(p._residuals) == 300
    assert p._ranked == sorted(p._residuals)


def test_a_job_names_and_shapes_history_is_a_few_floats() -> None:
    """A replay keeps history for every job name and shape ever seen (tens of thousands
    on a big trace): each costs a few hundred bytes, not a few kilobytes."""
    history = History()
    jobs = [
        job(i, f"u{i % 50}", f"n{i}", 60 + i, ntasks=1 + i % 7).evolve(state=JobState.COMPLETED)
        for i in range(10_000)
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for j in jobs:
            history.add(j, 30.0)
        per_job = (tracemalloc.get_traced_memory()[0] - before) / len(jobs)
    finally:
        tracemalloc.stop()
    assert per_job < 1_000, per_job  # a new name and a new shape each (5 kB before)
    for i in range(9):  # only the last 4 runs are kept, the count goes on
        history.add(jobs[0], 10.0 * (i + 1))
    shape = history._shapes[("u0", 60.0, 1)]
    assert shape.count == 10 and len(shape.logs) == 4
