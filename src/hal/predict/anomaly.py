"""The anomaly rules, as pure functions (the server's detector, ``hal.server.observe.anomalies``,
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
* **A node on which jobs run far longer than predicted** (run-time inflation: a
  throttled CPU, a failing disk, a noisy neighbour): each job that completed (or reached
  its time limit) with a model's prediction gives the ratio of its run time to that
  prediction. Predictions are often wrong by a factor of two either way, so a node's
  runs are not compared with 1 but with the runs of the same window that did not touch
  it (a job waits for its slowest node: a wide job slowed by one node shows the same
  ratio on all of its nodes, so the slow node's partners must not be its yardstick).
  A node with at least ``min_jobs`` runs (of ``min_users`` users at least: one user's
  burst, all mispredicted alike, says nothing of the node it landed on) is inflated
  when their median ratio is over ``factor`` × the others' median (an effect large
  enough to act on) and a one-sided rank-sum test (Mann-Whitney U) says its ratios
  are larger than the others' with a p-value under ``alpha`` (chance does not explain
  it). A whole cluster running slow flags no node. Only runs on at most ``max_nodes``
  nodes count, on either side: a job on hundreds of nodes cannot say which of them
  slowed it, and one such job mispredicted would otherwise flag every node it touched
  (on CEA-Curie's first 30,000 jobs, thousands of false alarms).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
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
class Run:
    """A finished run: its run time / its predicted run time, its nodes, its user."""

    ratio: float
    nodes: Sequence[str]
    user: str


def by_node(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """``runs`` per node they ran on."""
    out: dict[str, list[Run]] = {}
    for run in runs:
        for node in run.nodes:
            out.setdefault(node, []).append(run)
    return out


@dataclass(frozen=True, slots=True)
class NodeInflation:
    node: str
    jobs: int
    ratio: float  # the median of run time / prediction of its jobs
    peer_ratio: float  # the same over the runs that did not touch it
    p_value: float  # of its ratios being no larger than those (rank-sum test)


@dataclass(frozen=True, slots=True)
class InflationRule:
    min_jobs: int = 5
    factor: float = 1.5
    alpha: float = 1e-5
    min_users: int = 2
    max_nodes: int = 4

    def anomalous(self, runs: Iterable[Run]) -> list[NodeInflation]:
        """The nodes whose runs are inflated against the runs that did not touch them, by
        name (runs on more than ``max_nodes`` nodes are left out)."""
        return self.judge(runs)[0]

    def judge(self, runs: Iterable[Run]) -> tuple[list[NodeInflation], dict[str, float]]:
        """``anomalous``'s nodes, and every node's median ratio (the detector's gauge),
        from one grouping of the runs. Each run counts once; O(N log N) for N runs and
        their nodes."""
        runs = [r for r in runs if len(r.nodes) <= self.max_nodes]
        pool = sorted(r.ratio for r in runs)
        out: list[NodeInflation] = []
        medians: dict[str, float] = {}
        for node, its_runs in sorted(by_node(runs).items()):
            own = sorted(r.ratio for r in its_runs)
            ratio = medians[node] = statistics.median(own)
            if len(own) < self.min_jobs or len(pool) - len(own) < self.min_jobs:
                continue  # too few runs on it, or too few elsewhere to compare with
            peer_ratio = _median_less(pool, own)
            if ratio <= self.factor * peer_ratio:
                continue
            if len({r.user for r in its_runs}) < self.min_users:
                continue  # one user's jobs, all mispredicted alike, say nothing of the node
            p = rank_sum_p(pool, own)
            if p < self.alpha:
                out.append(NodeInflation(node, len(own), ratio, peer_ratio, p))
        return out, medians


def rank_sum_p(pool: Sequence[float], mine: Sequence[float]) -> float:
    """One-sided p-value of the Mann-Whitney U test that ``mine`` is no larger than the
    rest of sorted ``pool`` (which holds ``mine``, also sorted), by its normal
    approximation with continuity correction. Each of ``mine`` is ranked among the
    others by bisection: O(n log N)."""
    n, m = len(mine), len(pool) - len(mine)
    u = 0.0
    for x in mine:
        below = bisect.bisect_left(pool, x) - bisect.bisect_left(mine, x)
        ties = bisect.bisect_right(pool, x) - bisect.bisect_left(pool, x)
        ties -= bisect.bisect_right(mine, x) - bisect.bisect_left(mine, x)
        u += below + ties / 2
    sd = math.sqrt(n * m * (n + m + 1) / 12)
    z = (u - n * m / 2 - 0.5) / sd
    return 0.5 * math.erfc(z / math.sqrt(2))


def _median_less(pool: Sequence[float], mine: Sequence[float]) -> float:
    """The median of sorted ``pool`` less the sorted values ``mine`` (all in it)."""
    m = len(pool) - len(mine)

    def kth(k: int) -> float:  # the k-th smallest (from 0) of the pool less mine
        lo, hi = 0, len(pool) - 1
        while lo < hi:  # the first index whose value has more than k others ≤ it
            mid = (lo + hi) // 2
            if bisect.bisect_right(pool, pool[mid]) - bisect.bisect_right(mine, pool[mid]) > k:
                hi = mid
            else:
                lo = mid + 1
        return pool[lo]

    if m % 2:
        return kth(m // 2)
    return (kth(m // 2 - 1) + kth(m // 2)) / 2


@dataclass(frozen=True, slots=True)
class CanaryVerdict:
    """Why a canary version fails markedly more often than the version before it."""

    canary_jobs: int
    canary_failed: int
    previous_jobs: int
    previous_failed: int
    canary_rate: float
    previous_rate: float
    threshold: float  # the rate past which the canary is bad (``factor × previous + margin``)
    p_value: float  # of its failures being no more frequent (rank-sum test)


@dataclass(frozen=True, slots=True)
class CanaryRule:
    """A canary version against the version it replaces, on the jobs that named the same
    alias since the canary began: bad when both have at least ``min_jobs`` ended jobs, the
    canary's failure rate exceeds ``factor × the previous rate + margin`` (the node rule's
    effect size), and the one-sided rank-sum test on the jobs' outcomes (1 failed, 0
    not) says the canary's are worse with a p-value under ``alpha``."""

    min_jobs: int = 5
    factor: float = 3.0
    margin: float = 0.2
    alpha: float = 0.01

    def judge(self, canary: NodeFailures, previous: NodeFailures) -> CanaryVerdict | None:
        if canary.jobs < self.min_jobs or previous.jobs < self.min_jobs:
            return None
        threshold = self.factor * previous.rate + self.margin
        if canary.rate <= threshold:
            return None
        mine = [0.0] * (canary.jobs - canary.failed) + [1.0] * canary.failed
        others = [0.0] * (previous.jobs - previous.failed) + [1.0] * previous.failed
        p = rank_sum_p(sorted(mine + others), mine)
        if p >= self.alpha:
            return None
        return CanaryVerdict(
            canary.jobs,
            canary.failed,
            previous.jobs,
            previous.failed,
            canary.rate,
            previous.rate,
            threshold,
            p,
        )
