"""``hal bench fragmentation`` runs end to end on a small cluster: both placements see
the same trace, the figures are consistent, and block placement keeps more base blocks
fully free (seeded, so deterministic)."""

from __future__ import annotations

from hal.bench.fragmentation import gpu_cluster, make_trace, run_fragmentation_bench


def test_trace_is_seeded_and_fits_the_cluster() -> None:
    a = make_trace(50, 64, 0.8, seed=3)
    assert a == make_trace(50, 64, 0.8, seed=3)
    assert all(1 <= j.nodes <= 64 and j.run > 0 for j in a)
    assert [j.submit for j in a] == sorted(j.submit for j in a)


def test_gpu_cluster_has_block_paths() -> None:
    nodes, topo = gpu_cluster(32, 8)
    assert len(topo.blocks) == 4 and topo.block_mode
    assert all(n.topology and n.topology[-1].startswith("b") for n in nodes)


def test_small_run_reports_both_placements() -> None:
    result = run_fragmentation_bench(nodes=64, block=8, jobs=200)
    aware, plain = result["block_aware"], result["plain_best_fit"]
    for side in (aware, plain):
        assert 0.0 < side["utilisation"] <= 1.0
        assert 0.0 <= side["mean_free_blocks"] <= result["blocks"]
    assert result["utilisation_gap"] <= 0.01
    assert aware["mean_free_blocks"] > plain["mean_free_blocks"]
    assert result["meets_target"] == (
        result["free_blocks_gain"] >= result["target_gain"] and result["utilisation_gap"] <= 0.01
    )
