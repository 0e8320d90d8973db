"""Het jobs over random clusters and queues: a pass (main and backfill) starts every
component of a het job or none, never over-commits a node, and backfill reserves all
components of a het job at one start time."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework import ClusterSnapshot, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import make_job
from hal.testing.examples import examples

SCHED: Scheduler = build_scheduler()
_PROFILE = default_profile(backfill=False)
assert isinstance(_PROFILE["plugins"], list) and isinstance(_PROFILE["plugin_args"], dict)
_PROFILE["plugins"].append("backfill")
_PROFILE["plugin_args"]["backfill"] = {"resolution_s": 1, "mode": "conservative"}
CONSERVATIVE: Scheduler = build_scheduler(_PROFILE)


@st.composite
def het_snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    nodes = [
        Node(f"n{i}", ResourceVector(draw(st.integers(1, 4)), 8 * GiB, draw(st.integers(0, 2))))
        for i in range(draw(st.integers(1, 5)))
    ]
    running: list[Job] = []
    for jid, node in enumerate(nodes, start=1000):
        if draw(st.booleans()):
            running.append(
                make_job(jid)
                .limit(draw(st.sampled_from([60, 600])))
                .running_on(node.name, start=9_990.0, per_node=ResourceVector(1, 0, 0))
                .build()
            )
    pending: list[Job] = []
    jid = 1
    for _ in range(draw(st.integers(1, 6))):
        size = draw(st.integers(1, 3))  # 1: an ordinary job
        first = jid
        for offset in range(size):
            b = (
                make_job(jid)
                .priority(draw(st.integers(0, 3)))
                .cpus(draw(st.integers(1, 3)))
                .limit(draw(st.sampled_from([30, 300])))
                .nodes(draw(st.integers(1, 2)))
            )
            if draw(st.integers(0, 3)) == 0:
                b = b.gpus(1)
            if size > 1:
                b = b.het(first, offset, size)
            pending.append(b.build())
            jid += 1
    parts = (Partition("batch", default=True),)
    return ClusterSnapshot(1, 10_000.0, tuple(nodes), parts, tuple(pending), tuple(running))


SETTINGS = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _groups(snap: ClusterSnapshot) -> dict[int, set[int]]:
    groups: dict[int, set[int]] = defaultdict(set)
    for j in snap.pending:
        if j.spec.het is not None:
            groups[j.spec.het.job_id].add(j.id)
    return groups


@SETTINGS
@given(het_snapshots(), st.sampled_from([SCHED, CONSERVATIVE]))
def test_all_components_or_none_and_no_over_commit(snap: ClusterSnapshot, sched: Scheduler) -> None:
    result = sched.run_pass(snap)
    placed = {p.job_id: p.allocation for p in result.plan.placements}
    for members in _groups(snap).values():
        assert members <= set(placed) or not members & set(placed), (members, set(placed))
    caps = {n.name: n.resources for n in snap.nodes}
    used: dict[str, ResourceVector] = defaultdict(ResourceVector)
    allocs = [j.allocation for j in snap.running if j.allocation] + list(placed.values())
    for alloc in allocs:
        for k, name in enumerate(alloc.nodes):
            used[name] = used[name] + alloc.per_node[k]
    for name, total in used.items():
        assert total.fits_in(caps[name]), (name, total, caps[name])
    # reservations: a het job's components share one start
    for members in _groups(snap).values():
        starts = {result.reservations[m][0] for m in members if m in result.reservations}
        reserved = members & set(result.reservations)
        assert not reserved or (reserved == members and len(starts) == 1), (members, starts)
