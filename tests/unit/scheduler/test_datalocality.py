"""datalocality: the job's --data inputs steer it to nodes whose leaf cache holds them."""

from __future__ import annotations

import pytest

from hal.core.data import CacheTree, DataView, Link
from hal.core.states import PendingReason
from hal.scheduler.framework import ProfileError
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import JobBuilder, cluster, make_job, make_node, placed_nodes, reasons

GB = 1_000_000_000
TREE = CacheTree(
    parent={"root": None, "r1": "root", "r2": "root", "l1": "r1", "l2": "r1", "l3": "r2"},
    uplink={
        "r1": Link(1, 10_000, 2),
        "r2": Link(1, 10_000, 2),
        **{leaf: Link(0.5, 25_000, 0.5) for leaf in ("l1", "l2", "l3")},
    },
)
# two nodes per leaf, listed so that plain row order would pick the l1 nodes first
NODE_LEAF = {"a1": "l1", "a2": "l1", "b1": "l2", "b2": "l2", "c1": "l3", "c2": "l3"}


def _place(view: DataView | None, job_keys: tuple[str, ...], nodes: int = 1) -> tuple[str, ...]:
    built = cluster().nodes(*(make_node(n).cpus(8) for n in NODE_LEAF))
    built = built.pending(make_job(1).data(*job_keys).nodes(nodes))
    if view is not None:
        built = built.data(view)
    plan = build_scheduler(default_profile(data=True)).schedule(built.build())
    placed = placed_nodes(plan).get(1)
    assert placed is not None
    return placed


def _view(holders: dict[str, dict[str, int]]) -> DataView:
    return DataView(TREE, holders, NODE_LEAF)


def test_a_job_goes_to_the_node_whose_leaf_holds_its_input() -> None:
    assert _place(_view({"ds": {"l3": GB}}), ("ds",)) == ("c1",)


def test_the_nearer_copy_wins_when_no_leaf_holds_it() -> None:
    # r2 holds it: l3 pulls over one link; l1/l2 through the root
    assert _place(_view({"ds": {"r2": GB}}), ("ds",)) == ("c1",)


def test_most_bytes_local_wins_over_more_keys_local() -> None:
    holders = {"big": {"l2": 10 * GB}, "s1": {"l3": GB}, "s2": {"l3": GB}}
    assert _place(_view(holders), ("big", "s1", "s2")) == ("b1",)


def test_multi_node_jobs_take_the_nodes_by_locality() -> None:
    assert set(_place(_view({"ds": {"l2": GB}}), ("ds",), nodes=2)) == {"b1", "b2"}


def test_without_inputs_a_view_or_known_keys_placement_is_unchanged() -> None:
    view = _view({"ds": {"l3": GB}})
    assert _place(view, ()) == ("a1",)  # no --data
    assert _place(None, ("ds",)) == ("a1",)  # no data plane
    assert _place(view, ("unknown",)) == ("a1",)  # in no cache: nothing to prefer


def test_cost_weight_must_be_a_non_negative_number() -> None:
    profile = default_profile(data=True)
    profile["plugin_args"] = {"datalocality": {"cost_weight": -1}}
    with pytest.raises(ProfileError, match="seconds per cost unit") as err:
        build_scheduler(profile)
    assert err.value.field is not None and "cost_weight" in err.value.field


def _wait_case(
    waited_s: float, holders: dict[str, dict[str, int]], job: JobBuilder | None = None
) -> tuple[tuple[str, ...] | None, PendingReason | None]:
    """l1's nodes (a1, a2: 8 cpus) are busy, the others have 16 and feature "wide"; the
    job has waited ``waited_s``; locality_wait 60 s."""
    now = 1_000_000.0
    busy = make_job(900).tasks(16, per_node=8).nodes(2).running_on("a1", "a2")
    snap = (
        cluster(now)
        .nodes(
            *(
                make_node(n).cpus(8) if leaf == "l1" else make_node(n).cpus(16).features("wide")
                for n, leaf in NODE_LEAF.items()
            )
        )
        .running(busy)
        .pending((job or make_job(1)).data("ds").submitted(now - waited_s))
        .data(_view(holders))
        .build()
    )
    plan = build_scheduler(default_profile(data=True, locality_wait_s=60)).schedule(snap)
    return placed_nodes(plan).get(1), reasons(plan).get(1)


def test_a_job_waits_for_a_busy_node_by_its_data_then_takes_what_is_free() -> None:
    placed, reason = _wait_case(10, {"ds": {"l1": GB}})
    assert placed is None and reason == PendingReason.DATA_LOCALITY
    placed, _ = _wait_case(61, {"ds": {"l1": GB}})  # waited long enough
    assert placed is not None and placed[0] not in ("a1", "a2")


def test_no_wait_when_no_busy_node_holds_more_of_the_data() -> None:
    placed, _ = _wait_case(10, {"ds": {"r1": GB}})  # only a branch holds it: no leaf better
    assert placed == ("b1",)


def test_no_wait_for_a_busy_node_the_job_could_never_run_on() -> None:
    """l1 (busy a1, a2) holds the data, but the job excludes them, wants a feature they
    lack, is pinned elsewhere or needs more cpus than they have: waiting for them gains
    nothing, so it starts at once (it used to wait locality_wait seconds)."""
    holders = {"ds": {"l1": GB}}
    for job in (
        make_job(1).exclude("a1", "a2"),
        make_job(1).constraint("wide"),
        make_job(1).nodelist("b1"),
        make_job(1).cpus(12),
    ):
        placed, reason = _wait_case(10, holders, job)
        assert placed is not None and reason is None, job.build().spec
    placed, reason = _wait_case(10, holders, make_job(1).cpus(8))  # a1, a2 would do
    assert placed is None and reason == PendingReason.DATA_LOCALITY


def test_the_locality_wait_counts_from_the_begin_time() -> None:
    """Submitted an hour ago to begin 10 s ago, the job has waited 10 s for its data's
    node, not an hour: it still waits (it took what was free at once before)."""
    now = 1_000_000.0
    job = make_job(1).begin(now - 10)
    placed, reason = _wait_case(3600, {"ds": {"l1": GB}}, job)
    assert placed is None and reason == PendingReason.DATA_LOCALITY
