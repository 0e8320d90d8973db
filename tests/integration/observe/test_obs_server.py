"""The observability plane in a running control plane with a real agent and job."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from hal.observe import traceids
from hal.testing import http
from hal.testing.live import LiveServer, stop_process, wait_until
from hal.wire.jobs import JobSubmit


def auth(live: LiveServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {live.token}"}


def test_metrics_endpoint_counts_the_job_and_passes_promtool(
    live: LiveServer, completed_job: tuple[int, Path]
) -> None:
    text = http.get(live.url + "/metrics", timeout=5).text
    assert 'hal_jobs_finished_total{partition="debug",state="completed"}' in text
    assert 'hal_node_cpus{node="node1",state="idle"}' in text
    assert "hal_build_info{" in text and "_created" not in text
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    done = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                          capture_output=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_job_saw_its_traceparent_and_the_trace_was_exported(
    live: LiveServer, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    live.server.observe.tracer.add_exporter(exporter, batch=False)  # type: ignore[attr-defined]
    with live.client() as c:
        done = c.submit(JobSubmit(script="#!/bin/sh\necho $TRACEPARENT\n", workdir=str(tmp_path)))
        wait_until(lambda: c.job(str(done.job_id)).state == "COMPLETED", 30)
        submit_time = c.job(str(done.job_id)).submit_time
    printed = (tmp_path / f"slurm-{done.job_id}.out").read_text().strip()
    assert printed == traceids.traceparent("hal", done.job_id, submit_time, 0)
    wait_until(lambda: any(s.name == "job" for s in exporter.get_finished_spans()), 10)
    trace_id = traceids.job_trace_id("hal", done.job_id, submit_time)
    spans = {s.name: s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id}
    run = spans["job.run"]
    assert f"00-{run.context.trace_id:032x}-{run.context.span_id:016x}-01" == printed
    assert spans["job"].attributes["hal.job.state"] == "COMPLETED"  # type: ignore[index]


def test_hal_logs_prints_the_jobs_output(live: LiveServer, completed_job: tuple[int, Path]) -> None:
    job_id, _ = completed_job
    run = [sys.executable, "-m", "hal.cli.main", "logs", str(job_id)]
    out = subprocess.run(run, env=live.env(), capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("tp=00-") and "oops" in out.stdout
    follow = subprocess.run([*run, "--follow"], env=live.env(), capture_output=True, text=True,
                            timeout=60, check=False)  # fmt: skip
    assert follow.stdout == out.stdout  # a finished job: --follow ends by itself


def test_logs_of_another_users_job_are_refused(
    live: LiveServer, completed_job: tuple[int, Path]
) -> None:
    job_id, _ = completed_job
    with live.client() as c:
        token = c.add_user("bob").token  # type: ignore[attr-defined]
    r = http.get(f"{live.url}/v1/jobs/{job_id}/output",
                  headers={"Authorization": f"Bearer {token}"}, timeout=5)  # fmt: skip
    assert r.status_code == 403


def test_dashboard_data_endpoints(live: LiveServer, completed_job: tuple[int, Path]) -> None:
    job_id, _ = completed_job
    h = auth(live)
    overview = http.get(live.url + "/v1/observe/overview", headers=h, timeout=5).json()
    assert [n["name"] for n in overview["nodes"]] == ["node1"]
    assert "fairshare" not in overview  # its tab reads /v1/shares
    queue = http.get(live.url + "/v1/observe/queue", params={"state": "ALL", "q": "tracejob"},
                      headers=h, timeout=5).json()  # fmt: skip
    assert [j["id"] for j in queue["jobs"]] == [job_id]
    detail = http.get(f"{live.url}/v1/observe/jobs/{job_id}", headers=h, timeout=5).json()
    events = [e["event"] for e in detail["timeline"]]
    assert events[0] == "submitted" and events[-1] == "completed" and "started" in events
    assert len(detail["trace_id"]) == 32
    assert http.get(live.url + "/ui", timeout=5).text.startswith("<!doctype html>")
    assert http.get(live.url + "/v1/observe/overview", timeout=5).status_code == 401


def scraped(live: LiveServer, name: str) -> float:
    """The sum of ``name``'s samples on the server's /metrics (0 when it has none)."""
    text = http.get(live.url + "/metrics", timeout=5).text
    return sum(
        s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    )


def test_a_requeued_attempts_queue_wait_leaves_out_the_run_before_it(
    live: LiveServer, tmp_path: Path
) -> None:
    """``scontrol requeue`` of a job that ran 3 s: the queue waits observed for its two
    attempts add up to less than the time between their starts (the second one was
    measured from the submit, the first run included). A finished job requeued (``hal
    requeue`` of a completed job) counts in hal_jobs_requeued_total like a running one."""
    wait_sum, requeued = "hal_job_queue_wait_seconds_sum", "hal_jobs_requeued_total"
    before_wait, before_requeued = scraped(live, wait_sum), scraped(live, requeued)
    with live.client() as c:
        job_id = c.submit(JobSubmit(script="#!/bin/sh\nsleep 300\n", workdir=str(tmp_path),
                                    name="requeued-wait")).job_id  # fmt: skip
        try:
            wait_until(lambda: c.job(job_id).state == "RUNNING", 30, message="the first run")
            first_start = c.job(job_id).start_time
            assert first_start is not None
            wait_until(lambda: time.time() > first_start + 3, 10, message="3 s of running")
            c.requeue(job_id)
            wait_until(lambda: c.job(job_id).restarts == 1 and c.job(job_id).state == "RUNNING",
                       30, message="the second run")  # fmt: skip
            second_start = c.job(job_id).start_time
            assert second_start is not None
            assert scraped(live, requeued) == before_requeued + 1
            assert scraped(live, wait_sum) - before_wait < second_start - first_start
        finally:
            c.cancel(str(job_id))
        done = c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path))).job_id
        wait_until(lambda: c.job(done).state == "COMPLETED", 30, message="the short job")
        c.requeue(done)
        wait_until(lambda: c.job(done).restarts == 1, 10, message="the requeue")
        assert scraped(live, requeued) == before_requeued + 2
        wait_until(lambda: c.job(done).state == "COMPLETED", 30, message="its second run")


def test_a_dead_agent_fires_node_down_to_the_webhook_and_the_alert_list(
    live: LiveServer, receiver: Any
) -> None:
    """Runs last in this module: it stops node2's agent for good."""
    proc = live.start_agent("node2", cpus=1, memory="512M")
    with live.client() as c:
        wait_until(lambda: any(n.name == "node2" and n.state == "UP" for n in c.nodes()), 20)
    stop_process(proc)

    def fired() -> bool:
        return any(b["status"] == "firing" and b["alerts"][0]["labels"].get("node") == "node2"
                   for b in receiver.bodies)  # fmt: skip

    wait_until(fired, 20, 0.2, "HalNodeDown for node2 at the webhook")
    body = next(b for b in receiver.bodies if b["alerts"][0]["labels"].get("node") == "node2")
    assert body["alerts"][0]["labels"]["alertname"] == "HalNodeDown"
    listed = http.get(live.url + "/v1/alerts", headers=auth(live), timeout=5).json()
    assert any(a["name"] == "HalNodeDown" and a["labels"] == {"node": "node2"}
               for a in listed["alerts"])  # fmt: skip

    def down_for() -> float:
        """How long node2 has been down, as its firing alert's summary says."""
        listed = http.get(live.url + "/v1/alerts", headers=auth(live), timeout=5).json()
        (alert,) = [a for a in listed["alerts"] if a["labels"] == {"node": "node2"}]
        return float(re.search(r"for (\d+) s", alert["summary"]).group(1))  # type: ignore[union-attr]

    # the summary's numbers are the evaluator's latest, not those of the first firing
    first = down_for()
    wait_until(lambda: down_for() >= first + 2, 10, 0.2, "the alert's down time to grow")
    out = subprocess.run([sys.executable, "-m", "hal.cli.main", "alerts"], env=live.env(),
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert "HalNodeDown" in out.stdout
