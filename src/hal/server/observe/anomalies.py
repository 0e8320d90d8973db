"""``AnomalyDetector``: jobs running far past their prediction, nodes failing far more
often than their peers (the rules: ``hal.predict.anomaly``).

Every ``anomaly_interval_s`` (5 s) the observe plane's tick calls ``check(now)``:

* each running (or suspended) job whose prediction at start came from a model and which
  has run longer than ``max(3 × prediction, prediction + 1 h)`` is *overrunning*: a
  ``job.overrunning`` event is recorded once per run, and the alert
  ``JobOverrunningPrediction`` fires while it runs (a suspension does not end the run).
  Nothing is killed: the job still ends at its own time limit.
* each node with at least 5 jobs ended in the last hour and a failure rate (FAILED or
  NODE_FAIL) over ``3 × its peers' median + 0.2`` is *anomalous*: a ``node.anomalous``
  event when it becomes so, the alert ``NodeFailureRateAnomalous`` while it is, and with
  ``[scheduler] drain_anomalous_nodes = true`` the node is drained (once per episode;
  the reason, shown by ``hal nodes`` and ``scontrol show node``, says why). An
  operator resumes it.
* each node on which at least 5 runs on at most 4 nodes that a model predicted at
  start completed (or reached their time limit) in the last 6 hours, of at least 2
  users, with a median
  ratio of run time to prediction over 1.5 × that of the runs elsewhere and larger
  beyond chance (``InflationRule``), has its *run time inflated*: a
  ``node.runtime_inflated`` event, the alert ``NodeRuntimeInflated``, and the same
  drain. The prediction service reports each finished run to ``run_finished`` (from
  its worker thread; the check takes them on the event loop).

The per-node counts come from the cluster's job listener (O(changed jobs)); a check costs
one pass over the unfinished jobs and O(n log n) over the n nodes with recent jobs, and,
when runs ended or left the window since the last one, O(N log N) over the N runs in
the inflation window, on a worker thread (``InflationRule.judge``, 200,000 runs: about
0.21–0.23 s, which inline would hold the event loop for; ``bench/node_inflation.py
--cost``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hal.core.job import Job
from hal.core.states import JobState, NodeState
from hal.core.suspension import suspended_seconds
from hal.observe.config import ObserveConfig
from hal.predict.anomaly import (
    FAILED_STATES,
    FailureRateRule,
    InflationRule,
    NodeAnomaly,
    NodeFailures,
    NodeInflation,
    OverrunRule,
    Run,
)
from hal.server.observe.alerts import Finding
from hal.state.cluster import Cluster
from hal.state.store import EventRow

log = logging.getLogger("hal.server.observe.anomalies")
OVERRUNNING = "JobOverrunningPrediction"
NODE_FAILING = "NodeFailureRateAnomalous"
NODE_SLOW = "NodeRuntimeInflated"
DRAIN_PREFIX = "HAL anomaly: "
_IN_RUN = (JobState.RUNNING, JobState.SUSPENDED)
# runs whose length says something about the node: the job's own end or its time limit
# (a failed job's shortness is the failure rule's business)
_TIMED = frozenset({JobState.COMPLETED, JobState.TIMEOUT})

# job id → (run time predicted when it started, the predictor's model version then: 0 =
# no model), or None when no prediction was recorded for it
StartLookup = Callable[[int], tuple[float, int] | None]


@dataclass(frozen=True, slots=True)
class Overrun:
    job_id: int
    display_id: str
    user: str
    partition: str
    node: str
    predicted_s: float
    elapsed_s: float


class AnomalyDetector:
    def __init__(
        self,
        cluster: Cluster,
        settings: ObserveConfig,
        *,
        predicted_at_start: StartLookup | None = None,
        drain: bool = False,
    ) -> None:
        self.cluster = cluster
        self.predicted_at_start = predicted_at_start
        self.drain = drain
        self.overrun_rule = OverrunRule(settings.overrun_factor, settings.overrun_margin_s)
        self.failure_rule = FailureRateRule(min_jobs=settings.node_fail_min_jobs)
        self.window_s = settings.node_fail_window_s
        self.inflation_rule = InflationRule(
            min_jobs=settings.node_slow_min_jobs, factor=settings.node_slow_factor
        )
        self.slow_window_s = settings.node_slow_window_s
        self.slow: dict[str, NodeInflation] = {}  # as of the last check
        self.node_ratios: dict[str, float] = {}  # node → median ratio, as of the last check
        # (end time, run) of finished runs: appended by the prediction service's worker,
        # taken by the check; then kept within the window
        self._inbox: deque[tuple[float, Run]] = deque()
        self._runs: deque[tuple[float, Run]] = deque()
        self.overruns: dict[int, Overrun] = {}  # as of the last check
        self.nodes: dict[str, NodeAnomaly] = {}  # as of the last check
        self._reported: set[tuple[int, float]] = set()  # (job, start) with an event
        self._drained: set[str] = set()  # drained in the node's current episode
        self._ends: deque[tuple[float, tuple[str, ...], bool]] = deque()
        self._counts: dict[str, list[int]] = {}  # node → [jobs, failed] in the window
        self._seen: dict[tuple[int, float], None] = {}
        cluster.on_jobs_changed(self._on_jobs)

    # -- the listener (event loop) --------------------------------------------------------
    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            if not job.state.is_terminal or job.end_time is None or job.start_time is None:
                continue
            if job.allocation is None or not job.allocation.nodes:
                continue
            key = (job.id, job.end_time)
            if key in self._seen:
                continue
            self._seen[key] = None
            if len(self._seen) > 100_000:
                del self._seen[next(iter(self._seen))]
            failed = job.state in FAILED_STATES
            nodes = tuple(job.allocation.nodes)
            self._ends.append((job.end_time, nodes, failed))
            for node in nodes:
                count = self._counts.setdefault(node, [0, 0])
                count[0] += 1
                count[1] += failed

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        ends = self._ends
        while ends and ends[0][0] < horizon:
            _, nodes, failed = ends.popleft()
            for node in nodes:
                count = self._counts[node]
                count[0] -= 1
                count[1] -= failed
                if count[0] <= 0:
                    del self._counts[node]

    def run_finished(
        self, job: Job, predicted_s: float, model_version: int, runtime_s: float
    ) -> None:
        """A run ended that started with ``predicted_s`` from model ``model_version`` (0:
        none) and lasted ``runtime_s`` (any thread). Kept when a model predicted it and
        it completed or reached its time limit."""
        alloc = job.allocation
        if model_version <= 0 or predicted_s <= 0 or job.state not in _TIMED:
            return
        if job.end_time is None or alloc is None or not alloc.nodes:
            return
        if len(alloc.nodes) > self.inflation_rule.max_nodes:
            return  # the rule leaves it out: not kept for the window either
        run = Run(runtime_s / predicted_s, tuple(alloc.nodes), job.spec.user)
        self._inbox.append((job.end_time, run))

    # -- a check (the observe tick) -------------------------------------------------------
    async def check(self, now: float) -> None:
        events = self._check_jobs(now)
        events.extend(self._check_nodes(now))
        events.extend(await self._check_slow(now))
        if events:
            await self.cluster.record_events(events)
        # an episode that ended (under both rules) may drain again next time
        self._drained &= set(self.nodes) | set(self.slow)
        if self.drain:
            await self._drain_nodes()

    def _check_jobs(self, now: float) -> list[EventRow]:
        lookup = self.predicted_at_start
        events: list[EventRow] = []
        current: dict[int, Overrun] = {}
        if lookup is None:
            self.overruns = current
            return events
        unfinished = self.cluster.unfinished
        # (the active jobs the mirror keeps, in id order: not a walk of the whole queue)
        for job in (unfinished[i] for i in sorted(self.cluster.active_ids)):
            # a suspended job is still in its run (its elapsed time stands still): its
            # alert neither resolves nor fires again around a suspension
            if job.state not in _IN_RUN or job.start_time is None:
                continue
            found = lookup(job.id)
            if found is None:
                continue
            predicted, version = found
            # run time, as its agent counts it toward the limit: suspensions left out
            elapsed = now - job.start_time - suspended_seconds(job, now)
            if not self.overrun_rule.overrunning(predicted, elapsed, model=version > 0):
                continue
            node = job.allocation.nodes[0] if job.allocation and job.allocation.nodes else ""
            current[job.id] = Overrun(
                job.id, job.display_id, job.spec.user, job.partition, node, predicted, elapsed
            )
            key = (job.id, job.start_time)
            if key not in self._reported:
                self._reported.add(key)
                events.append(
                    EventRow(
                        now,
                        "job.overrunning",
                        job_id=job.id,
                        node=node or None,
                        state=job.state.value,
                        data={
                            "predicted_s": round(predicted, 1),
                            "elapsed_s": round(elapsed, 1),
                            "model_version": version,
                        },
                    )
                )
                log.warning(
                    "job overrunning its prediction",
                    extra={"job_id": job.display_id, "predicted_s": round(predicted, 1),
                           "elapsed_s": round(elapsed, 1)},
                )  # fmt: skip
        self._reported = {k for k in self._reported if k[0] in current}
        self.overruns = current
        return events

    def _check_nodes(self, now: float) -> list[EventRow]:
        self._expire(now)
        counts = self.window_counts()
        found = {a.node: a for a in self.failure_rule.anomalous(counts)}
        new = {
            node: {
                "jobs": a.jobs,
                "failed": a.failed,
                "failure_rate": round(a.rate, 4),
                "peer_median": round(a.peer_median, 4),
            }
            for node, a in found.items()
            if node not in self.nodes
        }
        self.nodes = found
        return _node_events(now, "node.anomalous", new, "node failure rate anomalous")

    async def _check_slow(self, now: float) -> list[EventRow]:
        runs, inbox = self._runs, self._inbox
        changed = bool(inbox)
        while inbox:
            runs.append(inbox.popleft())
        horizon = now - self.slow_window_s
        while runs and runs[0][0] < horizon:
            runs.popleft()
            changed = True
        if not changed:
            return []  # the same runs: the same verdicts
        # on a worker thread: a quarter of a second for 200,000 runs would stall the loop
        found, self.node_ratios = await asyncio.to_thread(self._judge, list(runs), horizon)
        new = {
            node: {
                "jobs": a.jobs,
                "ratio": round(a.ratio, 3),
                "peer_ratio": round(a.peer_ratio, 3),
                "p_value": float(f"{a.p_value:.3g}"),
            }
            for node, a in found.items()
            if node not in self.slow
        }
        self.slow = found
        return _node_events(now, "node.runtime_inflated", new, "node run times inflated")

    def _judge(
        self, runs: list[tuple[float, Run]], horizon: float
    ) -> tuple[dict[str, NodeInflation], dict[str, float]]:
        """The inflated nodes and every node's median ratio, from the runs that ended
        after ``horizon`` (reports arrive about in end order, not exactly)."""
        found, ratios = self.inflation_rule.judge(run for end, run in runs if end >= horizon)
        return {a.node: a for a in found}, ratios

    def _reasons(self) -> Iterable[tuple[str, str]]:
        """(node, drain reason) of each anomalous node, a node's first rule first."""
        fail_h, slow_h = self.window_s / 3600, self.slow_window_s / 3600
        for a in self.nodes.values():
            why = f"{a.failed}/{a.jobs} jobs failed in {fail_h:g} h"
            yield a.node, f"{DRAIN_PREFIX}{why}, peers' median {a.peer_median:.0%}"
        for s in self.slow.values():
            why = f"jobs ran {s.ratio:.2g}× their predicted time ({s.jobs} in {slow_h:g} h)"
            yield s.node, f"{DRAIN_PREFIX}{why}, others' {s.peer_ratio:.2g}×"

    async def _drain_nodes(self) -> None:
        from hal.state.agents import set_node_state
        from hal.state.node_reasons import server_user

        for name, reason in self._reasons():
            node = self.cluster.nodes.get(name)
            if name in self._drained or node is None or node.state is not NodeState.UP:
                continue
            self._drained.add(name)
            await set_node_state(self.cluster, name, "DRAIN", reason, user=server_user())
            log.warning("node drained", extra={"node": name, "reason": reason})

    # -- what /metrics shows (hal.server.observe.metrics) ----------------------------------------
    def window_counts(self) -> dict[str, NodeFailures]:
        """Per node: jobs ended and failed within the window, as of the last check."""
        return {n: NodeFailures(c[0], c[1]) for n, c in self._counts.items()}

    # -- alerts -----------------------------------------------------------------------------
    def findings(self, now: float) -> Iterable[Finding]:
        for o in self.overruns.values():
            yield Finding(
                OVERRUNNING,
                "warning",
                f"job {o.display_id} ({o.user}) has run {o.elapsed_s:.0f} s, over "
                f"{self.overrun_rule.factor:g}× its predicted {o.predicted_s:.0f} s: "
                "possibly hung (it still runs to its time limit)",
                {"job_id": o.display_id, "node": o.node},
            )
        for a in self.nodes.values():
            yield Finding(
                NODE_FAILING,
                "warning",
                f"node {a.node}: {a.failed} of its last {a.jobs} jobs failed "
                f"({a.rate:.0%}; peers' median {a.peer_median:.0%})",
                {"node": a.node},
            )
        hours = self.slow_window_s / 3600
        for s in self.slow.values():
            yield Finding(
                NODE_SLOW,
                "warning",
                f"node {s.node}: its {s.jobs} jobs of the last {hours:g} h ran "
                f"{s.ratio:.2g}× their predicted time in median, the runs elsewhere "
                f"{s.peer_ratio:.2g}× (rank-sum test p = {s.p_value:.2g})",
                {"node": s.node},
            )


def _node_events(
    now: float, kind: str, new: dict[str, dict[str, Any]], message: str
) -> list[EventRow]:
    """One ``kind`` event (logged as ``message``) per node that ``new`` maps to its data."""
    for node in new:
        log.warning(message, extra={"node": node})
    return [EventRow(now, kind, node=node, data=data) for node, data in new.items()]
