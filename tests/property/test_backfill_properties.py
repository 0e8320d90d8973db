"""Safety properties of backfilling over random clusters and queues.

Each generated snapshot has nodes of 1-4 CPUs, running jobs with time limits and a queue
of jobs asking for 1-3 nodes. Run times for planning are the requested times (the
``user`` predictor), so a plan's timeline is fully known: running jobs hold their nodes
until start + limit, jobs started by the pass until now + limit, reservations from their
start for their limit. The properties:

* no over-commit, now or at any planned instant: running jobs, this pass's starts and
  the protected reservations (EASY: each partition's head; conservative: all) never
  exceed a node's CPUs. That is exactly "backfilling never delays a protected
  reservation": every reserved job can still start at its reserved time on its nodes;
* a reserved job is one the main loop could not start (its start is in the future);
* determinism: the same snapshot gives the same plan and reservations;
* across passes (EASY): if every job runs to its time limit, the next pass starts the
  head or reserves it no later than the first pass did.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework import ClusterSnapshot, PassResult, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import make_job
from hal.testing.examples import examples

NOW = 10_000.0
SETTINGS = settings(
    max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def scheduler(mode: str) -> Scheduler:
    prof = default_profile(backfill=False)
    prof["plugins"].append("backfill")  # type: ignore[union-attr]
    prof["plugin_args"]["backfill"] = {  # type: ignore[index]
        "mode": mode, "resolution_s": 1, "window_s": 0, "max_job_test": 0,
    }  # fmt: skip
    return build_scheduler(prof)


EASY, CONSERVATIVE = scheduler("easy"), scheduler("conservative")


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    n_nodes = draw(st.integers(2, 6))
    nodes = tuple(
        Node(f"n{i}", ResourceVector(draw(st.integers(1, 4)), 8 * GiB), partitions=("p",))
        for i in range(n_nodes)
    )
    free = {n.name: n.resources.cpus for n in nodes}
    running: list[Job] = []
    for jid in range(1000, 1000 + draw(st.integers(0, 8))):
        node = draw(st.sampled_from(nodes))
        if free[node.name] < 1:
            continue
        cpus = draw(st.integers(1, free[node.name]))
        free[node.name] -= cpus
        running.append(
            make_job(jid).partition("p").limit(draw(st.integers(10, 500)))
            .running_on(node.name, start=NOW - draw(st.integers(0, 9)),
                        per_node=ResourceVector(cpus, 0))
            .build()
        )  # fmt: skip
    pending = [
        make_job(jid).partition("p").nodes(draw(st.integers(1, 3))).cpus(draw(st.integers(1, 2)))
        .limit(draw(st.integers(5, 400))).build()
        for jid in range(1, draw(st.integers(1, 12)) + 1)
    ]  # fmt: skip
    return ClusterSnapshot(1, NOW, nodes, (Partition("p", default=True),), tuple(pending),
                           tuple(running))  # fmt: skip


def _never_over_committed(snap: ClusterSnapshot, sched: Scheduler) -> None:
    result = sched.run_pass(snap)
    jobs = {j.id: j for j in snap.pending}
    # (node, from, until, cpus) for everything the plan counts on
    usage: list[tuple[str, float, float, int]] = []
    for r in snap.running:
        assert r.allocation is not None and r.start_time is not None
        for name, res in zip(r.allocation.nodes, r.allocation.per_node, strict=True):
            usage.append((name, NOW, max(r.start_time + r.time_limit_s, NOW + 1), res.cpus))
    for p in result.plan.placements:
        for name, res in zip(p.allocation.nodes, p.allocation.per_node, strict=True):
            usage.append((name, NOW, NOW + jobs[p.job_id].time_limit_s, res.cpus))
    for jid, (start, end, alloc) in result.reservations.items():
        assert start > NOW, f"job {jid} is reserved for now but was not started"
        for name, res in zip(alloc.nodes, alloc.per_node, strict=True):
            usage.append((name, start, end, res.cpus))
    cap = {n.name: n.resources.cpus for n in snap.nodes}
    by_node: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for name, a, b, cpus in usage:
        by_node[name].append((a, b, cpus))
    for name, spans in by_node.items():
        for t in {a for a, _, _ in spans}:
            held = sum(c for a, b, c in spans if a <= t < b)
            assert held <= cap[name], f"{name} over-committed at {t}: {held} > {cap[name]}"


@SETTINGS
@given(snapshots())
def test_easy_never_delays_the_head(snap: ClusterSnapshot) -> None:
    """The head keeps its reserved nodes at its reserved time whatever was backfilled."""
    _never_over_committed(snap, EASY)
    assert len(EASY.run_pass(snap).reservations) <= 1


@SETTINGS
@given(snapshots())
def test_conservative_never_delays_any_earlier_reservation(snap: ClusterSnapshot) -> None:
    """Every reservation stays valid: backfilled jobs and later reservations fit around
    all earlier ones, at every planned instant."""
    _never_over_committed(snap, CONSERVATIVE)


@SETTINGS
@given(snapshots())
def test_same_snapshot_same_plan(snap: ClusterSnapshot) -> None:
    """Determinism, reservations included."""
    for sched in (EASY, CONSERVATIVE):
        a, b = sched.run_pass(snap), sched.run_pass(snap)
        assert a.plan == b.plan and a.reservations == b.reservations


@SETTINGS
@given(snapshots())
def test_explain_false_places_the_same_jobs(snap: ClusterSnapshot) -> None:
    """The simulator's fast mode decides exactly the server's placements."""
    for sched in (EASY, CONSERVATIVE):
        assert (
            sched.run_pass(snap).plan.placements
            == sched.run_pass(snap, explain=False).plan.placements
        )


def _next_pass(snap: ClusterSnapshot, result: PassResult, at: float) -> ClusterSnapshot:
    """The cluster at ``at`` if every job runs to its time limit (the worst case the plan
    allows): running jobs and this pass's starts still running, the rest still queued."""
    started = {p.job_id: p.allocation for p in result.plan.placements}
    running = [r for r in snap.running if (r.start_time or 0) + r.time_limit_s > at]
    running += [
        dataclasses.replace(j, state=JobState.RUNNING, start_time=NOW, allocation=started[j.id])
        for j in snap.pending
        if j.id in started and NOW + j.time_limit_s > at
    ]
    pending = tuple(j for j in snap.pending if j.id not in started)
    return ClusterSnapshot(2, at, snap.nodes, snap.partitions, pending, tuple(running))


@SETTINGS
@given(snapshots(), st.floats(0.01, 0.99))
def test_easy_head_starts_no_later_in_the_next_pass(snap: ClusterSnapshot, when: float) -> None:
    """Across passes: whatever the first pass backfilled, if every job runs to its time
    limit, the next pass (before the head's reserved start) starts the head now or
    reserves it no later than the first pass did."""
    first = EASY.run_pass(snap)
    if not first.reservations:
        return
    ((head, (start, _, _)),) = first.reservations.items()
    at = float(int(NOW + when * (start - NOW)))
    if at <= NOW:
        return
    second = EASY.run_pass(_next_pass(snap, first, at))
    if any(p.job_id == head for p in second.plan.placements):
        return
    assert head in second.reservations, "the head lost its reservation"
    assert second.reservations[head][0] <= start
