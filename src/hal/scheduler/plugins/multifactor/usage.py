"""``UsageLedger``: fair-share usage with exponential decay (``PriorityDecayHalfLife``).

Usage is charged per association (account, user) at a *rate* while a job runs: its
allocated CPUs plus ``gpu_weight`` per GPU (billing units per second). With half-life
``h``, a unit charged at time ``x`` counts ``2^(-(t - x)/h)`` at time ``t``, so a run
from ``s`` to ``e`` at rate ``r`` is worth, at ``t >= e``::

    r · h/ln 2 · (2^(-(t-e)/h) - 2^(-(t-s)/h))

a closed form: the ledger needs no periodic decay thread and gives the same number
whether it was built incrementally or recomputed from accounting after a restart. The
ledger keeps the finished runs' total as of a reference time and rescales it by
``2^(-Δ/h)`` when time moves on (``h = 0``: no decay, plain billing-seconds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from hal.core.job import Allocation, Job

Assoc = tuple[str, str]  # (account, user)


def billing_rate(job: Job, gpu_weight: float) -> float:
    """Billing units per second the job is charged while it holds ``job.allocation``."""
    return allocation_rate(job.allocation, gpu_weight)


def allocation_rate(allocation: Allocation | None, gpu_weight: float) -> float:
    """Billing units per second of holding ``allocation`` (none: nothing)."""
    if allocation is None:
        return 0.0
    total = allocation.total()
    return float(total.cpus) + gpu_weight * float(total.gpus)


class UsageLedger:
    def __init__(self, half_life_s: float, start: float = 0.0) -> None:
        if half_life_s < 0:
            raise ValueError("the decay half-life must not be negative")
        self.half_life_s = half_life_s
        self._ref = start
        self._finished: dict[Assoc, float] = {}

    def _decay(self, dt: float) -> float:
        """The factor a value loses over ``dt`` seconds."""
        if self.half_life_s == 0:
            return 1.0
        return float(2.0 ** (-dt / self.half_life_s))

    def run_usage(self, rate: float, start: float, end: float, at: float) -> float:
        """What a run from ``start`` to ``end`` at ``rate`` is worth at time ``at``."""
        end = min(end, at)
        if end <= start or rate <= 0:
            return 0.0
        h = self.half_life_s
        if h == 0:
            return rate * (end - start)
        return rate * h / math.log(2) * (self._decay(at - end) - self._decay(at - start))

    def advance(self, now: float) -> None:
        """Move the reference time to ``now`` (never backwards), decaying the totals."""
        if now <= self._ref:
            return
        factor = self._decay(now - self._ref)
        self._ref = now
        if factor != 1.0:
            for key in self._finished:
                self._finished[key] *= factor

    def record(self, assoc: Assoc, rate: float, start: float, end: float) -> None:
        """Charge a finished run. Runs that end after the reference time move it."""
        self.advance(end)
        value = self.run_usage(rate, start, end, self._ref)
        if value > 0:
            self._finished[assoc] = self._finished.get(assoc, 0.0) + value

    def totals(
        self, now: float, running: Iterable[tuple[Assoc, float, float]] = ()
    ) -> Mapping[Assoc, float]:
        """Decayed usage per association at ``now``: the finished runs plus the
        ``running`` ones given as (assoc, rate, start)."""
        self.advance(now)  # a clock stepped backwards reads the totals as of the last time
        out = dict(self._finished)
        for assoc, rate, start in running:
            value = self.run_usage(rate, start, now, now)
            if value > 0:
                out[assoc] = out.get(assoc, 0.0) + value
        return out
