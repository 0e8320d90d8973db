"""dissonance: a job whose score is 100 on every node (no row scores other than 100 for
its class and mark) is given a kept array of it, exactly then, without a gather and a
note, and the decisions are those of the plugin run in full (bit for bit: the runtime
still adds the constant, which is not neutral in floating point)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from hal.bench.dissonance_pass import classed_workload, schedulers
from hal.bench.sched_pass import NOW
from hal.core.dissonance import DissonanceView
from hal.core.job import Allocation, Job
from hal.core.profiles import CLASSES, LATENCY_SENSITIVE, PROFILE_CLASS
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework import PassResult
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import MAX_NODE_SCORE
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.dissonance import plugin as dissonance
from hal.testing import JobBuilder, cluster, make_job, make_node

# memory jobs slow each other 1.8x, cpu beside memory 1.3x, memory beside cpu 1.1x; io
# and light clash with nothing (their scores are 100 everywhere: no table needed)
CELLS = {("memory", "memory"): 1.8, ("cpu", "memory"): 1.3, ("memory", "cpu"): 1.1}
VIEW = DissonanceView({v: {a: CELLS.get((v, a), 1.0) for a in CLASSES} for v in CLASSES})
_WEIGHTED = dissonance.Dissonance.weighted_score


def test_the_kept_array_is_given_exactly_when_no_row_scores_below_the_maximum() -> None:
    quiet = make_job(10).user("ann").name("w").cpus(2).extra(PROFILE_CLASS, "light")
    snap = cluster().uniform_nodes(4, cpus=8).running(quiet.running_on("n0001"))
    ctx = PassContext.from_snapshot(snap.dissonance(VIEW).build())
    plugin = dissonance.new({})
    every = np.arange(4, dtype=np.intp)
    request = NodeRequest(1, 2, None, 0, False)
    held = (ResourceVector(2, GiB),)
    seen: dict[bool, int] = {True: 0, False: 0}
    placed: list[tuple[Job, CycleState, Allocation]] = []

    def check(job: Job) -> CycleState:
        state = CycleState()
        assert plugin.pre_score(ctx, state, job, every).is_success
        scores = plugin.score(ctx, state, job, request, every)  # (on every row)
        uniform = bool(np.all(scores == MAX_NODE_SCORE))
        for _ in range(2):  # (the first of a pass makes the weighted table)
            weighted = plugin.weighted_score(2.0, ctx, state, job, request, every)
            assert weighted.tobytes() == (scores * 2.0).tobytes()
        kept = ctx.data.get(dissonance.NODES).uniform  # type: ignore[union-attr]
        assert np.shares_memory(weighted, kept) == uniform, (job.extra, scores)
        seen[uniform] += 1
        return state

    steps = [("memory", "n0002"), ("cpu", "n0003"), ("io", "n0001"), ("memory", "n0004")]
    for step, (cls, node) in enumerate(steps):
        for other in CLASSES:  # every key as the cluster is now
            for ls in (False, True):
                probe = make_job(100 + step).user("ann").name("w").cpus(2)
                probe = probe.extra(PROFILE_CLASS, other)
                check((probe.extra(LATENCY_SENSITIVE, "1") if ls else probe).build())
        job = make_job(1 + step).user("ann").name("w").cpus(2).extra(PROFILE_CLASS, cls).build()
        state = check(job)
        allocation = Allocation((node,), held)
        plugin.reserve(ctx, state, job, allocation)
        placed.append((job, state, allocation))
    while placed:  # and taken off again: the rows score 100 once more
        done, state, allocation = placed.pop()
        plugin.unreserve(ctx, state, done, allocation)
        for other in ("memory", "cpu"):
            mine = make_job(200).user("ann").name("w").cpus(2).extra(PROFILE_CLASS, other)
            check(mine.build())
    assert seen[True] > 10 and seen[False] > 10  # (both answers were checked)


def _decided(result: PassResult) -> tuple[object, ...]:
    plan = result.plan
    return (
        [(p.job_id, p.allocation, p.note) for p in plan.placements],
        [(u.job_id, u.reason, u.expected_start) for u in plan.updates],
        sorted((j, (s.code, s.reason, s.message, s.plugin)) for j, s in result.statuses.items()),
        sorted(result.reservations.items()),
    )


def _passes(
    kept: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[object, ...]], dict[bool, int]]:
    """Two passes of a workload where memory and cpu jobs clash but none runs at first
    (their scores are 100 everywhere until one is placed) and io and light never clash:
    with the kept array on or off; and how many Scores gave it (read-only) or not."""
    monkeypatch.setattr(dissonance, "UNIFORM_KEPT", kept)
    answers = {True: 0, False: 0}

    def counted(self, weight, ctx, state, job, request, feasible):  # type: ignore[no-untyped-def]
        out = _WEIGHTED(self, weight, ctx, state, job, request, feasible)
        answers[not out.flags.writeable] += 1
        return out

    monkeypatch.setattr(dissonance.Dissonance, "weighted_score", counted)
    workload, truth = classed_workload(1500, 120, 2)
    view = dataclasses.replace(VIEW, identity_class=truth.identity_class)
    running = tuple(
        dataclasses.replace(j, extra={**j.extra, PROFILE_CLASS: "light"})
        if j.extra[PROFILE_CLASS] in ("memory", "cpu")
        else j
        for j in workload.running
    )
    snap = ClusterSnapshot(
        1, NOW, workload.nodes, workload.partitions, workload.pending, running,
        workload.related, dissonance=view,
    )  # fmt: skip
    _, on = schedulers(len(workload.nodes))
    out = [_decided(on.run_pass(snap, explain=True))]
    out.append(_decided(on.run_pass(dataclasses.replace(snap, revision=2), backfill=True)))
    return out, answers


def test_decisions_are_those_of_the_plugin_run_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    full, gathered = _passes(False, monkeypatch)
    fast, given = _passes(True, monkeypatch)
    assert fast == full
    assert gathered[True] == 0
    assert given[True] > 100  # (the kept array given)
    assert given[False] > 100  # (and the scores of the jobs whose class clashes)
    placements = full[0][0]
    assert isinstance(placements, list)
    assert any("(dissonance)" in note for _, _, note in placements)  # (moved and noted)


@pytest.mark.parametrize("cells", [{}, CELLS])
def test_small_clusters_decide_as_in_full_where_a_skip_would_not(
    cells: dict[tuple[str, str], float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded 10-node clusters of mixed sizes, one- to three-node jobs: the same
    placements with the kept array as with the scores gathered. (Had the plugin SKIPped
    these jobs instead, 25 of 400 such clusters under the calm matrix, among them
    seeds 290, 294, 309, 344, 386, 389, 392, went elsewhere: best fit's totals a last
    bit apart rounded to a tie once the plugin's 200 was added.)"""
    view = DissonanceView({v: {a: cells.get((v, a), 1.0) for a in CLASSES} for v in CLASSES})
    for seed in range(280, 400):
        rng = random.Random(seed)
        builder = cluster()
        for i in range(10):
            node = make_node(f"n{i + 1:04d}").cpus(rng.choice([6, 7, 8, 12, 24, 48, 64]))
            builder = builder.nodes(node.mem_gib(rng.choice([16, 32, 48, 100])))
        running = [
            _job(100 + k, rng.choice(CLASSES), rng.randint(1, 3)).running_on(
                f"n{rng.randrange(10) + 1:04d}"
            )
            for k in range(rng.randint(0, 12))
        ]
        pending = [
            _job(1 + k, rng.choice(CLASSES), rng.randint(1, 5))
            .nodes(rng.choice([1, 1, 2, 3]))
            .priority(100 - k)
            for k in range(rng.randint(1, 8))
        ]
        snap = builder.running(*running).pending(*pending).dissonance(view).build()
        out = []
        for kept in (False, True):
            monkeypatch.setattr(dissonance, "UNIFORM_KEPT", kept)
            plan = build_scheduler(default_profile()).schedule(snap)
            out.append([(p.job_id, p.allocation.nodes, p.note) for p in plan.placements])
        assert out[0] == out[1], seed


def _job(job_id: int, cls: str, cpus: int) -> JobBuilder:
    return make_job(job_id).user("u").name(f"w{job_id}").cpus(cpus).extra(PROFILE_CLASS, cls)
