"""hal.sim.data: the simulated cache fills on reads, evicts the least recently used, and
the simulator charges each job its read time; the data benchmark's comparison."""

from __future__ import annotations

from hal.bench.data import run_data_bench
from hal.core.data import CacheTree, Link
from hal.sim.data import CacheModel

GB = 1_000_000_000


def _model(leaf_capacity: int = 10 * GB) -> CacheModel:
    tree = CacheTree(
        parent={"root": None, "rack": "root", "l1": "rack", "l2": "rack"},
        uplink={"rack": Link(1, 8_000, 1), "l1": Link(0, 80_000, 0), "l2": Link(0, 80_000, 0)},
    )
    return CacheModel(
        tree,
        capacity={"root": 100 * GB, "rack": 100 * GB, "l1": leaf_capacity, "l2": leaf_capacity},
        node_leaf={"n1": "l1", "n2": "l2"},
        sizes={"a": 4 * GB, "b": 4 * GB, "c": 4 * GB},
        origin=Link(0, 800, 1),
    )


def test_a_cold_read_comes_from_the_origin_and_leaves_copies_on_the_way() -> None:
    m = _model()
    first = m.read(["a"], ["n1"])
    assert (first.moved_bytes, first.origin_bytes, first.local_bytes) == (4 * GB, 4 * GB, 0)
    assert set(m.view().holders["a"]) == {"l1", "rack", "root"}
    again = m.read(["a"], ["n1"])
    assert (again.local_bytes, again.moved_bytes, again.seconds) == (4 * GB, 0, 0.0)
    sibling = m.read(["a"], ["n2"])  # from the rack, not the origin: faster
    assert sibling.origin_bytes == 0 and 0 < sibling.seconds < first.seconds


def test_two_nodes_on_one_leaf_move_the_data_once_and_wait_for_the_slowest() -> None:
    m = _model()
    r = m.read(["a"], ["n1", "n1"])
    assert r.moved_bytes == 4 * GB and r.local_bytes == 4 * GB
    assert r.seconds == m.tree.to_root("l1").then(m.origin).seconds(4 * GB)


def test_a_full_leaf_evicts_its_least_recently_used_key() -> None:
    m = _model(leaf_capacity=8 * GB)
    m.read(["a"], ["n1"])
    m.read(["b"], ["n1"])
    m.read(["a"], ["n1"])  # a is now the most recent
    m.read(["c"], ["n1"])
    assert set(m.contents["l1"]) == {"a", "c"}


def test_locality_aware_placement_moves_fewer_bytes_than_oblivious() -> None:
    r = run_data_bench(jobs=400, seeds=(5,))["runs"][0]
    obl, aware, wait = r["oblivious"], r["aware"], r["aware_wait"]
    assert obl["jobs_run"] == aware["jobs_run"] == wait["jobs_run"] == 400
    assert wait["bytes_moved"] < aware["bytes_moved"] < obl["bytes_moved"]
    assert wait["hit_ratio"] > aware["hit_ratio"] > obl["hit_ratio"]
    # waiting for a node by the data costs some queueing
    assert wait["mean_wait_s"] > aware["mean_wait_s"]
    # every dataset read at least once comes from the origin exactly once in every run
    assert obl["bytes_from_origin"] == aware["bytes_from_origin"] == wait["bytes_from_origin"]
