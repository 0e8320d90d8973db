"""dissonance: PreScore skips a job whose score is the same on every node (no row scores
other than 100 for its class and mark), exactly then, and the decisions are those of the
plugin run in full."""

from __future__ import annotations

import dataclasses

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
from hal.scheduler.framework.status import Code, Status
from hal.scheduler.plugins.dissonance import plugin as dissonance
from hal.testing import cluster, make_job

# memory jobs slow each other 1.8x, cpu beside memory 1.3x, memory beside cpu 1.1x; io
# and light clash with nothing (their scores are 100 everywhere: no table needed)
CELLS = {("memory", "memory"): 1.8, ("cpu", "memory"): 1.3, ("memory", "cpu"): 1.1}
VIEW = DissonanceView({v: {a: CELLS.get((v, a), 1.0) for a in CLASSES} for v in CLASSES})
_PRE_SCORE = dissonance.Dissonance.pre_score


def test_prescore_skips_exactly_when_no_row_scores_below_the_maximum() -> None:
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
        status: Status = plugin.pre_score(ctx, state, job, every)
        scores = plugin.score(ctx, state, job, request, every)  # (on every row)
        uniform = bool(np.all(scores == MAX_NODE_SCORE))
        assert (status.code is Code.SKIP) == uniform, (job.extra, scores)
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
    skip: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[object, ...]], dict[Code, int]]:
    """Two passes of a workload where memory and cpu jobs clash but none runs at first
    (they skip until one is placed), io and light never clash, the rest of the truth's
    classes not at all: with PreScore's skip on or off."""
    monkeypatch.setattr(dissonance, "UNIFORM_SKIP", skip)
    answers: dict[Code, int] = {}

    def counted(self, ctx, state, job, feasible):  # type: ignore[no-untyped-def]
        status = _PRE_SCORE(self, ctx, state, job, feasible)
        answers[status.code] = answers.get(status.code, 0) + 1
        return status

    monkeypatch.setattr(dissonance.Dissonance, "pre_score", counted)
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
    full, answered = _passes(False, monkeypatch)
    skipping, skipped = _passes(True, monkeypatch)
    assert skipping == full
    assert skipped[Code.SKIP] > answered.get(Code.SKIP, 0) + 100  # (it did skip)
    assert skipped[Code.SUCCESS] > 100  # (and scored the jobs whose class clashes)
    placements = full[0][0]
    assert isinstance(placements, list)
    assert any("(dissonance)" in note for _, _, note in placements)  # (moved and noted)
