"""``hal bench topology --labels`` runs end to end on a small label tree and reports
what it placed (no wall-time assertions: the figures live in docs/benchmarks.md)."""

from __future__ import annotations

from hal.bench.topology_labels import labelled_nodes, run_label_bench


def test_label_tree_nodes_nest_racks_in_zones() -> None:
    nodes = labelled_nodes(300)
    assert nodes[0].topology == ("site=s0", "region=g0", "zone=z0", "rack=r0")
    assert nodes[16].labels["rack"] == "r1" and nodes[72].nvlink_domain == "nvl1"


def test_small_label_bench_packs_racks_and_keeps_one_domain() -> None:
    result = run_label_bench(nodes=1200, repeats=2)
    cases = result["cases"]
    assert cases["8_nodes"]["racks"] == 1
    for size in (8, 64, 512):
        case = cases[f"{size}_nodes"]
        assert case["racks"] <= case["baseline_racks"]
    assert cases["8_nodes_required_nvlink"]["domains"] == 1
    assert result["worst_median_ms"] == max(c["median_ms"] for c in cases.values())
