"""The traffic graph moves jobs only among the nodes the filters allow, and without a
graph it changes nothing.

Random clusters of 3-24 nodes of 1-8 CPUs on a random switch tree (1-3 levels, some
NVLink domains), two partitions (``p`` everywhere, ``q`` on some nodes), an advance
reservation active now on some nodes, running jobs of a few workloads (some filling
their node), a random traffic graph between those workloads, and a queue of jobs of
the same workloads (1-2 nodes, either partition, some in the reservation). A full pass
(main loop and EASY backfill) of the default profile, where ``harmonic`` has weight 2:

* every job it starts is on nodes of its partition, with room for it beside the
  running jobs and the other starts, and off the reservation's nodes unless it is the
  reservation's (inside them if it is);
* with no graph (``traffic`` None), or a graph none of whose workloads has a job here,
  the plan is exactly the plan of the profile without the plugin;
* the same snapshot gives the same plan.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.reservation import Reservation
from hal.core.resources import GiB, ResourceVector
from hal.core.traffic import TrafficView
from hal.scheduler.framework import ClusterSnapshot, Plan, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import make_job
from hal.testing.examples import examples

NOW = 100_000.0
WITH: Scheduler = build_scheduler(default_profile())
WITHOUT: Scheduler = build_scheduler(default_profile(harmonic_weight=0))
USERS = ("alice", "bob")
NAMES = ("db", "web", "client", "batch")
IDENTITIES = tuple(f"{u}/{n}" for u in USERS for n in NAMES)
SETTINGS = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    n_nodes = draw(st.integers(3, 24))
    leaf = draw(st.integers(1, 4))
    levels = draw(st.integers(1, 3))
    nvlink = draw(st.booleans())
    nodes: list[Node] = []
    for i in range(n_nodes):
        path = (f"c{i // (leaf * 4)}", f"s{i // (leaf * 2)}", f"l{i // leaf}")[3 - levels :]
        nodes.append(
            Node(
                f"n{i:02d}",
                ResourceVector(draw(st.integers(1, 8)), 32 * GiB),
                topology=path,
                nvlink_domain=f"nvl{i // 2}" if nvlink and i % 3 else "",
            )
        )
    order = draw(st.permutations(range(n_nodes)))  # row order says nothing about leaves
    nodes = [nodes[k] for k in order]
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
        user, job_name = draw(st.sampled_from(IDENTITIES)).split("/")
        running.append(
            make_job(jid).user(user).name(job_name).cpus(cpus).partition("p").limit(3600)
            .running_on(name, start=NOW - 60)
            .build()
        )  # fmt: skip
    pending: list[Job] = []
    for jid in range(1, draw(st.integers(1, 10)) + 1):
        user, job_name = draw(st.sampled_from(IDENTITIES)).split("/")
        job = (
            make_job(jid).name(job_name).cpus(draw(st.integers(1, 4)))
            .nodes(draw(st.integers(1, 2))).limit(draw(st.integers(60, 7200)))
            .priority(draw(st.integers(1, 100)))
        )  # fmt: skip
        where = draw(st.sampled_from(("p", "q", "maint")))
        if where == "maint" and reservations:
            built = job.user("ops").partition("p").build()
            built = dataclasses.replace(built, spec=built.spec.with_changes(reservation="maint"))
        else:
            built = job.user(user).partition("q" if where == "q" else "p").build()
        pending.append(built)
    edges: dict[str, dict[str, float]] = {}
    for _ in range(draw(st.integers(0, 12))):
        a, b = draw(st.sampled_from(IDENTITIES)), draw(st.sampled_from(IDENTITIES))
        rate = draw(st.floats(0, 1e9))
        edges.setdefault(a, {})[b] = rate
        edges.setdefault(b, {})[a] = rate
    return ClusterSnapshot(
        1, NOW, tuple(nodes), partitions, tuple(pending), tuple(running),
        reservations=reservations, traffic=TrafficView({}, edges),
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
def test_the_graph_never_places_a_job_where_a_filter_refuses_it(snap: ClusterSnapshot) -> None:
    _check_placements(snap, WITH.schedule(snap))


@SETTINGS
@given(snapshots())
def test_without_a_graph_or_its_workloads_nothing_changes(snap: ClusterSnapshot) -> None:
    off = WITHOUT.schedule(snap)
    _check_placements(snap, off)
    no_graph = ClusterSnapshot(
        snap.revision, snap.now, snap.nodes, snap.partitions, snap.pending, snap.running,
        reservations=snap.reservations,
    )  # fmt: skip
    assert WITH.schedule(no_graph) == off
    strangers = TrafficView({}, {"carol/x": {"dave/y": 1e9}, "dave/y": {"carol/x": 1e9}})
    elsewhere = ClusterSnapshot(
        snap.revision, snap.now, snap.nodes, snap.partitions, snap.pending, snap.running,
        reservations=snap.reservations, traffic=strangers,
    )  # fmt: skip
    assert WITH.schedule(elsewhere) == off


@SETTINGS
@given(snapshots())
def test_same_snapshot_same_plan_with_a_graph(snap: ClusterSnapshot) -> None:
    assert WITH.schedule(snap) == WITH.schedule(snap)
