"""The label tree when some nodes carry no label at all (an agent started without
--topology-label next to labelled ones): the labelled nodes still form racks and zones
that --topology required=rack/zone can name; the unlabelled node is a rack of its own."""

from __future__ import annotations

from hal.core.states import PendingReason as R
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.topology import TreeIndex
from hal.testing import JobBuilder, NodeBuilder, cluster, make_job, make_node, placed_nodes, reasons

NOW = 1_000_000.0


def _nodes() -> list[NodeBuilder]:
    """r1: a1, a2; r2: b1, b2 (both zone z1), listed so row order mixes racks; x has
    no label."""
    return [
        make_node("a1").labels(rack="r1", zone="z1"),
        make_node("b1").labels(rack="r2", zone="z1"),
        make_node("x"),
        make_node("a2").labels(rack="r1", zone="z1"),
        make_node("b2").labels(rack="r2", zone="z1"),
    ]


def _run(job: JobBuilder) -> tuple[tuple[str, ...] | None, R | None]:
    snap = cluster(NOW).nodes(*_nodes()).pending(job).build()
    plan = build_scheduler(default_profile()).schedule(snap)
    return placed_nodes(plan).get(job.build().id), reasons(plan).get(job.build().id)


def test_label_levels_ignore_unlabelled_nodes() -> None:
    index = TreeIndex.from_nodes([n.build() for n in _nodes()])
    assert index.label_levels == ("rack", "zone")


def test_required_rack_with_an_unlabelled_node() -> None:
    """Was BadConstraints: the unlabelled node's leaf hid the label tree from the plugin
    while the server accepted the level at submit."""
    placed, reason = _run(make_job(1).nodes(2).topology("rack", required=True))
    assert reason is None
    assert placed is not None and {n[0] for n in placed} in ({"a"}, {"b"})


def test_required_zone_never_takes_the_unlabelled_node() -> None:
    placed, reason = _run(make_job(1).nodes(4).topology("zone", required=True))
    assert reason is None
    assert placed is not None and sorted(placed) == ["a1", "a2", "b1", "b2"]


def test_required_zone_larger_than_the_zone_is_bad_constraints() -> None:
    """Five nodes, but zone z1 has four: the unlabelled node is not in it."""
    placed, reason = _run(make_job(1).nodes(5).topology("zone", required=True))
    assert placed is None and reason is R.BAD_CONSTRAINTS


def test_unlabelled_node_never_sits_in_a_labelled_rack() -> None:
    """Without a constraint the job still lands in one rack, never with x."""
    placed, _ = _run(make_job(1).nodes(2))
    assert placed is not None and "x" not in placed and len({n[0] for n in placed}) == 1
