"""dissonance: a job goes where its class clashes least with its neighbours', protects
latency-sensitive neighbours first, never against a filter, and says so when a
neighbour moved it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hal.core.dissonance import DissonanceView
from hal.core.job import Allocation
from hal.core.profiles import CLASSES, LATENCY_SENSITIVE, PROFILE_CLASS
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework import ProfileError
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.dissonance import plugin as dissonance
from hal.testing import ClusterBuilder, JobBuilder, cluster, make_job, placed_nodes
from hal.testing.examples import examples

SCHED = build_scheduler(default_profile())
OFF = build_scheduler(default_profile(dissonance_weight=0))


def _matrix(**cells: float) -> dict[str, dict[str, float]]:
    """Every pair 1.0 but the named ``victim_aggressor`` cells."""
    out = {v: dict.fromkeys(CLASSES, 1.0) for v in CLASSES}
    for name, value in cells.items():
        v, a = name.split("_")
        out[v][a] = value
    return out


# memory-bound jobs slow each other down 1.8x; cpu beside memory 1.3x
VIEW = DissonanceView(_matrix(memory_memory=1.8, cpu_memory=1.3, memory_cpu=1.1))


def _two() -> ClusterBuilder:
    return cluster().uniform_nodes(2, cpus=8)


def _job(job_id: int, cls: str, cpus: int = 2) -> JobBuilder:
    return make_job(job_id).user("ann").name(f"w{job_id}").cpus(cpus).extra(PROFILE_CLASS, cls)


def test_a_memory_job_avoids_the_fuller_node_of_another_memory_job() -> None:
    # n0001 is fuller (best fit prefers it) but holds a memory-bound job
    hog = _job(10, "memory", cpus=5).running_on("n0001")
    light = _job(11, "light", cpus=2).running_on("n0002")
    snap = _two().running(hog, light).pending(_job(1, "memory")).dissonance(VIEW).build()
    assert placed_nodes(OFF.schedule(snap))[1] == ("n0001",)
    plan = SCHED.schedule(snap)
    assert placed_nodes(plan)[1] == ("n0002",)
    (note,) = [p.note for p in plan.placements]
    assert "passed over n0001 because of a neighbour (dissonance)" in note
    assert "beside job 10 (memory, 62% of the node) it would be slowed" in note
    assert "(memory beside memory: 1.80x); placed on n0002" in note


def test_without_a_model_or_a_class_placement_is_best_fit() -> None:
    hog = _job(10, "memory", cpus=5).running_on("n0001")
    unknown = make_job(1).user("ann").name("new").cpus(2)
    for snap in (
        _two().running(hog).pending(_job(1, "memory")).build(),
        _two().running(hog).pending(unknown).dissonance(VIEW).build(),
    ):
        plan = SCHED.schedule(snap)
        assert placed_nodes(plan)[1] == ("n0001",)
        assert plan.placements[0].note == ""


def test_a_workload_seen_before_is_known_by_its_identity() -> None:
    hog = _job(10, "memory", cpus=5).running_on("n0001")
    view = DissonanceView(VIEW.slowdown, identity_class={"ann/etl": "memory"})
    again = make_job(1).user("ann").name("etl").cpus(2)
    snap = _two().running(hog).pending(again).dissonance(view).build()
    assert placed_nodes(SCHED.schedule(snap))[1] == ("n0002",)


def test_a_mild_clash_under_the_tolerance_moves_nothing() -> None:
    hog = _job(10, "memory", cpus=5).running_on("n0001")
    mild = DissonanceView(_matrix(memory_memory=1.04))
    snap = _two().running(hog).pending(_job(1, "memory")).dissonance(mild).build()
    assert placed_nodes(SCHED.schedule(snap))[1] == ("n0001",)


def test_a_latency_sensitive_neighbour_is_protected_first() -> None:
    """A cpu job slows a memory job 1.1x: not worth leaving the fuller node for an
    ordinary neighbour, but it is for a latency-sensitive one."""
    view = DissonanceView(_matrix(memory_cpu=1.15))
    service = _job(10, "memory", cpus=5).running_on("n0001")
    snap = _two().running(service).pending(_job(1, "cpu")).dissonance(view).build()
    assert placed_nodes(SCHED.schedule(snap))[1] == ("n0001",)
    marked = service.extra(LATENCY_SENSITIVE, "1")
    snap = _two().running(marked).pending(_job(1, "cpu")).dissonance(view).build()
    plan = SCHED.schedule(snap)
    assert placed_nodes(plan)[1] == ("n0002",)
    assert (
        "latency-sensitive job 10 (memory, 62% of the node) would be slowed by it "
        "(memory beside cpu: 1.15x)"
    ) in plan.placements[0].note


def test_jobs_placed_earlier_in_the_pass_are_neighbours_too() -> None:
    first = _job(1, "memory", cpus=4).priority(100)
    second = _job(2, "memory", cpus=4).priority(1)
    snap = _two().pending(first, second).dissonance(VIEW).build()
    placed = placed_nodes(SCHED.schedule(snap))
    assert placed[1] != placed[2]
    assert placed_nodes(OFF.schedule(snap))[1] == placed_nodes(OFF.schedule(snap))[2]


def test_a_full_quiet_node_is_never_chosen() -> None:
    """The only node without a clash is full: the job shares with the hog (a score
    never overrides Filter)."""
    hog = _job(10, "memory", cpus=2).running_on("n0001")
    full = _job(11, "light", cpus=8).running_on("n0002")
    snap = _two().running(hog, full).pending(_job(1, "memory")).dissonance(VIEW).build()
    assert placed_nodes(SCHED.schedule(snap))[1] == ("n0001",)


def test_weighted_scores_are_the_scores_times_the_weight_bit_for_bit() -> None:
    """The runtime takes the plugin's scores weighted from it (no multiply per job):
    the same float64s as ``score * weight``, also on the rows worked out afresh after
    each placement, and for a weight other than the table's (multiplied then)."""
    view = DissonanceView(
        _matrix(memory_memory=1.83, cpu_memory=1.37, memory_cpu=1.13, io_io=2.1, light_io=1.29)
    )
    running = (
        _job(10, "memory", cpus=3).running_on("n0001"),
        _job(11, "io", cpus=5).extra(LATENCY_SENSITIVE, "1").running_on("n0002"),
        _job(12, "cpu", cpus=1).running_on("n0003"),
    )
    snap = cluster().uniform_nodes(5, cpus=7).running(*running).dissonance(view).build()
    ctx = PassContext.from_snapshot(snap)
    plugin = dissonance.new({})
    feasible = np.arange(5, dtype=np.intp)
    request = NodeRequest(1, 2, None, 0, False)
    seen = set()
    classes = ("memory", "io", "light") * 2
    placements = ("n0002", "n0001", "n0002", "n0004", "n0001", "n0005")
    for first, weight in ((100, 3.0), (200, 0.7)):  # 0.7: not the table's, multiplied
        for step, (cls, node) in enumerate(zip(classes, placements, strict=True)):
            job = _job(first + step, cls, cpus=step % 3 + 1)
            if step % 2:
                job = job.extra(LATENCY_SENSITIVE, "1")
            built = job.build()
            state = CycleState()
            plain = plugin.score(ctx, state, built, request, feasible)
            weighted = plugin.weighted_score(weight, ctx, state, built, request, feasible)
            assert weighted is not None
            assert weighted.tobytes() == (plain * weight).tobytes()
            seen.add(plain.tobytes())
            held = (ResourceVector(step % 3 + 1, GiB),)
            plugin.reserve(ctx, state, built, Allocation((node,), held))
    assert len(seen) >= 6  # (the placements changed the scores: rows worked out afresh)


def test_unreserve_takes_the_placement_back() -> None:
    """Unreserve undoes Reserve: the node's scores as before it, bit for bit, the job
    gone from the pass's placements, and no row listed that holds nothing."""
    snap = _two().dissonance(VIEW).build()
    ctx = PassContext.from_snapshot(snap)
    plugin = dissonance.new({})
    feasible = np.arange(2, dtype=np.intp)
    request = NodeRequest(1, 2, None, 0, False)
    built = _job(1, "memory").build()
    state = CycleState()
    before = plugin.score(ctx, state, built, request, feasible).tobytes()
    allocation = Allocation(("n0001",), (ResourceVector(2, GiB),))
    plugin.reserve(ctx, state, built, allocation)
    nodes = ctx.data.get(dissonance.NODES)
    assert nodes is not None
    assert set(nodes.placed) == {1}
    assert plugin.score(ctx, state, built, request, feasible).tobytes() != before
    plugin.unreserve(ctx, state, built, allocation)
    assert not nodes.placed
    assert not any(nodes.placed_on.values())
    assert plugin.score(ctx, state, built, request, feasible).tobytes() == before


def test_a_row_worked_out_afresh_is_the_product_the_plugin_had_before() -> None:
    """A placed-on row's scores come from ``dot`` (a vector by a matrix), which must be
    the same float64s as ``@`` of the same row (what the plugin's decisions were pinned
    with): the same BLAS product without the ufunc machinery's cost."""
    rng = np.random.default_rng(53)
    keys = 2 * len(CLASSES)
    for _ in range(200):
        scaled = rng.random((keys, keys)) * rng.choice([0.1, 1.0, 3.0])
        mix = rng.random(keys) * (rng.random(keys) < 0.4)
        assert mix.dot(scaled).tobytes() == (mix @ scaled).tobytes()


def test_weight_zero_leaves_the_plugin_out_and_bad_args_are_refused() -> None:
    assert "dissonance" not in [p.name for p, _ in OFF.profile.score]
    assert ("dissonance", 2.0) in [(p.name, w) for p, w in SCHED.profile.score]
    for args, field, message in (
        ({"protect": 0.5}, "protect", "a number >= 1"),
        ({"tolerance": "x"}, "tolerance", "a slowdown >= 1"),
        ({"weight": 3}, "weight", "unknown argument 'weight'"),
    ):
        profile = default_profile()
        profile["plugin_args"] = {"dissonance": args}
        with pytest.raises(ProfileError, match=message) as err:
            build_scheduler(profile)
        assert err.value.field == f"plugin_args.dissonance.{field}"


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(CLASSES), st.integers(1, 8), st.integers(0, 3), st.booleans()),
        max_size=8,
    ),
    st.lists(
        st.tuples(st.sampled_from(CLASSES), st.integers(1, 8), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.floats(1.0, 3.0), min_size=25, max_size=25),
)
def test_never_overrides_a_filter(running, pending, cells) -> None:  # type: ignore[no-untyped-def]
    """Whatever the neighbours and the matrix: a job alone in the queue starts with the
    plugin exactly when it starts without it (the same nodes are feasible), and every
    job a pass starts lands on nodes with room."""
    matrix = {
        v: {a: cells[i * 5 + j] for j, a in enumerate(CLASSES)} for i, v in enumerate(CLASSES)
    }
    view = DissonanceView(matrix)
    builder = cluster().uniform_nodes(4, cpus=8)
    used = [0] * 4
    jobs = []
    for k, (cls, cpus, node, ls) in enumerate(running):
        if used[node] + cpus > 8:
            continue
        used[node] += cpus
        job = _job(100 + k, cls, cpus).running_on(f"n{node + 1:04d}")
        jobs.append(job.extra(LATENCY_SENSITIVE, "1") if ls else job)
    waiting = []
    for k, (cls, cpus, ls) in enumerate(pending):
        job = _job(1 + k, cls, cpus).priority(100 - k)
        waiting.append(job.extra(LATENCY_SENSITIVE, "1") if ls else job)
    snap = builder.running(*jobs).pending(*waiting).dissonance(view).build()
    for queued in snap.pending:
        alone = dataclasses.replace(snap, pending=(queued,))
        assert bool(SCHED.schedule(alone).placements) == bool(OFF.schedule(alone).placements)
    on = SCHED.schedule(snap)
    free = {f"n{i + 1:04d}": 8 - used[i] for i in range(4)}
    by_id = {j.id: j for j in snap.pending}
    for p in on.placements:
        for name, held in zip(p.allocation.nodes, p.allocation.per_node, strict=True):
            free[name] -= held.cpus
        assert by_id[p.job_id].spec.cpus_per_task * by_id[p.job_id].spec.ntasks == sum(
            r.cpus for r in p.allocation.per_node
        )
    assert all(v >= 0 for v in free.values())
