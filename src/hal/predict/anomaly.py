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
"""

from __future__ import annotations

import bisect
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
