"""topology: multi-node jobs on one leaf switch when one fits, otherwise the fewest leaves
under the lowest switch; --topology required/preferred; --switches waits; the framework's
Placement stage (PlacementGenerate / PlacementScore)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from hal.core.job import Job
from hal.core.states import PendingReason as R
from hal.core.topology import Topology
from hal.scheduler.framework import (
    Code,
    CycleState,
    PassContext,
    Profile,
    ProfileError,
    Scheduler,
    Status,
)
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.scheduler.plugins.noderesources import NodeResourcesFit
from hal.scheduler.plugins.priority import new as new_priority
from hal.testing import JobBuilder, NodeBuilder, cluster, make_job, make_node, placed_nodes, reasons

NOW = 1_000_000.0
J = make_job

# leaf name → its spine; node "<leaf>-<i>"
SPINES = {"a": "s0", "b": "s0", "c": "s0", "d": "s1", "e": "s1", "f": "s1"}


def _nodes(sizes: dict[str, int], *, interleave: bool = False) -> list[NodeBuilder]:
    """Nodes of each leaf; ``interleave`` lists them round-robin across leaves, so row
    order (what a topology-unaware scheduler follows) jumps between leaves."""
    per_leaf = [
        [make_node(f"{leaf}-{i}").topology(SPINES[leaf], leaf) for i in range(n)]
        for leaf, n in sizes.items()
    ]
    if not interleave:
        return [n for group in per_leaf for n in group]
    out: list[NodeBuilder] = []
    for i in range(max(len(g) for g in per_leaf)):
        out.extend(g[i] for g in per_leaf if i < len(g))
    return out


def _busy(*names: str) -> JobBuilder:
    """One job holding every CPU of ``names``."""
    return J(900).tasks(8 * len(names), per_node=8).nodes(len(names)).running_on(*names)


def _sched() -> Scheduler:
    return build_scheduler(default_profile(topology=Topology(level_names=("leaf", "spine"))))


def _run(
    sizes: dict[str, int],
    job: JobBuilder,
    busy: Sequence[str] = (),
    *,
    interleave: bool = False,
    now: float = NOW,
) -> tuple[tuple[str, ...] | None, R | None]:
    snap = cluster(now).nodes(*_nodes(sizes, interleave=interleave)).pending(job)
    if busy:
        snap = snap.running(_busy(*busy))
    plan = _sched().schedule(snap.build())
    placed = placed_nodes(plan).get(job.build().id)
    return placed, reasons(plan).get(job.build().id)


def _leaves(nodes: Sequence[str]) -> set[str]:
    return {n.split("-")[0] for n in nodes}


def test_two_node_job_lands_on_one_leaf_even_when_rows_interleave() -> None:
    """Row order alternates leaves; a topology-unaware pick would take a-0 and b-0."""
    placed, _ = _run({"a": 4, "b": 4}, J(1).nodes(2), interleave=True)
    assert placed is not None and len(_leaves(placed)) == 1


def test_best_fit_leaf_is_the_one_with_fewest_free_nodes_that_fit() -> None:
    """Leaf a has 3 free, b has 2: a 2-node job takes b and keeps a's 3 for bigger jobs."""
    placed, _ = _run({"a": 3, "b": 4}, J(1).nodes(2), busy=("b-0", "b-1"))
    assert placed == ("b-2", "b-3")


def test_no_leaf_fits_fewest_leaves_whole_largest_then_best_fit_remainder() -> None:
    """5 nodes over leaves with 4, 4 and 2 free: 2 leaves; one 4-leaf whole, the last
    node from the 2-free leaf (best fit), leaving the other 4-leaf whole."""
    placed, _ = _run({"a": 4, "b": 4, "c": 4}, J(1).nodes(5), busy=("c-0", "c-1"))
    assert placed is not None
    assert _leaves(placed) == {"a", "c"}
    assert sum(n.startswith("a") for n in placed) == 4


def test_lowest_switch_with_the_fewest_leaves_and_the_fullest_spine() -> None:
    """6 nodes: both spines can do it with 2 leaves; s1 has fewer free nodes in all."""
    placed, _ = _run(
        {"a": 3, "b": 3, "c": 1, "d": 3, "e": 3, "f": 1},
        J(1).nodes(6),
        busy=("f-0",),
    )
    assert placed is not None and _leaves(placed) == {"d", "e"}


def test_the_lowest_spine_that_reaches_the_fewest_leaves() -> None:
    """5 nodes: s0's leaves have 2 free each (3 leaves); s1's d and e have 3 and 2
    (2 leaves). Fewest leaves wins, and s1 holds them both."""
    placed, _ = _run(
        {"a": 2, "b": 2, "c": 2, "d": 3, "e": 2},
        J(1).nodes(5),
    )
    assert placed is not None and _leaves(placed) == {"d", "e"}


def test_single_node_and_nodelist_jobs_are_left_to_node_scores() -> None:
    placed, _ = _run({"a": 2, "b": 2}, J(1), interleave=True)
    assert placed == ("a-0",)
    placed, _ = _run({"a": 2, "b": 2}, J(1).nodes(2).nodelist("a-0", "b-0"))
    assert placed == ("a-0", "b-0")


@pytest.mark.parametrize(
    ("situation", "sizes", "busy", "job", "expected"),
    [
        (
            "required leaf fits",
            {"a": 2, "b": 4},
            (),
            J(1).nodes(3).topology("leaf", required=True),
            {"b"},
        ),
        (
            "required leaf, none free enough now: Resources",
            {"a": 4, "b": 4},
            ("a-0", "b-0"),
            J(1).nodes(4).topology("leaf", required=True),
            R.RESOURCES,
        ),
        (
            "required leaf larger than every leaf: BadConstraints",
            {"a": 2, "b": 2},
            (),
            J(1).nodes(3).topology("leaf", required=True),
            R.BAD_CONSTRAINTS,
        ),
        (
            "unknown level: BadConstraints",
            {"a": 2, "b": 2},
            (),
            J(1).nodes(2).topology("rack", required=True),
            R.BAD_CONSTRAINTS,
        ),
        (
            "required spine by its configured name",
            {"a": 2, "b": 2, "d": 3},
            (),
            J(1).nodes(4).topology("spine", required=True),
            {"a", "b"},
        ),
        (
            "required spine, none has enough free: Resources",
            {"a": 2, "b": 2, "d": 2, "e": 2},
            ("a-0", "d-0"),
            J(1).nodes(4).topology("spine", required=True),
            R.RESOURCES,
        ),
        (
            "preferred spine keeps the job in one spine at the cost of a leaf",
            {"a": 2, "b": 2, "c": 2, "d": 3, "e": 1, "f": 1},
            ("e-0", "f-0"),
            J(1).nodes(5).topology("spine"),
            {"a", "b", "c"},
        ),
        (
            "preferred leaf falls back to spanning",
            {"a": 2, "b": 2},
            (),
            J(1).nodes(3).topology("leaf"),
            {"a", "b"},
        ),
    ],
)
def test_topology_constraints(
    situation: str,
    sizes: dict[str, int],
    busy: tuple[str, ...],
    job: JobBuilder,
    expected: set[str] | R,
) -> None:
    placed, reason = _run(sizes, job, busy)
    if isinstance(expected, R):
        assert placed is None and reason is expected, situation
    else:
        assert placed is not None and _leaves(placed) == expected, situation


def test_default_placement_spans_spines_where_preferred_spine_would_not() -> None:
    """The counterpart of the preferred-spine case: s0 could hold 5 nodes only on 3
    leaves; spanning both spines does it on 2 (d's 3 and 2 of one s0 leaf)."""
    placed, _ = _run(
        {"a": 2, "b": 2, "c": 2, "d": 3, "e": 1, "f": 1},
        J(1).nodes(5),
        busy=("e-0", "f-0"),
    )
    assert placed is not None and len(_leaves(placed)) == 2 and "d" in _leaves(placed)


def test_switches_waits_for_fewer_leaves_then_takes_any_after_max_wait() -> None:
    """--switches=1@600: no leaf has 3 free; the job waits (Topology) and does not hold
    back a smaller job behind it; after 600 s it takes 2 leaves."""
    sizes = {"a": 2, "b": 2}
    job = J(1).nodes(3).switches(1, 600).submitted(NOW - 10).priority(10)
    small = J(2).submitted(NOW - 5)
    snap = cluster(NOW).nodes(*_nodes(sizes)).pending(job, small).build()
    plan = _sched().schedule(snap)
    assert reasons(plan)[1] is R.TOPOLOGY
    assert 2 in placed_nodes(plan)  # the small job was not blocked
    later = cluster(NOW + 600).nodes(*_nodes(sizes)).pending(job).build()
    placed = placed_nodes(_sched().schedule(later))[1]
    assert _leaves(placed) == {"a", "b"}


def test_switches_wait_end_is_the_expected_start() -> None:
    """squeue --start foresees the end of a --switches wait: submitted 10 s ago with
    @600, it takes any placement 590 s from now (capped by max_switch_wait: 290 s)."""
    for wait, left in ((600, 290), (120, 110)):
        job = J(1).nodes(3).switches(1, wait).submitted(NOW - 10)
        snap = cluster(NOW).nodes(*_nodes({"a": 2, "b": 2})).pending(job).build()
        (update,) = _sched().schedule(snap).updates
        assert (update.reason, update.expected_start) == (R.TOPOLOGY, NOW + left)


def test_switches_wait_is_capped_by_max_switch_wait() -> None:
    """The user asks for an hour; the site's max_switch_wait (default 300 s) caps it."""
    placed, reason = _run({"a": 2, "b": 2}, J(1).nodes(3).switches(1, 3600).submitted(NOW - 301))
    assert placed is not None and reason is None
    placed, reason = _run({"a": 2, "b": 2}, J(1).nodes(3).switches(1, 3600).submitted(NOW - 299))
    assert placed is None and reason is R.TOPOLOGY


def test_switches_met_or_zero_wait_places_at_once() -> None:
    placed, _ = _run({"a": 2, "b": 2}, J(1).nodes(3).switches(2).submitted(NOW))
    assert placed is not None
    placed, _ = _run({"a": 2, "b": 2}, J(1).nodes(3).switches(1, 0).submitted(NOW))
    assert placed is not None


def test_required_shortage_blocks_lower_priority_jobs_like_resources() -> None:
    """A required-leaf job short of a free leaf is a shortage: the job behind it waits
    with Priority instead of taking the nodes the first one waits for."""
    big = J(1).nodes(3).topology("leaf", required=True).priority(10)
    small = J(2).priority(1)
    snap = cluster(NOW).nodes(*_nodes({"a": 3, "b": 3})).running(_busy("a-0", "b-0"))
    # the main pass alone: backfill would start job 2 where it delays nobody
    topo = Topology(level_names=("leaf", "spine"))
    sched = build_scheduler(default_profile(topology=topo, backfill=False))
    plan = sched.schedule(snap.pending(big, small).build())
    assert reasons(plan) == {1: R.RESOURCES, 2: R.PRIORITY}


def test_the_default_profile_always_has_the_topology_plugin() -> None:
    """Labels and NVLink domains come from agents at any time, so the plugin is there
    even when the config has no [topology]."""
    assert "topology" in default_profile()["plugins"]  # type: ignore[operator]
    assert "topology" in default_profile(topology=Topology())["plugins"]  # type: ignore[operator]


def test_will_run_sees_a_leaf_freed_by_a_running_job() -> None:
    """squeue --start for --switches=1: the start is when a running job frees a leaf."""
    job = J(1).nodes(3).switches(1, 3000).submitted(NOW).build()
    running = _busy("a-0").limit(600).running_on("a-0", start=NOW - 100)
    snap = cluster(NOW).nodes(*_nodes({"a": 3, "b": 2})).running(running).build()
    found = _sched().will_run(snap, job)
    assert not isinstance(found, Status)
    assert found.start_time == NOW + 500
    assert _leaves(found.nodes) == {"a"}


# -- the framework's Placement stage, with fake plugins ---------------------------------


class _Sets:
    """PlacementGenerate returning fixed answers."""

    name = "sets"

    def __init__(self, answer: Sequence[Sequence[int]] | Status) -> None:
        self.answer = answer

    def generate(
        self, ctx: PassContext, state: CycleState, job: Job, ranked: np.ndarray, count: int
    ) -> Sequence[np.ndarray] | Status:
        if isinstance(self.answer, Status):
            return self.answer
        return [np.array(s, dtype=np.intp) for s in self.answer]


class _PreferRow:
    """PlacementScore: sets containing ``row`` score higher."""

    name = "prefer"

    def __init__(self, row: int) -> None:
        self.row = row

    def score_placement(
        self, ctx: PassContext, state: CycleState, job: Job, nodes: np.ndarray
    ) -> float:
        return float(self.row in nodes.tolist())


def _fake(*plugins: object) -> Scheduler:
    base = [new_priority({}), NodeResourcesFit()]
    return Scheduler(Profile.from_plugins([*base, *plugins]))  # type: ignore[list-item]


def test_placement_score_picks_among_generated_sets() -> None:
    snap = cluster(NOW).uniform_nodes(4).pending(J(1).nodes(2)).build()
    plan = _fake(_Sets([[0, 1], [2, 3]]), _PreferRow(3)).schedule(snap)
    assert placed_nodes(plan)[1] == ("n0003", "n0004")
    plan = _fake(_Sets([[0, 1], [2, 3]])).schedule(snap)  # no scorer: the first set
    assert placed_nodes(plan)[1] == ("n0001", "n0002")


def test_generate_with_a_bad_set_fails_only_that_job() -> None:
    snap = cluster(NOW).uniform_nodes(4).pending(J(1).nodes(2), J(2)).build()
    result = _fake(_Sets([[0, 0]])).run_pass(snap)
    assert result.statuses[1].code is Code.ERROR and result.statuses[1].plugin == "sets"
    assert 2 in placed_nodes(result.plan)


def test_generate_skip_leaves_the_choice_to_node_scores() -> None:
    snap = cluster(NOW).uniform_nodes(4).pending(J(1).nodes(2)).build()
    plan = _fake(_Sets(Status(Code.SKIP))).schedule(snap)
    assert 1 in placed_nodes(plan)


def test_two_placement_generators_are_refused() -> None:
    with pytest.raises(ProfileError, match="PlacementGenerate"):
        Profile.from_plugins([new_priority({}), _Sets([]), _Sets([])])


def test_registry_knows_topology_and_checks_its_args() -> None:
    registry = default_registry()
    assert "topology" in registry
    config = default_profile(topology=Topology())
    config["plugin_args"]["topology"] = {"max_switch_wait": -1}  # type: ignore[index]
    with pytest.raises(ProfileError, match="whole number of seconds") as err:
        build_scheduler(config)
    assert err.value.field == "plugin_args.topology.max_switch_wait"
