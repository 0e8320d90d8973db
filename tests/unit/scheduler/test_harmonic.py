"""harmonic: a job goes near the running jobs its workload talks to (the traffic graph),
never against a filter, and says so when the graph moved it."""

from __future__ import annotations

import numpy as np
import pytest

from hal.core.traffic import TrafficView
from hal.scheduler.framework import ProfileError
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.harmonic.levels import Levels
from hal.scheduler.plugins.topology.tree import TreeIndex
from hal.testing import ClusterBuilder, JobBuilder, cluster, make_job, make_node, placed_nodes

MB = 1_000_000.0
SCHED = build_scheduler(default_profile())
# alice's clients and her database talk at 50 MB/s (both directions together)
VIEW = TrafficView(
    {}, {"alice/db": {"alice/client": 50 * MB}, "alice/client": {"alice/db": 50 * MB}}
)


def _tree() -> ClusterBuilder:
    """Three leaves of two 8-CPU nodes; l0 and l1 under spine s0, l2 under s1."""
    nodes = [
        make_node(f"l{leaf}n{i}").cpus(8).topology("core", f"s{leaf // 2}", f"l{leaf}")
        for leaf in range(3)
        for i in range(2)
    ]
    return cluster().nodes(*nodes)


def _db(on: str = "l2n1", cpus: int = 4) -> JobBuilder:
    return make_job(10).user("alice").name("db").cpus(cpus).running_on(on)


def _client(job_id: int = 1, cpus: int = 2) -> JobBuilder:
    return make_job(job_id).user("alice").name("client").cpus(cpus)


# bob's job makes l0n0 the fullest node: best fit alone puts a small job there
FILLER = make_job(11).user("bob").cpus(5).running_on("l0n0")


def _plan(snap: ClusterSnapshot) -> Plan:
    return SCHED.schedule(snap)


def test_a_client_goes_to_its_database_s_node_over_a_fuller_one() -> None:
    snap = _tree().running(_db(), FILLER).pending(_client()).traffic(VIEW).build()
    plan = _plan(snap)
    assert placed_nodes(plan)[1] == ("l2n1",)
    (note,) = [p.note for p in plan.placements]
    assert "50.0 MB/s expected to job 10 (alice/db) kept off switches" in note
    assert "on l2n1 it turns round within one node" in note
    assert "on l0n0, where it would have gone without the graph, only at the core" in note


def test_without_the_graph_or_peers_placement_is_that_of_best_fit() -> None:
    base = _tree().running(_db(), FILLER)
    assert placed_nodes(_plan(base.pending(_client()).build()))[1] == ("l0n0",)
    strangers = TrafficView({}, {"carol/x": {"carol/y": 50 * MB}, "carol/y": {"carol/x": 50 * MB}})
    snap = _tree().running(_db(), FILLER).pending(_client()).traffic(strangers).build()
    assert placed_nodes(_plan(snap))[1] == ("l0n0",)


def test_peers_that_do_not_run_pull_nothing() -> None:
    snap = _tree().running(FILLER).pending(_client()).traffic(VIEW).build()
    plan = _plan(snap)
    assert placed_nodes(plan)[1] == ("l0n0",)
    assert plan.placements[0].note == ""


def test_traffic_below_min_rate_is_not_worth_a_move() -> None:
    slow = TrafficView(
        {}, {"alice/db": {"alice/client": 1_000}, "alice/client": {"alice/db": 1_000}}
    )
    snap = _tree().running(_db(), FILLER).pending(_client()).traffic(slow).build()
    assert placed_nodes(_plan(snap))[1] == ("l0n0",)
    profile = default_profile()
    profile["plugin_args"] = {"harmonic": {"min_rate": 0}}
    assert placed_nodes(build_scheduler(profile).schedule(snap))[1] == ("l2n1",)


def test_a_full_peer_node_leaves_the_same_leaf_next() -> None:
    """The database's node has no room (Filter): its leaf-mate, not a fuller node across
    the spine."""
    snap = _tree().running(_db(cpus=8), FILLER).pending(_client()).traffic(VIEW).build()
    plan = _plan(snap)
    assert placed_nodes(plan)[1] == ("l2n0",)
    assert "within one leaf switch" in plan.placements[0].note


def test_the_spine_counts_when_the_leaf_is_full() -> None:
    busy = make_job(12).user("bob").cpus(8).running_on("l2n0")
    snap = _tree().running(_db(cpus=8), busy).pending(_client()).traffic(VIEW).build()
    # l0 and l1 are under s0, the database's leaf l2 under s1: nothing nearer than the core
    assert placed_nodes(_plan(snap))[1] == ("l0n0",)
    db_on_l1 = _db(on="l1n1", cpus=8)
    filler_l0 = make_job(11).user("bob").cpus(5).running_on("l2n0")
    snap = _tree().running(db_on_l1, filler_l0).pending(_client()).traffic(VIEW).build()
    assert placed_nodes(_plan(snap))[1] == ("l1n0",)


def test_a_new_service_goes_near_its_running_clients() -> None:
    clients = [_client(20 + i).running_on("l1n0") for i in range(3)]
    service = make_job(1).user("alice").name("db").cpus(1)
    snap = _tree().running(*clients, FILLER).pending(service).traffic(VIEW).build()
    assert placed_nodes(_plan(snap))[1] == ("l1n0",)


def test_jobs_placed_earlier_in_the_pass_are_peers_too() -> None:
    """The database and its client wait together; the database goes first (priority)
    and the client follows it in the same pass."""
    db = make_job(1).user("alice").name("db").cpus(4).priority(100).nodelist("l2n1")
    snap = _tree().running(FILLER).pending(db, _client(2).priority(1)).traffic(VIEW).build()
    assert placed_nodes(_plan(snap)) == {1: ("l2n1",), 2: ("l2n1",)}


def test_the_comment_label_names_the_workload() -> None:
    """``--comment=harmonic=LABEL``: a job of another name joins the label's workload."""
    view = TrafficView({}, {"alice/db": {"alice/web": 50 * MB}, "alice/web": {"alice/db": 50 * MB}})
    client = make_job(1).user("alice").name("frontend-2").comment("tier=1 harmonic=web").cpus(2)
    snap = _tree().running(_db(), FILLER).pending(client).traffic(view).build()
    assert placed_nodes(_plan(snap))[1] == ("l2n1",)


def test_no_note_when_the_other_scores_chose_the_same_node() -> None:
    snap = _tree().running(_db()).pending(_client()).traffic(VIEW).build()
    plan = _plan(snap)
    assert placed_nodes(plan)[1] == ("l2n1",)  # the fullest node anyway
    assert plan.placements[0].note == ""


def test_weight_zero_leaves_the_plugin_out() -> None:
    profile = build_scheduler(default_profile(harmonic_weight=0)).profile
    assert "harmonic" not in [p.name for p, _ in profile.score]
    snap = _tree().running(_db(), FILLER).pending(_client()).traffic(VIEW).build()
    assert placed_nodes(build_scheduler(default_profile(harmonic_weight=0)).schedule(snap)) == {
        1: ("l0n0",)
    }


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ({"min_rate": -1}, "min_rate", "bytes per second >= 0"),
        ({"min_rate": "fast"}, "min_rate", "bytes per second >= 0"),
        ({"min_rate": True}, "min_rate", "bytes per second >= 0"),
        ({"weight": 3}, "weight", "unknown argument 'weight'"),
    ],
)
def test_bad_args_are_refused_naming_the_field(
    args: dict[str, object], field: str, message: str
) -> None:
    profile = default_profile()
    profile["plugin_args"] = {"harmonic": args}
    with pytest.raises(ProfileError, match=message) as err:
        build_scheduler(profile)
    assert err.value.field == f"plugin_args.harmonic.{field}"


def test_levels_of_a_switch_tree_with_nvlink_domains() -> None:
    nodes = [
        make_node("a").topology("core", "s0", "l0").nvlink_domain("nvl0").build(),
        make_node("b").topology("core", "s0", "l0").nvlink_domain("nvl0").build(),
        make_node("c").topology("core", "s0", "l0").build(),
        make_node("d").topology("core", "s0", "l1").build(),
        make_node("e").topology("core", "s1", "l2").build(),
    ]
    levels = Levels.of(nodes, TreeIndex.from_nodes(nodes))
    assert levels.names == ("node", "NVLink domain", "leaf switch", "level-1 switch")
    others = levels.shared(0, range(5))
    assert others == [4, 3, 2, 1, 0]
    assert levels.shared(4, range(5)) == [0, 0, 0, 0, 4]
    # a job on a rather than d, peers on b (2 B/s) and e (1 B/s): b's path is shorter
    assert levels.kept((0, 3), [1, 4], [2.0, 1.0]) == (2.0, 3, 1)
    assert [levels.meeting(s) for s in others] == [
        "within one node",
        "within one NVLink domain",
        "within one leaf switch",
        "within one level-1 switch",
        "only at the core",
    ]


def test_levels_without_a_tree_are_the_node_alone() -> None:
    nodes = [make_node(n).build() for n in ("a", "b", "c")]
    levels = Levels.of(nodes, TreeIndex.from_nodes(nodes))
    assert levels.names == ("node",)


def test_levels_of_a_label_tree_name_its_labels() -> None:
    nodes = [
        make_node("a").labels(rack="r1", zone="z1").build(),
        make_node("b").labels(rack="r1", zone="z1").build(),
        make_node("c").labels(rack="r2", zone="z1").build(),
        make_node("d").labels(rack="r3", zone="z2").build(),
    ]
    levels = Levels.of(nodes, TreeIndex.from_nodes(nodes))
    # no region or site labels: every node shares the unnamed one, which tells nothing
    assert levels.names == ("node", "rack", "zone")


def test_reach_is_the_weighted_count_of_shared_levels() -> None:
    """``Levels.reach`` sums switch levels per leaf; it must equal the plain sum over
    peer rows of weight × levels shared, node by node."""
    rng = np.random.default_rng(5)
    nodes = [
        make_node(f"n{i}")
        .topology(f"c{i // 8}", f"s{i // 4}", f"l{i // 2}")
        .nvlink_domain(f"d{i // 3}" if i % 4 else "")
        .build()
        for i in range(16)
    ]
    levels = Levels.of(nodes, TreeIndex.from_nodes(nodes))
    assert levels.names == (
        "node",
        "NVLink domain",
        "leaf switch",
        "level-1 switch",
        "level-2 switch",
    )
    rows = rng.integers(0, 16, size=7).astype(np.intp)
    weights = rng.random(7)
    d = levels.domains
    expected = [(weights * (d[:, rows] == d[:, [n]]).sum(axis=0)).sum() for n in range(16)]
    assert np.allclose(levels.reach(rows, weights), expected)
