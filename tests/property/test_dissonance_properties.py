"""The interference model moves jobs only among the nodes the filters allow, and without
a model (or classes) it changes nothing.

Random clusters of 3-16 nodes of 1-8 CPUs, two partitions (``p`` everywhere, ``q`` on
some nodes), an advance reservation active now on some nodes, running jobs of random
classes (some latency-sensitive, some filling their node), a random matrix between the
classes, and a queue of jobs whose workloads have classes (1-2 nodes, either partition,
some in the reservation). A full pass (main loop and EASY backfill) of the default
profile, where ``dissonance`` has weight 2:

* every job it starts is on nodes of its partition, with room for it beside the
  running jobs and the other starts, and off the reservation's nodes unless it is the
  reservation's (inside them if it is);
* a job alone in the queue starts with the plugin exactly when it starts without it:
  the same nodes are feasible;
* with no model, or a model but no class for any pending job, the plan is exactly the
  plan of the profile without the plugin;
* the same snapshot gives the same plan, again and after other snapshots (the plugin
  keeps the running jobs' shares from pass to pass).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.dissonance import DissonanceView
from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.profiles import CLASSES, LATENCY_SENSITIVE, PROFILE_CLASS
from hal.core.reservation import Reservation
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework import ClusterSnapshot, Plan, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import make_job
from hal.testing.examples import examples

NOW = 100_000.0
WITH: Scheduler = build_scheduler(default_profile())
WITHOUT: Scheduler = build_scheduler(default_profile(dissonance_weight=0))
USERS = ("alice", "bob")
NAMES = ("db", "web", "train", "etl")
SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    n_nodes = draw(st.integers(3, 16))
    nodes = [
        Node(f"n{i:02d}", ResourceVector(draw(st.integers(1, 8)), 32 * GiB)) for i in range(n_nodes)
    ]
    names = [n.name for n in nodes]
    in_q = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    partitions = (Partition("p", default=True), Partition("q", nodes=tuple(sorted(in_q))))
    reserved = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    reservations = (
        (Reservation("maint", NOW - 60, NOW + 3600, tuple(sorted(reserved)), users=("ops",)),)
        if reserved
        else ()
    )
    free = {n.name: n.resources.cpus for n in nodes}
    running: list[Job] = []
    for jid in range(1000, 1000 + draw(st.integers(0, 2 * n_nodes))):
        name = draw(st.sampled_from(names))
        if free[name] < 1:
            continue
        cpus = draw(st.integers(1, free[name]))
        free[name] -= cpus
        job = (
            make_job(jid).user(draw(st.sampled_from(USERS))).cpus(cpus).partition("p")
            .limit(3600).extra(PROFILE_CLASS, draw(st.sampled_from(CLASSES)))
        )  # fmt: skip
        if draw(st.booleans()):
            job = job.extra(LATENCY_SENSITIVE, "1")
        running.append(job.running_on(name, start=NOW - 60).build())
    pending: list[Job] = []
    for jid in range(1, draw(st.integers(1, 8)) + 1):
        job = (
            make_job(jid).name(draw(st.sampled_from(NAMES))).cpus(draw(st.integers(1, 4)))
            .nodes(draw(st.integers(1, 2))).limit(draw(st.integers(60, 7200)))
            .priority(draw(st.integers(1, 100)))
        )  # fmt: skip
        if draw(st.integers(0, 3)) == 0:
            job = job.extra(LATENCY_SENSITIVE, "1")
        where = draw(st.sampled_from(("p", "q", "maint")))
        if where == "maint" and reservations:
            built = job.user("ops").partition("p").build()
            built = dataclasses.replace(built, spec=built.spec.with_changes(reservation="maint"))
        else:
            built = (
                job.user(draw(st.sampled_from(USERS)))
                .partition("q" if where == "q" else "p")
                .build()
            )
        pending.append(built)
    cells = draw(st.lists(st.floats(0.8, 3.0), min_size=25, max_size=25))
    matrix = {
        v: {a: cells[5 * i + j] for j, a in enumerate(CLASSES)} for i, v in enumerate(CLASSES)
    }
    classes = {f"{u}/{n}": draw(st.sampled_from(CLASSES)) for u in (*USERS, "ops") for n in NAMES}
    return ClusterSnapshot(
        1, NOW, tuple(nodes), partitions, tuple(pending), tuple(running),
        reservations=reservations, dissonance=DissonanceView(matrix, identity_class=classes),
    )  # fmt: skip


def _check_placements(snap: ClusterSnapshot, plan: Plan) -> None:
    jobs = {j.id: j for j in snap.pending}
    cpus = {n.name: n.resources.cpus for n in snap.nodes}
    partitions = {p.name: p for p in snap.partitions}
    used: Counter[str] = Counter()
    for held in snap.running:
        assert held.allocation is not None
        for name, res in zip(held.allocation.nodes, held.allocation.per_node, strict=True):
            used[name] += res.cpus
    for p in plan.placements:
        job = jobs[p.job_id]
        part = partitions[job.partition]
        nodes = p.allocation.nodes
        assert all(part.contains(n) for n in nodes), f"job {job.id} outside {part.name}"
        for name, res in zip(nodes, p.allocation.per_node, strict=True):
            used[name] += res.cpus
        for r in snap.reservations:
            if job.spec.reservation == r.name:
                assert set(nodes) <= set(r.nodes), f"job {job.id} left reservation {r.name}"
            elif r.overlaps(NOW, NOW + job.time_limit_s):
                assert not set(nodes) & set(r.nodes), f"job {job.id} on {r.name}'s nodes"
    over = {n: u for n, u in used.items() if u > cpus[n]}
    assert not over, f"over capacity: {over}"


@SETTINGS
@given(snapshots())
def test_the_model_never_places_a_job_where_a_filter_refuses_it(snap: ClusterSnapshot) -> None:
    _check_placements(snap, WITH.schedule(snap))


@SETTINGS
@given(snapshots())
def test_a_job_alone_starts_exactly_when_it_would_without_the_plugin(
    snap: ClusterSnapshot,
) -> None:
    for job in snap.pending:
        alone = dataclasses.replace(snap, pending=(job,))
        on, off = WITH.schedule(alone), WITHOUT.schedule(alone)
        assert [p.job_id for p in on.placements] == [p.job_id for p in off.placements]
        _check_placements(alone, on)


@SETTINGS
@given(snapshots())
def test_without_a_model_or_classes_nothing_changes(snap: ClusterSnapshot) -> None:
    off = WITHOUT.schedule(snap)
    assert WITH.schedule(dataclasses.replace(snap, dissonance=None)) == off
    assert snap.dissonance is not None
    unclassed = DissonanceView(snap.dissonance.slowdown)  # the running jobs' classes only
    pending = tuple(
        dataclasses.replace(j, extra={k: v for k, v in j.extra.items() if k != PROFILE_CLASS})
        for j in snap.pending
    )
    assert WITH.schedule(dataclasses.replace(snap, pending=pending, dissonance=unclassed)) == (
        WITHOUT.schedule(dataclasses.replace(snap, pending=pending))
    )


@SETTINGS
@given(snapshots(), snapshots())
def test_same_snapshot_same_plan_whatever_came_between(
    snap: ClusterSnapshot, other: ClusterSnapshot
) -> None:
    first = WITH.schedule(snap)
    WITH.schedule(other)
    assert WITH.schedule(snap) == first
