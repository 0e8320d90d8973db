"""HTC numbers on the control plane's Prometheus ``/metrics`` (pushed by the broker)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from hal import htc
from hal.htc import HtcClient
from hal.testing import http
from hal.testing.live import LiveServer, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(server: LiveServer) -> Samples:
    text = http.get(server.url + "/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("hal_htc")
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_htc_counters_and_gauges_move_on_metrics(hc: HtcClient, server: LiveServer) -> None:
    before = scrape(server)
    # Session 1: 100 quick tasks, one that raises, one past its timeout.
    with hc.open_session("hal.htc.examples:sleep_ms", task_timeout=0.5, max_workers=2) as s:
        futures = s.submit_many([(1,)] * 100 + [("bad",), (3000,)])
        futures[0].result(30)
        # The broker reports with each pool round (~4/s): a scrape may be one round behind.
        wait_until(
            lambda: value(scrape(server), "hal_htc_workers", state="ready") >= 1,
            timeout=5,
            message="a ready worker on /metrics",
        )
        during = scrape(server)
        assert value(during, "hal_htc_broker_up") == 1
        assert value(during, "hal_htc_sessions", state="open") == 1
        done = [f for f in htc.as_completed(futures, 30)]
        assert len(done) == 102
    # Session 2: a task that kills its worker is failed as poison.
    with hc.open_session("hal.htc.examples:crash_on", max_workers=1, max_worker_deaths=1) as s:
        out = list(s.map([(x, 3) for x in range(10)], star=True, return_exceptions=True))
    assert isinstance(out[3], htc.PoisonTask)

    def delta(name: str, **labels: str) -> float:
        return value(scrape(server), name, **labels) - value(before, name, **labels)

    def settled() -> bool:
        return delta("hal_htc_sessions_ended_total", state="done") == 2

    wait_until(settled, timeout=10, message="both sessions to show as ended on /metrics")
    after = scrape(server)
    assert value(after, "hal_htc_broker_up") == 1
    assert delta("hal_htc_sessions_opened_total") == 2
    assert delta("hal_htc_tasks_submitted_total") == 112
    assert delta("hal_htc_tasks_completed_total", result="ok") == 109
    assert delta("hal_htc_tasks_completed_total", result="failed") == 1
    assert delta("hal_htc_tasks_completed_total", result="timeout") == 1
    assert delta("hal_htc_tasks_completed_total", result="poison") == 1
    assert delta("hal_htc_worker_failures_total", reason="lost") >= 1
    assert delta("hal_htc_tasks_retried_total") >= 1  # the poison task's batch mates
    assert value(after, "hal_htc_task_backlog") == 0
    assert value(after, "hal_htc_tasks_in_flight") == 0
    assert value(after, "hal_htc_sessions", state="open") == 0
    # Low cardinality: no label carries a session id.
    assert not [key for key in after if any(v.startswith("s") and len(v) > 8 for _, v in key[1])]
