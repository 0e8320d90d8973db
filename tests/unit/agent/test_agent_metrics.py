"""The agent's /metrics: node allocation from the records it supervises, launch and
channel counters, a listener on the agent's own loop, and an exposition promtool accepts."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hal.agent.artifacts import ArtifactCache
from hal.agent.metrics import (
    AgentCollector,
    AgentCounters,
    Capacity,
    agent_registry,
)
from hal.agent.records import JobRecord, Phase
from hal.observe.listener import parse_listen, start_metrics_server
from hal.wire.agent import JobReport

GIB = 1 << 30


def scene() -> tuple[AgentCounters, list[JobRecord]]:
    counters = AgentCounters(registrations=2, channel_failures=3, reconnects=1, last_sync=12.5)
    for seq, (kind, state) in enumerate(
        [
            ("started", ""),
            ("started", ""),
            ("launch_failed", ""),
            ("finished", "COMPLETED"),
            ("finished", "OUT_OF_MEMORY"),
            ("finished", "FAILED"),
        ]
    ):
        counters.on_report(JobReport(seq=seq, job_id=seq, attempt=0, kind=kind, time=1.0,
                                     state=state))  # fmt: skip
    jobs = [
        JobRecord(1, 0, phase=Phase.RUNNING, cpus=3, memory_bytes=2 * GIB, gpus=1),
        JobRecord(2, 0, phase=Phase.LAUNCHING, cpus=1, memory_bytes=GIB),
        JobRecord(3, 1, phase=Phase.STOPPING, cpus=2),
    ]
    return counters, jobs


def samples(collector: AgentCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(agent_registry(collector)).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def collector() -> AgentCollector:
    counters, jobs = scene()
    return AgentCollector("n1", counters, lambda: jobs, Capacity(8, 16 * GIB, 2))


def test_allocation_jobs_and_counters_of_the_node() -> None:
    got = samples(collector())

    def v(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted({"node": "n1", **labels}.items())))]

    assert v("hal_agent_cpus", state="alloc") == 6 and v("hal_agent_cpus", state="idle") == 2
    assert v("hal_agent_memory_bytes", state="alloc") == 3 * GIB
    assert v("hal_agent_memory_bytes", state="idle") == 13 * GIB
    assert v("hal_agent_gpus", state="alloc") == 1 and v("hal_agent_gpus", state="idle") == 1
    assert [v("hal_agent_jobs", phase=p) for p in ("launching", "running", "stopping")] == [1, 1, 1]
    assert v("hal_agent_job_launches_total", result="started") == 2
    assert v("hal_agent_job_launches_total", result="failed") == 1
    assert v("hal_agent_jobs_finished_total", state="completed") == 1
    assert v("hal_agent_jobs_finished_total", state="oom") == 1
    assert v("hal_agent_registrations_total") == 2
    assert v("hal_agent_channel_failures_total") == 3
    assert v("hal_agent_channel_reconnects_total") == 1
    assert v("hal_agent_last_sync_timestamp_seconds") == 12.5
    assert not any(name.endswith("_created") for name, _ in got)


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package 'prometheus')")  # fmt: skip
def test_the_agent_exposition_passes_promtool() -> None:
    text = generate_latest(agent_registry(collector()))
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9471", (None, 9471)),
        (":9471", (None, 9471)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9471", ("::1", 9471)),
    ],
)
def test_listen_addresses(text: str, expected: tuple[str | None, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["metrics", "host:", "1:70000"])
def test_bad_listen_addresses_say_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match="metrics listen address"):
        parse_listen(text)


def test_the_listener_answers_metrics_and_nothing_else() -> None:
    async def scenario() -> None:
        server = await start_metrics_server("127.0.0.1:0", agent_registry(collector()))
        port = server.sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                r = await http.get(base + "/metrics")
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
                assert 'hal_agent_cpus{node="n1",state="alloc"} 6.0' in r.text
                assert (await http.get(base + "/")).status_code == 404
            # junk and half requests are closed, not crashes
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"\r\n\r\n")
            await writer.drain()
            assert b"404" in await reader.read()
            writer.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_artifact_fetches_are_counted(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path, None, 10**9, set)
    counters, jobs = scene()
    metrics = AgentCollector("n1", counters, lambda: jobs, Capacity(8, 16 * GIB, 2))
    assert samples(metrics)[("hal_agent_artifact_fetches_total", (("node", "n1"),))] == 0
    cache.fetches, cache.fetched_bytes = 3, 4096
    metrics = AgentCollector(
        "n1", counters, lambda: jobs, Capacity(8, 16 * GIB, 2), artifacts=cache
    )
    got = samples(metrics)
    assert got[("hal_agent_artifact_fetches_total", (("node", "n1"),))] == 3
    assert got[("hal_agent_artifact_fetched_bytes_total", (("node", "n1"),))] == 4096
