"""``hal bench topology`` runs end to end on a small tree and reports what it placed
(no wall-time assertions: the figures live in docs/benchmarks.md)."""

from __future__ import annotations

from hal.bench.topology import JOB_SIZES, run_topology_bench


def test_small_tree_bench_reports_every_case_and_fewer_leaves_than_baseline() -> None:
    result = run_topology_bench(nodes=1200, leaf=16, levels=3, repeats=2)
    cases = result["cases"]
    assert set(cases) == {f"{n}_nodes" for n in JOB_SIZES} | {"64_nodes_new_pass"}
    assert cases["8_nodes"]["leaves"] == 1
    for size in JOB_SIZES:
        case = cases[f"{size}_nodes"]
        assert case["leaves"] <= case["baseline_leaves"]
    assert result["worst_median_ms"] == max(c["median_ms"] for c in cases.values())
