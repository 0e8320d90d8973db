"""``hal bench agent-traffic`` runs end to end on a few jobs: every job and connection
is reported, with the bytes the clients moved, and the figures are filled in."""

from __future__ import annotations

import pytest

from hal.bench.agent_traffic import run_agent_traffic_bench


def test_small_run_reports_every_job_and_connection() -> None:
    result = run_agent_traffic_bench(jobs=4, sockets=12, rounds=2, chunk=1000)
    assert (result["jobs"], result["sockets"]) == (4, 12)
    assert result["jobs_reported"] == 4
    assert result["flows_reported"] == 12  # both ends of the 6 connections
    assert result["bytes_sent_last_read"] >= 6 * 1000  # each connection's chunk, sent once
    assert result["host_tcp_sockets"] >= 12
    assert result["read_cpu_ms"] > 0 and result["rss_mib_after"] > 0
    assert result["cpu_model"]


def test_too_few_sockets_is_refused() -> None:
    with pytest.raises(ValueError, match="one socket per job"):
        run_agent_traffic_bench(jobs=4, sockets=2)
