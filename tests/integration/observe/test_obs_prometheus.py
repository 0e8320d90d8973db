"""Debian's Prometheus scrapes a running HAL; metrics and every Grafana panel query come
back through /api/v1/query."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from conftest_helpers import query

from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "hal-dashboard.json"


def test_prometheus_scrapes_hal_and_answers_a_query(
    prometheus: str, live: LiveServer, completed_job: tuple[int, Path]
) -> None:
    def submitted() -> bool:
        result = query(prometheus, 'sum(hal_jobs_submitted_total{partition="debug"})')
        return (
            bool(result["data"]["result"]) and float(result["data"]["result"][0]["value"][1]) >= 1
        )

    wait_until(submitted, 20, 0.5, "hal_jobs_submitted_total in prometheus")
    up = query(prometheus, 'hal_node_up{node="node1"}')["data"]["result"]
    assert up and up[0]["value"][1] == "1"


def test_every_grafana_panel_query_is_valid_and_returns_series(
    prometheus: str, live: LiveServer, completed_job: tuple[int, Path]
) -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"].replace("$partition", ".*") for p in dash["panels"] for t in p["targets"]]
    # a job that may not start for an hour keeps the queue gauges and the scheduler's
    # rejection counters non-empty (held jobs stay out of scheduling passes altogether)
    with live.client() as c:
        held = c.submit(
            JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", begin_time=time.time() + 3600)
        )
    try:
        wait_until(
            lambda: bool(query(prometheus, "hal_scheduler_rejections_total")["data"]["result"]),
            20, 0.5, "rejections in prometheus",
        )  # fmt: skip
        time.sleep(2)  # rate() needs two samples of each new series
        empty: list[str] = []
        for expr in exprs:
            body: dict[str, Any] = query(prometheus, expr)
            assert body["status"] == "success", (expr, body.get("error"))
            if not body["data"]["result"]:
                empty.append(expr)
    finally:
        with live.client() as c:
            c.cancel(str(held.job_id))
    assert not empty, f"queries with no series: {empty}"
