"""The broker's aggregate counters for the control plane's Prometheus ``/metrics``.

Event counters (``BrokerTotals``) are bumped where the event happens, once per batch of
results; gauges are summed over the live sessions when a report is built (``snapshot``,
once per pool round). Nothing here is per session: ``/metrics`` labels stay low
cardinality (state, result, reason).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hal.htc import protocol as p
from hal.htc.rest import HtcStats
from hal.htc.session import Session

# Task statuses as metric label values (``timeout`` as in ``hal_jobs_finished``).
RESULT_LABEL = {p.OK: "ok", p.FAILED: "failed", p.TIMED_OUT: "timeout", p.POISON: "poison"}
# A worker job's record from launch to its job's end (``session.Worker``).
WORKER_STATES = ("pending", "loading", "ready", "draining", "lost", "restarting", "exiting")


@dataclass(slots=True)
class BrokerTotals:
    sessions_opened: int = 0
    sessions_ended: Counter[str] = field(default_factory=Counter)
    tasks_submitted: int = 0
    tasks_completed: Counter[str] = field(default_factory=Counter)
    tasks_retried: int = 0
    worker_failures: Counter[str] = field(default_factory=Counter)

    def count_outcomes(self, flat: list[Any]) -> None:
        """Final outcomes as delivered to the client: ``[id, status, payload, ...]``."""
        statuses = flat[1::3]
        ok = statuses.count(p.OK)
        if ok:
            self.tasks_completed["ok"] += ok
        if ok < len(statuses):
            for status in statuses:
                if status != p.OK:
                    self.tasks_completed[RESULT_LABEL.get(status, "failed")] += 1


def snapshot(totals: BrokerTotals, sessions: Iterable[Session]) -> HtcStats:
    live: Counter[str] = Counter()
    workers: Counter[str] = Counter()
    backlog = in_flight = 0
    for s in sessions:
        if not s.live:
            continue
        live[s.state.lower()] += 1
        backlog += s.book.waiting
        in_flight += s.book.in_flight_count
        for w in s.workers.values():
            workers[w.state] += 1
    return HtcStats(
        sessions={state: live.get(state, 0) for state in ("open", "closed")},
        sessions_opened=totals.sessions_opened,
        sessions_ended=dict(totals.sessions_ended),
        tasks_submitted=totals.tasks_submitted,
        tasks_completed=dict(totals.tasks_completed),
        tasks_retried=totals.tasks_retried,
        backlog=backlog,
        in_flight=in_flight,
        workers={state: workers.get(state, 0) for state in WORKER_STATES},
        worker_failures=dict(totals.worker_failures),
    )
