"""The anomaly rules, as pure functions (the server's detector, ``hal.observe.anomalies``,
feeds them and acts on their answers; nothing here kills or drains anything).

* **A job far past its prediction** (a possible hang): it has run longer than
  ``max(factor × predicted, predicted + margin)``, predicted by a model (``learned``
  with a model; a baseline's guess is too rough to call a job anomalous). Jobs still end
  only at their own time limit.
* **A node whose jobs fail far more often than its peers' do**: at least ``min_jobs``
  finished there within the window, and its failure rate exceeds ``factor × median`` of
  its peers' rates ``+ margin``. Peers are the *other* nodes with at least ``min_jobs``
  finished jobs: on a small cluster the node's own rate would drag the median towards
  itself (two nodes, one failing every job: the median of both is 50 %, and a rule
  against it could never fire). Without a peer to compare with, no node is anomalous.
* **A node on which jobs run far longer than predicted, against its peers** (run-time
  inflation: a throttled CPU, a failing disk, a noisy neighbour): each job that
  completed (or reached its time limit) with a model's prediction gives the ratio of its
  run time to that prediction. Predictions are often wrong by a factor of two either
  way, so one node's ratios are not compared with 1 but with the ratios of the jobs that
  ended on its peers (the other nodes with at least ``min_jobs`` such jobs) in the same
  window: a node is inflated when its median ratio is over ``factor`` × the peers'
  median, and so many of its jobs ran over that line that chance cannot explain it
  (a one-sided sign test: under the peers' own rate of crossing it, at least that
  many crossings of its ``n`` jobs has a probability under ``alpha``). A job that ran
  on several nodes counts on each of them. A whole cluster running slow flags no node.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hal.core.states import JobState

# Final states that count as a failure of the job on its nodes: a non-zero exit (or a
# launch failure) and a node failure. Time limits, cancellations and out-of-memory kills
# are the job's own doing.
FAILED_STATES = frozenset({JobState.FAILED, JobState.NODE_FAIL})


@dataclass(frozen=True, slots=True)
class OverrunRule:
    factor: float = 3.0
    margin_s: float = 3600.0

    def threshold(self, predicted_s: float) -> float:
        """Elapsed seconds past which a job predicted at ``predicted_s`` is overrunning."""
        return max(self.factor * predicted_s, predicted_s + self.margin_s)

    def overrunning(self, predicted_s: float, elapsed_s: float, *, model: bool) -> bool:
        return model and predicted_s > 0 and elapsed_s > self.threshold(predicted_s)


@dataclass(frozen=True, slots=True)
class NodeFailures:
    """One node's finished jobs within the window."""

    jobs: int
    failed: int

    @property
    def rate(self) -> float:
        return self.failed / self.jobs if self.jobs else 0.0


@dataclass(frozen=True, slots=True)
class NodeAnomaly:
    node: str
    jobs: int
    failed: int
    rate: float
    peer_median: float
    threshold: float


@dataclass(frozen=True, slots=True)
class FailureRateRule:
    min_jobs: int = 5
    factor: float = 3.0
    margin: float = 0.2

    def anomalous(self, counts: Mapping[str, NodeFailures]) -> list[NodeAnomaly]:
        """The nodes of ``counts`` whose failure rate is anomalous against their peers,
        by name."""
        rates = {n: c.rate for n, c in counts.items() if c.jobs >= self.min_jobs}
        if len(rates) < 2:
            return []
        ordered = sorted(rates.values())
        out: list[NodeAnomaly] = []
        for node in sorted(rates):
            rate = rates[node]
            median = _median_without(ordered, bisect.bisect_left(ordered, rate))
            threshold = self.factor * median + self.margin
            if rate > threshold:
                c = counts[node]
                out.append(NodeAnomaly(node, c.jobs, c.failed, rate, median, threshold))
        return out


def _median_without(ordered: Sequence[float], skip: int) -> float:
    """The median of sorted ``ordered`` without its element at ``skip``, in O(1) (so the
    rule costs O(n log n) for n nodes, not O(n²))."""
    m = len(ordered) - 1

    def at(k: int) -> float:
        return ordered[k if k < skip else k + 1]

    if m % 2:
        return at(m // 2)
    return (at(m // 2 - 1) + at(m // 2)) / 2


@dataclass(frozen=True, slots=True)
class NodeInflation:
    node: str
    jobs: int
    over: int  # of its jobs, those that ran over ``factor`` × the peers' median ratio
    ratio: float  # the median of run time / prediction of its jobs
    peer_ratio: float  # the same over its peers' jobs
    p_value: float


@dataclass(frozen=True, slots=True)
class InflationRule:
    min_jobs: int = 5
    factor: float = 2.0
    alpha: float = 1e-4

    def anomalous(self, ratios: Mapping[str, Sequence[float]]) -> list[NodeInflation]:
        """The nodes whose jobs' ratios (run time / predicted run time, per node) are
        inflated against their peers', by name. O(N log N) for N ratios in all: the
        peers' figures are read off all ratios, sorted once, less the node's own."""
        judged = {n: sorted(r) for n, r in ratios.items() if len(r) >= self.min_jobs}
        pool = sorted(x for r in judged.values() for x in r)
        out: list[NodeInflation] = []
        for node in sorted(judged):
            mine = judged[node]
            peers = len(pool) - len(mine)
            if peers == 0:
                continue
            peer_ratio = _median_less(pool, mine)
            line = self.factor * peer_ratio
            ratio = statistics.median(mine)
            if ratio <= line:
                continue
            over = len(mine) - bisect.bisect_right(mine, line)
            peers_over = len(pool) - bisect.bisect_right(pool, line) - over
            # the peers' own rate of crossing the line (+1 / +2: none of a few peers'
            # jobs crossing it is no proof that crossing it is impossible)
            p = binomial_tail(len(mine), over, (peers_over + 1) / (peers + 2))
            if p < self.alpha:
                out.append(NodeInflation(node, len(mine), over, ratio, peer_ratio, p))
        return out


def _median_less(pool: Sequence[float], mine: Sequence[float]) -> float:
    """The median of sorted ``pool`` less the sorted values ``mine`` (all in it)."""
    m = len(pool) - len(mine)

    def kth(k: int) -> float:  # the k-th smallest (from 0) of the pool less mine
        lo, hi = 0, len(pool) - 1
        while lo < hi:  # the first index whose value has more than k peers' values ≤ it
            mid = (lo + hi) // 2
            if bisect.bisect_right(pool, pool[mid]) - bisect.bisect_right(mine, pool[mid]) > k:
                hi = mid
            else:
                lo = mid + 1
        return pool[lo]

    if m % 2:
        return kth(m // 2)
    return (kth(m // 2 - 1) + kth(m // 2)) / 2


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))
