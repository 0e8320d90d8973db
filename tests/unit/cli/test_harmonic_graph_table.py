"""``hal harmonic graph``'s table: rates in decimal units, the job end asked about first,
and a line saying so where nothing was measured yet."""

from __future__ import annotations

import pytest

from hal.cli.harmonic import draw, rate
from hal.wire.harmonic import HarmonicGraph, IdentityTrafficEdge, JobTrafficEdge


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.4, "0 B/s"), (999.0, "999 B/s"), (1234.0, "1.2 kB/s"), (1.25e6, "1.2 MB/s"),
     (3e9, "3.0 GB/s"), (2e13, "20.0 TB/s")],
)  # fmt: skip
def test_rates_are_written_in_decimal_units(value: float, shown: str) -> None:
    assert rate(value) == shown


def test_the_tables_show_each_edge_once_with_its_rate_and_since() -> None:
    graph = HarmonicGraph(
        now=1e9,
        half_life_seconds=3600.0,
        jobs=[
            JobTrafficEdge(
                job_id="12", user="ann", identity="ann/db", peer_job_id="13_2",
                peer_user="bob", peer_identity="bob/client", bytes_per_second=1.2e6,
                since=1e9 - 60, updated=1e9,
            )
        ],
        identities=[
            IdentityTrafficEdge(
                identity="ann/db", peer_identity="bob/client", bytes_per_second=1.1e6,
                since=1e9 - 3600, updated=1e9,
            )
        ],
    )  # fmt: skip
    lines = draw(graph).splitlines()
    assert lines[0] == "running jobs (bytes/s both ways, half-life 1h)"
    assert lines[1].split() == ["JOB", "IDENTITY", "PEER", "PEER", "IDENTITY", "BYTES/S", "SINCE"]
    assert lines[2].split()[:6] == ["12", "ann/db", "13_2", "bob/client", "1.2", "MB/s"]
    assert lines[4:6] == ["workloads", lines[5]] and lines[5].startswith("IDENTITY")
    assert lines[6].split()[:4] == ["ann/db", "bob/client", "1.1", "MB/s"]


def test_an_empty_graph_says_nothing_was_measured() -> None:
    text = draw(HarmonicGraph(now=0.0, half_life_seconds=90.0))
    assert "half-life 90s" in text and "none: no running jobs exchange" in text
    assert text.rstrip().endswith("none yet")
