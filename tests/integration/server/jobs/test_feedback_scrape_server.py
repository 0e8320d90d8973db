"""``--feedback-metrics``: a real job serves a Prometheus page with Python's http.server;
its agent reads it and reports the values as the job's feedback, seen in ``hal show`` and
``GET /v1/jobs/{id}/feedback``. An endpoint that is down at first costs nothing (the agent
keeps going and reads it once it is up); an address off the job's node is refused at
submit."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from hal.core.errors import InvalidRequest
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def latest(server: LiveServer, job_id: int) -> dict[str, float]:
    with server.client() as c:
        return {m.name: m.latest for m in c.job_feedback(job_id, points=False).metrics}


def serve_script(folder: Path, port: int, *, after: int = 0, head: str = "") -> str:
    """A job that serves ``folder`` on ``port`` (after ``after`` seconds) until cancelled."""
    return (
        f"#!/bin/bash\n{head}"
        f"sleep {after}\n"
        f"exec {PY} -m http.server {port} --bind 127.0.0.1 --directory {folder}\n"
    )


def test_the_agent_scrapes_the_jobs_gauges(server: LiveServer, tmp_path: Path) -> None:
    page = tmp_path / "metrics"
    page.write_text(
        "# TYPE hal_feedback_samples_per_s gauge\nhal_feedback_samples_per_s 1830\n"
        "# TYPE hal_feedback_latency_ms gauge\n"
        'hal_feedback_latency_ms{quantile="0.99"} 12.5\n'
        "# TYPE queue_depth gauge\nqueue_depth 3\n"
    )
    port = free_port()
    script = tmp_path / "serve.sh"
    script.write_text(
        serve_script(
            tmp_path,
            port,
            head=(
                f"#HAL --feedback-metrics=http://localhost:{port}/metrics\n"
                "#HAL --feedback-goal=samples_per_s:max\n"
            ),
        )
    )
    done = server.cli("sbatch", "--parsable", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    try:
        want = {"latency_ms": 12.5, "samples_per_s": 1830.0}  # the prefixed gauges only
        wait_until(lambda: latest(server, job_id) == want, message="the scraped values")
        page.write_text(page.read_text().replace("1830", "1900.5"))
        wait_until(
            lambda: latest(server, job_id).get("samples_per_s") == 1900.5,
            message="the next scrape's value",
            timeout=60,
        )
        shown = server.cli("show", str(job_id))
        assert shown.returncode == 0, shown.stderr
        assert f"FeedbackMetrics=http://localhost:{port}/metrics" in shown.stdout
        assert "samples_per_s=1900.5 (max, 2 reports)" in shown.stdout
    finally:
        server.cli("scancel", str(job_id))


def test_an_endpoint_down_at_first_is_read_once_up(server: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "metrics").write_text("queue_depth 7\nother 1\n")  # untyped, named
    port = free_port()
    script = tmp_path / "late.sh"
    script.write_text(serve_script(tmp_path, port, after=3))
    url = f"http://127.0.0.1:{port}/metrics#queue_depth"
    done = server.cli("sbatch", "--parsable", f"--feedback-metrics={url}", str(script))
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    try:
        wait_until(
            lambda: latest(server, job_id) == {"queue_depth": 7.0}, message="the value", timeout=60
        )
        with server.client() as c:  # the agent went on: its node still takes jobs
            assert all(n.state == "UP" for n in c.nodes())
    finally:
        server.cli("scancel", str(job_id))
    quick = server.cli("sbatch", "--parsable", "--wrap", "true")
    assert quick.returncode == 0, quick.stderr
    quick_id = int(quick.stdout)
    with server.client() as c:
        wait_until(lambda: c.job(quick_id).state == "COMPLETED", message="a job after it")


@pytest.mark.parametrize(
    "url",
    ["http://example.com/metrics", "http://10.1.2.3:9100/metrics", "file:///etc/passwd"],
)
def test_an_address_off_the_node_is_refused(server: LiveServer, url: str) -> None:
    done = server.cli("sbatch", f"--feedback-metrics={url}", "--wrap", "true")
    assert done.returncode != 0
    assert "--feedback-metrics" in done.stderr
    with server.client() as c, pytest.raises(InvalidRequest, match=r"loopback|http"):
        c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", feedback_metrics=url))
