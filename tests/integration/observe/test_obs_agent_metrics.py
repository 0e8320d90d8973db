"""A real agent's /metrics (HAL_AGENT_METRICS_LISTEN) while it runs a job and after, next
to its control plane: allocation on the node, launches, finished states, registrations,
and an exposition promtool accepts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hal.testing import http
from hal.testing.live import LiveServer, free_port, stop_process, wait_until
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def agent_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    """A control plane with one agent that serves /metrics; yields (server, metrics URL)."""
    live = LiveServer(tmp_path_factory.mktemp("agent-metrics"))
    port = free_port()
    mp = pytest.MonkeyPatch()
    try:
        live.start()
        mp.setenv("HAL_AGENT_METRICS_LISTEN", f"127.0.0.1:{port}")  # read by `hal agent`
        with live.agents(1, cpus=2, memory="1G", prefix="m"):
            mp.undo()
            yield live, f"http://127.0.0.1:{port}/metrics"
    finally:
        mp.undo()
        live.stop()


def scrape(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    text = http.get(url, timeout=5).text
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, values


def metric(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:  # fmt: skip
    return values.get((name, tuple(sorted({"node": "m1", **labels}.items()))), 0.0)


def test_the_agent_counts_its_job_and_shows_the_nodes_allocation(
    agent_metrics: tuple[LiveServer, str], tmp_path: Path
) -> None:
    live, url = agent_metrics
    go = tmp_path / "go"
    with live.client() as c:
        job = c.submit(JobSubmit(script=f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.1; done\n",
                                 workdir=str(tmp_path), cpus_per_task=1))  # fmt: skip
        wait_until(lambda: c.job(str(job.job_id)).state == "RUNNING", 30)

        def running() -> bool:
            return metric(scrape(url)[1], "hal_agent_jobs", phase="running") == 1

        wait_until(running, 30, 0.1, "the agent to report its running job")
        _, values = scrape(url)
        assert metric(values, "hal_agent_cpus", state="alloc") == 1
        assert metric(values, "hal_agent_cpus", state="idle") == 1
        assert (
            metric(values, "hal_agent_memory_bytes", state="alloc")
            + metric(values, "hal_agent_memory_bytes", state="idle")
            == 1 << 30
        )
        assert metric(values, "hal_agent_job_launches_total", result="started") == 1
        assert metric(values, "hal_agent_registrations_total") == 1
        assert metric(values, "hal_agent_last_sync_timestamp_seconds") > 0
        go.touch()
        wait_until(lambda: c.job(str(job.job_id)).state == "COMPLETED", 30)

    def finished() -> bool:
        return metric(scrape(url)[1], "hal_agent_jobs_finished_total", state="completed") == 1

    wait_until(finished, 30, 0.1, "the agent to count the finished job")
    text, values = scrape(url)
    assert metric(values, "hal_agent_jobs", phase="running") == 0
    assert metric(values, "hal_agent_cpus", state="alloc") == 0
    assert metric(values, "hal_agent_job_launches_total", result="failed") == 0
    assert "process_cpu_seconds_total" in text
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    done = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                          capture_output=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_metrics_listen_flag_serves_the_agents_metrics(
    agent_metrics: tuple[LiveServer, str],
) -> None:
    live, _ = agent_metrics
    port = free_port()
    proc = live.start_agent(
        "f1", cpus=1, memory="512M", extra=["--metrics-listen", f"127.0.0.1:{port}"]
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def served() -> bool:
            try:
                return metric(scrape(url)[1], "hal_agent_cpus", node="f1", state="idle") == 1
            except httpx.HTTPError:
                return False

        wait_until(served, 30, 0.1, "the agent started with --metrics-listen to serve /metrics")
    finally:
        stop_process(proc)


def test_a_bad_metrics_listen_flag_stops_the_agent_with_a_clear_error(
    agent_metrics: tuple[LiveServer, str],
) -> None:
    live, _ = agent_metrics
    done = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", "agent", "--server", live.url,
         "--metrics-listen", "host:notaport"],
        env=live.env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--metrics-listen: " in done.stderr and "'host:notaport'" in done.stderr
    assert "HOST:PORT" in done.stderr
