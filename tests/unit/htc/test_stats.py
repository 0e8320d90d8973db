"""The broker's aggregate counters and their Prometheus rendering."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from hal.htc import protocol as p
from hal.htc.rest import ServiceSpec, SessionOptions
from hal.htc.session import Session, Worker
from hal.htc.stats import BrokerTotals, snapshot
from hal.htc.tasks import TaskBook
from hal.server.observe.metrics import _htc_metrics


def session(sid: str, state: str = "OPEN") -> Session:
    options = SessionOptions(service=ServiceSpec(target="m:f"))
    return Session(id=sid, user="u", options=options, created=0.0, book=TaskBook(), state=state)


def test_outcomes_are_counted_by_result_label() -> None:
    totals = BrokerTotals()
    totals.count_outcomes([1, p.OK, b"", 2, p.OK, b""])
    totals.count_outcomes([3, p.FAILED, b"", 4, p.TIMED_OUT, b"", 5, p.POISON, b"", 6, p.OK, b""])
    assert dict(totals.tasks_completed) == {"ok": 3, "failed": 1, "timeout": 1, "poison": 1}


def test_snapshot_sums_live_sessions_only() -> None:
    a, b, gone = session("s1"), session("s2", "CLOSED"), session("s3", "DONE")
    a.book.add([1, b"x", 2, b"y", 3, b"z"])
    a.book.take(7, 1)
    a.workers[7] = Worker(job_id=7, session="s1", state="ready")
    b.workers[8] = Worker(job_id=8, session="s2")
    gone.workers[9] = Worker(job_id=9, session="s3", state="ready")
    stats = snapshot(BrokerTotals(tasks_submitted=3), [a, b, gone])
    assert stats.sessions == {"open": 1, "closed": 1}
    assert (stats.backlog, stats.in_flight, stats.tasks_submitted) == (2, 1, 3)
    assert stats.workers == {
        "pending": 1,
        "loading": 0,
        "ready": 1,
        "draining": 0,
        "lost": 0,
        "restarting": 0,
        "exiting": 0,
    }


class _Fixed(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def exposition(metrics: list[Metric]) -> str:
    registry = CollectorRegistry()
    registry.register(_Fixed(metrics))
    return generate_latest(registry).decode()


def test_metric_names_follow_the_conventions() -> None:
    assert exposition(list(_htc_metrics(None))).splitlines()[-1] == "hal_htc_broker_up 0.0"
    totals = BrokerTotals(tasks_submitted=5)
    totals.count_outcomes([1, p.OK, b""])
    text = exposition(list(_htc_metrics(snapshot(totals, []).model_dump())))
    assert "hal_htc_broker_up 1.0" in text
    assert "hal_htc_tasks_submitted_total 5.0" in text
    assert 'hal_htc_tasks_completed_total{result="ok"} 1.0' in text
    assert 'hal_htc_sessions{state="open"} 0.0' in text
    assert "hal_htc_task_backlog 0.0" in text
    assert "# TYPE hal_htc_worker_failures_total counter" in text
