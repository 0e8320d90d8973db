"""topology on the label tree (no switches or blocks): multi-node jobs into the fewest
racks, --topology required=rack/zone, unknown levels, and multi-node NVLink domains."""

from __future__ import annotations

from collections.abc import Sequence

from hal.core.states import PendingReason as R
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import JobBuilder, NodeBuilder, cluster, make_job, make_node, placed_nodes, reasons

NOW = 1_000_000.0
J = make_job

# rack → zone; node "<rack>-<i>"
ZONES = {"r1": "z1", "r2": "z1", "r3": "z2", "r4": "z2"}


def _nodes(sizes: dict[str, int]) -> list[NodeBuilder]:
    """Nodes listed round-robin across racks, so row order alone would mix racks."""
    per_rack = [
        [make_node(f"{r}-{i}").labels(rack=r, zone=ZONES[r]) for i in range(n)]
        for r, n in sizes.items()
    ]
    out: list[NodeBuilder] = []
    for i in range(max(len(g) for g in per_rack)):
        out.extend(g[i] for g in per_rack if i < len(g))
    return out


def _run(
    nodes: Sequence[NodeBuilder], job: JobBuilder, busy: Sequence[str] = ()
) -> tuple[tuple[str, ...] | None, R | None]:
    snap = cluster(NOW).nodes(*nodes).pending(job)
    if busy:
        snap = snap.running(
            J(900).tasks(8 * len(busy), per_node=8).nodes(len(busy)).running_on(*busy)
        )
    plan = build_scheduler(default_profile()).schedule(snap.build())
    return placed_nodes(plan).get(job.build().id), reasons(plan).get(job.build().id)


def _racks(nodes: Sequence[str]) -> set[str]:
    return {n.split("-")[0] for n in nodes}


def test_job_lands_in_one_rack_best_fit() -> None:
    """r2 has exactly 3 free nodes: the 3-node job takes it and leaves r1 whole."""
    placed, _ = _run(_nodes({"r1": 4, "r2": 3, "r3": 4}), J(1).nodes(3))
    assert placed is not None and _racks(placed) == {"r2"}


def test_no_rack_fits_fewest_racks_within_one_zone() -> None:
    """6 nodes: no rack has 6; both zones cover it in 2 racks; z2 (6 free) is the
    fuller one, so the job fills it and z1 (8 free) stays whole."""
    placed, _ = _run(_nodes({"r1": 4, "r2": 4, "r3": 3, "r4": 3}), J(1).nodes(6))
    assert placed is not None and _racks(placed) == {"r3", "r4"}


def test_a_rack_in_another_zone_is_not_mixed_in() -> None:
    """5 nodes: z1 can (r1 4 + r2 1), and the job never takes nodes of z2."""
    placed, _ = _run(_nodes({"r1": 4, "r2": 2, "r3": 4}), J(1).nodes(5))
    assert placed is not None and _racks(placed) == {"r1", "r2"}


def test_required_rack_waits_for_resources_when_no_rack_has_room() -> None:
    nodes = _nodes({"r1": 2, "r2": 2})
    placed, reason = _run(
        nodes, J(1).nodes(2).topology("rack", required=True), busy=["r1-0", "r2-0"]
    )
    assert placed is None and reason is R.RESOURCES


def test_required_zone_larger_than_every_zone_is_bad_constraints() -> None:
    placed, reason = _run(_nodes({"r1": 2, "r3": 2}), J(1).nodes(3).topology("zone", required=True))
    assert placed is None and reason is R.BAD_CONSTRAINTS


def test_a_level_no_node_is_labelled_with_is_bad_constraints() -> None:
    placed, reason = _run(_nodes({"r1": 2}), J(1).nodes(2).topology("site", required=True))
    assert placed is None and reason is R.BAD_CONSTRAINTS


def test_without_any_topology_a_level_is_bad_constraints_and_placement_unchanged() -> None:
    nodes = [make_node(f"n{i}") for i in range(4)]
    placed, reason = _run(nodes, J(1).nodes(2).topology("rack", required=True))
    assert placed is None and reason is R.BAD_CONSTRAINTS
    placed, _ = _run(nodes, J(2).nodes(2))
    assert placed == ("n0", "n1")  # node-score order, ties to the lower row


def _gpu_nodes() -> list[NodeBuilder]:
    """nvl0: g0-g3, nvl1: g4-g5, g6 without a domain."""
    out = [make_node(f"g{i}").gpus(4).nvlink_domain("nvl0") for i in range(4)]
    out += [make_node(f"g{i}").gpus(4).nvlink_domain("nvl1") for i in (4, 5)]
    return [*out, make_node("g6").gpus(4)]


def test_required_nvlink_multi_node_job_stays_in_one_domain_best_fit() -> None:
    placed, _ = _run(_gpu_nodes(), J(1).nodes(2).gpus(4).topology("nvlink", required=True))
    assert placed is not None and set(placed) == {"g4", "g5"}  # nvl1 fits exactly


def test_required_nvlink_waits_rather_than_split_domains() -> None:
    """3 nodes: nvl0 has only 2 free, nvl1 2: 4 free nodes exist, none in one domain."""
    placed, reason = _run(
        _gpu_nodes(), J(1).nodes(3).gpus(4).topology("nvlink", required=True), busy=["g0", "g1"]
    )
    assert placed is None and reason is R.RESOURCES


def test_required_nvlink_larger_than_every_domain_is_bad_constraints() -> None:
    placed, reason = _run(_gpu_nodes(), J(1).nodes(5).gpus(4).topology("nvlink", required=True))
    assert placed is None and reason is R.BAD_CONSTRAINTS


def test_preferred_nvlink_spans_domains_when_none_fits() -> None:
    placed, _ = _run(_gpu_nodes(), J(1).nodes(3).gpus(4).topology("nvlink"), busy=["g0", "g1"])
    assert placed is not None and len(placed) == 3
