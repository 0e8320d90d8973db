"""Which kinds of work clash: the interference model, learned from what happened.

Jobs are put in a handful of classes by their measured behaviour (``hal.core.profiles``:
cpu, memory, io, network, light). The model holds one number per *ordered* pair of
classes (victim, aggressor): how much slower a job of the victim class runs while a job
of the aggressor class holds its whole node beside it (1.0: not at all; 1.5: half as
fast again). Pairs never seen start at ``prior`` (a mild 1.05: sharing a node is never
quite free), and each cell counts the observations behind it.

**What it learns from.** An *outcome* is one job's observed slowdown (its run time over
the time it would have taken alone: its solo estimate; or the drop of the rate it
reported through the feedback API while it shared its node, against the rate it
reported alone) and its *exposure*: per aggressor class, the share
of its nodes that jobs of that class held, averaged over its run time (a node half held
by memory-bound jobs for the whole run is 0.5 of ``memory``; a job alone is exposed to
nothing). The model is log-linear, per victim class ``v``::

    log(observed slowdown) = bias[v] + sum over classes a of exposure[a] * log(M[v][a])

``bias`` soaks up what is not interference (a solo estimate that is always a bit short
or long for that class; a feedback outcome, measured against the job itself, has none:
``Outcome.biased``); the predicted slowdown is the product without it. Each victim
class keeps the sufficient statistics of a ridge regression (``A = Σ x xᵀ``,
``b = Σ x y``, ``x = (1, exposure...)``), pulled toward the prior with the weight of
``strength`` observations, and discounted by ``forget`` at each new observation so
that the model follows a cluster whose work changes (0.999: the last few thousand
outcomes of a class count). Solving is a (classes + 1)-square system: bounded, whatever
the number of jobs.

A ``DissonanceView`` is the model at one moment for the scheduler's ``dissonance`` score
plugin: the matrix, the class of each running job and of each workload identity seen
before, and which running jobs asked to be protected (latency-sensitive).

Pure: imports nothing outside the standard library and ``hal.core``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hal.core.profiles import CLASSES

PRIOR = 1.05  # a pair never seen: sharing a node costs a little
STRENGTH = 1.0  # the prior weighs as much as one fully exposed observation
FORGET = 0.999  # each observation of a class discounts its older ones by this much
# observed slowdowns are clipped to this range before learning: a solo estimate that was
# ten times off says nothing about the neighbours
LOW, HIGH = 0.2, 10.0
FORMAT = 1  # export format version


@dataclass(frozen=True, slots=True)
class Outcome:
    """One job's run: its class, its exposure to each aggressor class (0..1 each) and
    its observed slowdown (elapsed over solo; > 1 slower). ``biased``: measured against
    an estimate that may lean one way for the class (a predicted run time), so the
    class's bias term takes part; False for a slowdown measured against the job's own
    pace when alone (its reported feedback), which has none."""

    victim: str
    exposure: Mapping[str, float]
    slowdown: float
    biased: bool = True


class DissonanceModel:
    """The learned matrix (see the module doc). Not thread-safe: one writer."""

    def __init__(
        self,
        classes: Sequence[str] = CLASSES,
        prior: float = PRIOR,
        strength: float = STRENGTH,
        forget: float = FORGET,
    ) -> None:
        if len(set(classes)) != len(classes) or not classes:
            raise ValueError("classes must be distinct names, at least one")
        if not prior > 0 or not strength > 0 or not 0 < forget <= 1:
            raise ValueError("prior and strength must be > 0, forget in (0, 1]")
        self.classes = tuple(classes)
        self.prior = prior
        self.strength = strength
        self.forget = forget
        n = len(self.classes) + 1
        self._a = {v: [[0.0] * n for _ in range(n)] for v in self.classes}
        self._b = {v: [0.0] * n for v in self.classes}
        self._count = {v: dict.fromkeys(self.classes, 0) for v in self.classes}
        self._solved: dict[str, list[float]] = {}

    # -- learning ---------------------------------------------------------------------

    def observe(self, outcome: Outcome) -> bool:
        """Learn from one outcome; False (nothing learnt) for a victim class the model
        does not have or a slowdown that is not a positive number."""
        v = outcome.victim
        s = outcome.slowdown
        if v not in self._a or not (s > 0 and math.isfinite(s)):
            return False
        x = [1.0 if outcome.biased else 0.0]
        x += [_share(outcome.exposure.get(a, 0.0)) for a in self.classes]
        y = math.log(min(max(s, LOW), HIGH))
        a, b, f = self._a[v], self._b[v], self.forget
        for i, xi in enumerate(x):
            row = a[i]
            for j, xj in enumerate(x):
                row[j] = row[j] * f + xi * xj
            b[i] = b[i] * f + xi * y
        counts = self._count[v]
        for k, name in enumerate(self.classes, start=1):
            if x[k] > 0:
                counts[name] += 1
        self._solved.pop(v, None)
        return True

    def observe_all(self, outcomes: Iterable[Outcome]) -> int:
        return sum(self.observe(o) for o in outcomes)

    # -- reading ----------------------------------------------------------------------

    def slowdown(self, victim: str, aggressor: str) -> float:
        """The learned slowdown of ``victim`` beside a node full of ``aggressor``
        (the prior for a class the model does not have)."""
        if victim not in self._a or aggressor not in self._a:
            return self.prior
        theta = self._theta(victim)
        return math.exp(theta[1 + self.classes.index(aggressor)])

    def predict(self, victim: str, exposure: Mapping[str, float]) -> float:
        """The slowdown a job of ``victim`` should see at ``exposure``."""
        if victim not in self._a:
            return 1.0
        theta = self._theta(victim)
        log_s = sum(
            _share(exposure.get(a, 0.0)) * theta[k] for k, a in enumerate(self.classes, start=1)
        )
        return math.exp(log_s)

    def bias(self, victim: str) -> float:
        """The learned log-bias of ``victim``'s outcomes: what is not interference (a
        solo estimate that runs short or long for the class); 0 for an unknown class."""
        if victim not in self._a:
            return 0.0
        return self._theta(victim)[0]

    def matrix(self) -> dict[str, dict[str, float]]:
        """victim → aggressor → slowdown."""
        return {v: {a: self.slowdown(v, a) for a in self.classes} for v in self.classes}

    def observations(self) -> dict[str, dict[str, int]]:
        """victim → aggressor → outcomes with some exposure to it."""
        return {v: dict(c) for v, c in self._count.items()}

    def _theta(self, victim: str) -> list[float]:
        found = self._solved.get(victim)
        if found is None:
            a, b = self._a[victim], self._b[victim]
            n = len(b)
            pull = math.log(self.prior)
            lam = self.strength
            # ridge toward the prior on the cells; a whisker on the bias keeps an empty
            # class solvable (it then reads 0: no bias)
            m = [
                [a[i][j] + (lam if i == j and i > 0 else 1e-6 if i == j else 0.0)
                 for j in range(n)]
                for i in range(n)
            ]  # fmt: skip
            rhs = [b[i] + (lam * pull if i > 0 else 0.0) for i in range(n)]
            found = self._solved[victim] = _solve(m, rhs)
        return found

    # -- plain data -------------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        """Everything needed to rebuild the model, as JSON-able plain data: the
        matrix and counts (for people), and the regression's sums (for ``load``)."""
        return {
            "format": FORMAT,
            "classes": list(self.classes),
            "prior": self.prior,
            "strength": self.strength,
            "forget": self.forget,
            "matrix": self.matrix(),
            "observations": self.observations(),
            "sums": {v: {"a": self._a[v], "b": self._b[v]} for v in self.classes},
        }

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> DissonanceModel:
        """The model ``export`` wrote. Raises ``ValueError`` saying what is wrong."""
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r} is not {FORMAT}")
            model = cls(
                tuple(data["classes"]),
                float(data["prior"]),
                float(data["strength"]),
                float(data["forget"]),
            )
            n = len(model.classes) + 1
            for v in model.classes:
                sums = data["sums"][v]
                a = [[float(x) for x in row] for row in sums["a"]]
                b = [float(x) for x in sums["b"]]
                if len(a) != n or any(len(row) != n for row in a) or len(b) != n:
                    raise ValueError(f"the sums of {v!r} are not {n} × {n}")
                model._a[v], model._b[v] = a, b
                counts = data["observations"][v]
                model._count[v] = {c: int(counts.get(c, 0)) for c in model.classes}
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not an exported interference model: missing {err}") from err
        return model


def _share(x: float) -> float:
    return min(max(float(x), 0.0), 1.0) if math.isfinite(x) else 0.0


def _solve(m: list[list[float]], rhs: list[float]) -> list[float]:
    """``m · x = rhs`` by Gaussian elimination with partial pivoting (``m`` is small,
    symmetric positive definite: the ridge makes it so)."""
    n = len(rhs)
    aug = [[*row, r] for row, r in zip(m, rhs, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(aug[r][col]))
        aug[col], aug[pivot] = aug[pivot], aug[col]
        p = aug[col][col]
        if abs(p) < 1e-300:
            continue
        for r in range(col + 1, n):
            k = aug[r][col] / p
            if k:
                row, top = aug[r], aug[col]
                for c in range(col, n + 1):
                    row[c] -= k * top[c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        p = aug[r][r]
        s = aug[r][n] - sum(aug[r][c] * x[c] for c in range(r + 1, n))
        x[r] = s / p if abs(p) >= 1e-300 else 0.0
    return x


@dataclass(frozen=True, slots=True)
class DissonanceView:
    """The model at one moment, for the scheduler (read-only).

    ``slowdown``: victim class → aggressor class → slowdown (the learned matrix).
    ``job_class``: the class of each running job whose profile put it in one.
    ``identity_class``: the class last measured for each workload identity
    (``hal.core.traffic.identity``), so a new job of a known workload has one before it
    has run. ``protected``: running jobs marked latency-sensitive."""

    slowdown: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    job_class: Mapping[int, str] = field(default_factory=dict)
    identity_class: Mapping[str, str] = field(default_factory=dict)
    protected: frozenset[int] = frozenset()

    def of(self, victim: str, aggressor: str) -> float:
        return self.slowdown.get(victim, {}).get(aggressor, 1.0)
