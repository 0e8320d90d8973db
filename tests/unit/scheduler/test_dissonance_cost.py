"""dissonance: what the plugin keeps to cost less per job (issue 53) gives the scores and
decisions it would give without it — the matrix's coefficients kept per view, a key
nothing harms scored by one number, the pass's table read by the Score fast path after
a node's neighbours changed, and the runtime's handling of a 0-d or no score — and
that none of it scores a placement at a later instant (backfill's reservations)."""

from __future__ import annotations

import numpy as np
import pytest

from hal.core.dissonance import DissonanceView
from hal.core.job import Allocation
from hal.core.profiles import CLASSES, PROFILE_CLASS
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import MAX_NODE_SCORE
from hal.scheduler.framework.keys import PLAN_START
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.dissonance import plugin as dissonance
from hal.testing import JobBuilder, cluster, make_job, placed_nodes

SCHED = build_scheduler(default_profile())
OFF = build_scheduler(default_profile(dissonance_weight=0))
REQUEST = NodeRequest(1, 2, None, 0, False)
FEASIBLE = np.arange(3, dtype=np.intp)


def _matrix(**cells: float) -> dict[str, dict[str, float]]:
    out = {v: dict.fromkeys(CLASSES, 1.0) for v in CLASSES}
    for name, value in cells.items():
        v, a = name.split("_")
        out[v][a] = value
    return out


# memory beside memory 1.8x: the memory keys are harmed, light/io/network/cpu are not
# (cpu inflicts nothing and suffers nothing here)
CLASH = DissonanceView(_matrix(memory_memory=1.8))
CALM = DissonanceView(_matrix())


def _job(job_id: int, cls: str, cpus: int = 2) -> JobBuilder:
    return make_job(job_id).user("ann").name(f"w{job_id}").cpus(cpus).extra(PROFILE_CLASS, cls)


def _ctx(view: DissonanceView) -> PassContext:
    hog = _job(10, "memory", cpus=4).running_on("n0001")
    snap = cluster().uniform_nodes(3, cpus=8).running(hog).dissonance(view).build()
    return PassContext.from_snapshot(snap)


def _weighted(
    plugin: dissonance.Dissonance, ctx: PassContext, job_id: int, cls: str, weight: float = 2.0
) -> tuple[np.ndarray, np.ndarray, CycleState]:
    built = _job(job_id, cls).build()
    state = CycleState()
    plain = plugin.score(ctx, state, built, REQUEST, FEASIBLE)
    weighted = plugin.weighted_score(weight, ctx, state, built, REQUEST, FEASIBLE)
    assert weighted is not None
    return plain, weighted, state


def test_a_key_nothing_harms_is_one_number_the_same_as_its_column_bit_for_bit() -> None:
    """A light job under a matrix where only memory clashes scores 100 on every node
    whatever its neighbours: its weighted score is 0-d (the runtime adds it to every
    candidate without a gather), the same float64 as each of ``score * weight``, also
    after a placement changed a node's neighbours."""
    plugin = dissonance.new({})
    ctx = _ctx(CLASH)
    for step in range(3):
        plain, weighted, state = _weighted(plugin, ctx, 1 + step, "light")
        assert weighted.ndim == 0
        full = np.broadcast_to(weighted, plain.shape)
        assert full.tobytes() == (plain * 2.0).tobytes()
        held = (ResourceVector(2, GiB),)
        plugin.reserve(ctx, state, _job(1 + step, "light").build(), Allocation(("n0001",), held))
    plain, weighted, _ = _weighted(plugin, ctx, 9, "memory")
    assert weighted.shape == (3,)  # (harmed: a column, the hog's node lower)
    assert weighted.tobytes() == (plain * 2.0).tobytes()
    assert plain[0] < plain[1] == plain[2]


def test_the_fast_path_reads_the_table_after_a_node_s_neighbours_changed() -> None:
    """Once a key's column is made, Score reads it as Reserve keeps it: a memory job
    placed on n0002 lowers n0002 for the next memory job, Unreserve gives it back."""
    plugin = dissonance.new({})
    ctx = _ctx(CLASH)
    first, _, state = _weighted(plugin, ctx, 1, "memory")
    built = _job(1, "memory").build()
    allocation = Allocation(("n0002",), (ResourceVector(2, GiB),))
    plugin.reserve(ctx, state, built, allocation)
    after, weighted, _ = _weighted(plugin, ctx, 2, "memory")
    assert after[1] < first[1] and after[2] == first[2]
    assert weighted.tobytes() == (after * 2.0).tobytes()
    plugin.unreserve(ctx, state, built, allocation)
    again, weighted, _ = _weighted(plugin, ctx, 3, "memory")
    assert again.tobytes() == first.tobytes()
    assert weighted.tobytes() == (first * 2.0).tobytes()


def test_the_coefficients_are_worked_out_again_for_a_new_view() -> None:
    """The matrix's coefficients are kept for the view they were made from: a pass under
    a new view (the model learned) scores by the new matrix, and one under a new view
    with the first matrix as the first did."""
    plugin = dissonance.new({})
    clash, _, _ = _weighted(plugin, _ctx(CLASH), 1, "memory")
    calm, weighted, _ = _weighted(plugin, _ctx(CALM), 1, "memory")
    assert clash[0] < 100.0 and (calm == 100.0).all() and weighted.ndim == 0
    again, _, _ = _weighted(plugin, _ctx(DissonanceView(_matrix(memory_memory=1.8))), 1, "memory")
    assert again.tobytes() == clash.tobytes()


def test_without_clashes_reserve_keeps_nothing_and_the_pass_places_as_without() -> None:
    """A matrix where nothing clashes beyond the tolerance (a young model's priors): no
    row is worked out again, no note, and the same nodes as without the plugin."""
    plugin = dissonance.new({})
    ctx = _ctx(CALM)
    _, weighted, state = _weighted(plugin, ctx, 1, "memory")
    assert weighted.ndim == 0
    allocation = Allocation(("n0001",), (ResourceVector(2, GiB),))
    plugin.reserve(ctx, state, _job(1, "memory").build(), allocation)
    nodes = ctx.data.get(dissonance.NODES)
    assert nodes is not None and not nodes.placed
    hog = _job(10, "memory", cpus=5).running_on("n0001")
    pending = [_job(1 + k, ("memory", "light", "io")[k % 3], cpus=1 + k % 3) for k in range(6)]
    builder = cluster().uniform_nodes(3, cpus=8).running(hog).pending(*pending)
    snap = builder.dissonance(CALM).build()
    plan = SCHED.schedule(snap)
    assert placed_nodes(plan) == placed_nodes(OFF.schedule(snap))
    assert not any(p.note for p in plan.placements)


def test_a_constant_score_first_among_the_scorers_decides_as_it_does_last() -> None:
    """The runtime adds a 0-d score to every candidate, and makes it a vector when it is
    the first score of the job (argmax and argsort need one): with the plugin before
    best fit, the same placements and notes as with it after."""
    profile = default_profile()
    plugins = profile["plugins"]
    assert isinstance(plugins, list)
    plugins.remove("dissonance")
    plugins.insert(0, "dissonance")
    first = build_scheduler(profile)
    hog = _job(10, "memory", cpus=5).running_on("n0001")
    pending = [_job(1 + k, ("memory", "light", "cpu")[k % 3], cpus=1 + k % 4) for k in range(9)]
    builder = cluster().uniform_nodes(3, cpus=8).running(hog).pending(*pending)
    snap = builder.dissonance(CLASH).build()
    ours, last = first.schedule(snap), SCHED.schedule(snap)
    assert [(p.job_id, p.allocation.nodes, p.note) for p in ours.placements] == [
        (p.job_id, p.allocation.nodes, p.note) for p in last.placements
    ]
    assert any(p.note for p in last.placements)


def test_a_reservation_at_a_later_start_gets_no_opinion() -> None:
    """Backfill reserves a later start in the pass's own context (``PLAN_START`` past
    ``now``, ``now`` the snapshot's): who will be the job's neighbours then is unknown,
    so Score says None there, also on the fast path (the job's key kept, the table
    made), and Reserve keeps nothing; at ``now`` itself it scores as before."""
    plugin = dissonance.new({})
    ctx = _ctx(CLASH)
    plain, weighted, _ = _weighted(plugin, ctx, 1, "memory")  # (key kept, table made)
    assert not dissonance.later(ctx)
    built = _job(1, "memory").build()
    ctx.data.write(PLAN_START, ctx.now)
    assert not dissonance.later(ctx)
    assert plugin.job_key(ctx, built) == ("memory", False)
    ctx.data.write(PLAN_START, ctx.now + 3600)
    assert dissonance.later(ctx)
    assert plugin.job_key(ctx, built) is None
    state = CycleState()
    assert plugin.weighted_score(2.0, ctx, state, built, REQUEST, FEASIBLE) is None
    assert dissonance.KEY not in state
    allocation = Allocation(("n0002",), (ResourceVector(2, GiB),))
    plugin.reserve(ctx, state, built, allocation)
    nodes = ctx.data.get(dissonance.NODES)
    assert nodes is not None and not nodes.placed
    ctx.data.delete(PLAN_START)
    again = plugin.weighted_score(2.0, ctx, CycleState(), built, REQUEST, FEASIBLE)
    assert again is not None and again.tobytes() == weighted.tobytes()
    assert weighted.tobytes() == (plain * 2.0).tobytes()


@pytest.mark.parametrize("weight", [0.3, 0.7, 1.0, 2.0, 3.0, 1 / 3, 1e-7, 123.456])
def test_the_0d_score_is_read_only_and_the_table_s_number_bit_for_bit(weight: float) -> None:
    """The 0-d score every job of a key nothing harms gets is one shared array, kept
    read-only, and ``np.array(MAX_NODE_SCORE * weight)`` is the float64 the table holds
    (``MAX_NODE_SCORE`` times the weight in numpy)."""
    plugin = dissonance.new({})
    ctx = _ctx(CLASH)
    _, first, _ = _weighted(plugin, ctx, 1, "light", weight)
    _, second, _ = _weighted(plugin, ctx, 2, "light", weight)
    assert first.ndim == 0 and first is second
    assert not first.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        first[()] = 0.0
    numpy_product = np.multiply(np.float64(MAX_NODE_SCORE), weight, out=np.empty(()))
    assert first.tobytes() == numpy_product.tobytes()
    nodes = ctx.data.get(dissonance.NODES)
    assert nodes is not None and nodes.scores is not None
    column = nodes.coef.column(("light", False))
    assert (nodes.scores[:, len(CLASSES) * 2 + column] == first).all()
