"""``hal bench artifacts`` at a small size: its real processes (cache control plane,
root, branch, a leaf per node, the server, one fetch process per node) run every phase,
and its JSON carries the figures docs/benchmarks.md quotes."""

from __future__ import annotations

import pytest

from hal.bench.artifacts import run_artifacts_bench, size_of

MIB = 1024 * 1024


@pytest.mark.slow  # a bench's every phase: CI runs it
def test_the_fanout_reads_the_root_once_and_reports_where_the_time_went() -> None:
    fanout = run_artifacts_bench(nodes=2, size=20 * MIB)["fanout"]
    assert fanout["nodes"] == 2 and fanout["artifact_bytes"] == 20 * MIB
    assert fanout["root_bytes_read"] == 20 * MIB  # two pieces, each sent once
    assert fanout["server_bytes_read"] == 20 * MIB
    assert fanout["fallbacks"] == 0
    for key in ("tree_s", "direct_s", "single_node_s", "single_node_tree_s"):
        assert fanout[key] > 0, key
    assert set(fanout["where_tree"]) >= {"server", "root", "branch", "leaves", "nodes"}


def test_sizes_are_read_in_binary_units() -> None:
    assert size_of("1G") == 1024**3 and size_of("64M") == 64 * MIB and size_of("4096") == 4096
