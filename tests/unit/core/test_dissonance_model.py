"""The interference model learns a known matrix from synthetic outcomes."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator

import pytest

from hal.core.dissonance import PRIOR, DissonanceModel, Outcome
from hal.core.profiles import CLASSES


def _truth(seed: int) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    return {v: {a: rng.uniform(1.0, 2.5) for a in CLASSES} for v in CLASSES}


def _outcomes(
    truth: dict[str, dict[str, float]], n: int, seed: int, noise: float = 0.05
) -> Iterator[Outcome]:
    """Jobs beside a random mix of neighbours; slowdown by the true matrix, times a
    per-class solo-estimate bias and log-normal noise."""
    rng = random.Random(seed)
    bias = {v: rng.uniform(0.8, 1.2) for v in CLASSES}
    for _ in range(n):
        v = rng.choice(CLASSES)
        exposure = {a: rng.random() * 0.6 for a in rng.sample(CLASSES, rng.randint(0, 3))}
        log_s = sum(e * math.log(truth[v][a]) for a, e in exposure.items())
        s = bias[v] * math.exp(log_s + rng.gauss(0.0, noise))
        yield Outcome(v, exposure, s)


def test_unseen_pairs_read_the_prior() -> None:
    model = DissonanceModel()
    assert model.slowdown("cpu", "memory") == pytest.approx(PRIOR)
    assert all(n == 0 for row in model.observations().values() for n in row.values())


@pytest.mark.parametrize("seed", [1, 2])
def test_converges_on_a_known_matrix(seed: int) -> None:
    truth = _truth(seed)
    model = DissonanceModel(forget=1.0)
    learnt = model.observe_all(_outcomes(truth, 20_000, seed))
    assert learnt == 20_000
    worst = max(abs(model.slowdown(v, a) - truth[v][a]) for v in CLASSES for a in CLASSES)
    assert worst < 0.06
    # every cell was seen, and counted
    assert min(n for row in model.observations().values() for n in row.values()) > 1000


def test_error_falls_with_more_outcomes() -> None:
    truth = _truth(3)
    errors = []
    for n in (100, 1_000, 10_000):
        model = DissonanceModel()
        model.observe_all(_outcomes(truth, n, 3, noise=0.1))
        errors.append(
            sum(abs(model.slowdown(v, a) - truth[v][a]) for v in CLASSES for a in CLASSES)
        )
    assert errors[0] > errors[1] > errors[2]


def test_predict_multiplies_the_cells() -> None:
    truth = _truth(4)
    model = DissonanceModel(forget=1.0)
    model.observe_all(_outcomes(truth, 20_000, 4, noise=0.01))
    exposure = {"memory": 0.5, "io": 0.25}
    want = truth["cpu"]["memory"] ** 0.5 * truth["cpu"]["io"] ** 0.25
    assert model.predict("cpu", exposure) == pytest.approx(want, rel=0.03)
    assert model.predict("cpu", {}) == 1.0


def test_export_and_load_round_trip() -> None:
    model = DissonanceModel()
    model.observe_all(_outcomes(_truth(5), 500, 5))
    again = DissonanceModel.load(json.loads(json.dumps(model.export())))
    assert again.matrix() == model.matrix()
    assert again.observations() == model.observations()


def test_bad_outcomes_and_bad_exports_are_refused() -> None:
    model = DissonanceModel()
    assert not model.observe(Outcome("gpu", {}, 1.2))  # not a class it has
    assert not model.observe(Outcome("cpu", {}, float("nan")))
    assert not model.observe(Outcome("cpu", {}, -1.0))
    with pytest.raises(ValueError, match="format"):
        DissonanceModel.load({"format": 99})
    with pytest.raises(ValueError, match="missing"):
        DissonanceModel.load({"format": 1, "classes": ["cpu"]})


def test_unbiased_outcomes_leave_the_bias_alone() -> None:
    """Feedback outcomes (against the job's own pace alone) carry no bias: learnt from
    them only, the class's bias stays 0 while the cell is learnt."""
    model = DissonanceModel(forget=1.0)
    for _ in range(200):
        model.observe(Outcome("memory", {"memory": 0.5}, 1.5, biased=False))
    assert model.bias("memory") == pytest.approx(0.0, abs=1e-3)
    assert model.slowdown("memory", "memory") == pytest.approx(1.5**2, rel=0.02)
