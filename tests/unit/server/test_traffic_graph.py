"""``DecayedGraph``: the traffic graph's decayed rates and its bounds, the numbers the
scheduler's harmonic plugin weighs placements by."""

from __future__ import annotations

import math

import pytest

from hal.server.traffic_graph import DecayedGraph, Edge, rates

H = 3600.0  # half-life


def graph(max_peers: int = 32, max_nodes: int = 1000) -> DecayedGraph[str]:
    return DecayedGraph(H, max_peers, max_nodes)


def test_a_young_edge_shows_its_mean_rate_not_one_pulled_down_by_the_half_life() -> None:
    """Ten seconds at 1 MB/s is 1 MB/s, not the 1.9 kB/s a plain hour-long average
    would say the minute a service and its client meet."""
    g = graph()
    g.add("ann/db", "bob/client", 10e6, now=1010.0, interval_s=10.0)
    assert g.peers("ann/db", 1010.0)["bob/client"] == pytest.approx(1e6, rel=1e-3)
    assert g.peers("bob/client", 1010.0) == {"ann/db": g.peers("ann/db", 1010.0)["bob/client"]}


def test_a_steady_rate_reads_as_itself_at_any_age() -> None:
    g = graph()
    for t in range(10, 4 * 3600, 10):
        g.add("a/x", "b/y", 5000.0, now=float(t), interval_s=10.0)
    assert g.peers("a/x", 4 * 3600.0 - 10)["b/y"] == pytest.approx(500.0, rel=0.01)


def test_an_edge_that_goes_quiet_fades_by_half_each_half_life_once_old() -> None:
    g = graph()
    for t in range(10, 10 * 3600, 10):  # ten half-lives at 1 kB/s: fully warmed up
        g.add("a/x", "b/y", 10_000.0, now=float(t), interval_s=10.0)
    quiet = 10 * 3600.0
    one, two = (g.peers("a/x", quiet + k * H)["b/y"] for k in (1, 2))
    assert one == pytest.approx(500.0, rel=0.01)
    assert two == pytest.approx(250.0, rel=0.01)


def test_bytes_added_later_count_in_full_and_older_ones_decayed() -> None:
    edge = Edge(decayed_bytes=1000.0, at=0.0, since=-10.0)
    assert edge.bytes_at(H, H) == pytest.approx(500.0)
    g = graph()
    g.put("a/x", "b/y", edge)
    g.add("a/x", "b/y", 100.0, now=H, interval_s=10.0)
    assert g.edge("a/x", "b/y") == Edge(pytest.approx(600.0), H, -10.0)  # type: ignore[arg-type]


def test_an_edge_is_forgotten_once_decayed_under_a_byte() -> None:
    g = graph()
    g.add("a/x", "b/y", 1024.0, now=0.0, interval_s=1.0)
    g.prune(9 * H)  # 2 bytes left
    assert "a/x" in g
    g.prune(11 * H)  # half a byte
    assert len(g) == 0 and g.edge_count() == 0


def test_a_full_endpoint_swaps_its_weakest_edge_for_a_stronger_newcomer() -> None:
    g = graph(max_peers=2)
    g.add("db", "weak", 10.0, now=10.0, interval_s=10.0)
    g.add("db", "strong", 1e6, now=10.0, interval_s=10.0)
    assert g.add("db", "new", 1e3, now=10.0, interval_s=10.0)
    assert set(g.peers("db", 10.0)) == {"strong", "new"}
    assert "weak" not in g and g.evicted == 1


def test_a_newcomer_weaker_than_every_edge_of_a_full_endpoint_is_left_out() -> None:
    g = graph(max_peers=2)
    g.add("db", "a", 1e6, now=10.0, interval_s=10.0)
    g.add("db", "b", 1e6, now=10.0, interval_s=10.0)
    assert not g.add("db", "c", 10.0, now=10.0, interval_s=10.0)
    assert set(g.peers("db", 10.0)) == {"a", "b"} and "c" not in g and g.refused == 1


def test_a_full_graph_drops_its_weakest_endpoints_down_to_nine_tenths() -> None:
    g = graph(max_nodes=20)
    for i in range(10):  # ten pairs: 20 endpoints, pair i at i+1 kB per 10 s
        g.add(f"s{i:02}", f"c{i:02}", 1000.0 * (i + 1), now=10.0, interval_s=10.0)
    assert len(g) == 20
    g.add("s99", "c99", 1e9, now=10.0, interval_s=10.0)
    assert len(g) <= 20 and "s99" in g and "c99" in g
    assert len(g) == 18  # 90 %: the next ones get in without another sort
    assert "s00" not in g and "s09" in g  # the weakest went


def test_lowered_bounds_apply_at_the_next_prune() -> None:
    g = graph()
    for peer in "abcd":
        g.add("db", peer, 100.0 * (ord(peer) - 96), now=10.0, interval_s=10.0)
    g.configure(H, max_peers=2, max_nodes=1000)
    g.prune(10.0)
    assert set(g.peers("db", 10.0)) == {"c", "d"}


def test_a_workload_talking_to_itself_is_one_edge() -> None:
    g = graph()
    g.add("ann/mpi", "ann/mpi", 1000.0, now=10.0, interval_s=10.0)
    assert g.edge_count() == 1 and next(iter(g.edges()))[:2] == ("ann/mpi", "ann/mpi")
    assert g.peers("ann/mpi", 10.0) == {"ann/mpi": pytest.approx(100.0, rel=1e-2)}


def test_changes_hand_over_what_was_written_and_dropped_once() -> None:
    g = graph(max_peers=1)
    g.add("a", "b", 10.0, now=10.0, interval_s=10.0)
    written, dropped = g.changes()
    assert [w[:2] for w in written] == [("a", "b")] and dropped == []
    assert g.changes() == ([], [])
    g.add("a", "c", 1e6, now=20.0, interval_s=10.0)  # evicts a-b
    written, dropped = g.changes()
    assert [w[:2] for w in written] == [("a", "c")] and dropped == [("a", "b")]
    g.restore([("a", "c")], [("a", "b")])  # the store was down: next time again
    written, dropped = g.changes()
    assert [w[:2] for w in written] == [("a", "c")] and dropped == [("a", "b")]


def test_a_job_graph_keeps_no_changes_for_a_store() -> None:
    g: DecayedGraph[int] = DecayedGraph(H, 4, 100, track_changes=False)
    g.add(1, 2, 10.0, now=10.0, interval_s=10.0)
    g.forget(1)
    assert g.changes() == ([], []) and len(g) == 0


def test_rate_window_matches_the_closed_form() -> None:
    """The window is H/ln2 * (1 - 2^-(t/H)): at one half-life, half the limit."""
    edge = Edge(decayed_bytes=1.0, at=H, since=0.0)
    assert edge.rate(H, H) == pytest.approx(1.0 / (H / math.log(2) * 0.5))


def test_the_views_rates_are_each_edges_own_both_ways() -> None:
    g = graph()
    g.add("a/x", "b/y", 5000.0, now=10.0, interval_s=10.0)
    g.add("a/x", "a/x", 700.0, now=20.0, interval_s=10.0)
    g.add("c/z", "b/y", 9.0, now=30.0, interval_s=5.0)
    found = rates(g.adjacency(), 100.0, H)
    assert found == {n: pytest.approx(g.peers(n, 100.0)) for n in g.nodes()}
    assert found["b/y"]["a/x"] == found["a/x"]["b/y"]
