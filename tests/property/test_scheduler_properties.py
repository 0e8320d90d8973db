"""Safety properties of one scheduler pass over random clusters and queues.

Nothing here checks *where* a job goes; only what must hold for every plan: no node is
over-committed on any resource or GPU id, placements land on UP nodes of the job's
partition with a legal node count, exclusive jobs are alone, the same snapshot gives the
same plan, and (without backfill) no job starts ahead of a higher-priority job of its
partition that waits for resources. ``SCHED`` is the server's default profile (with
backfill); ``FCFS`` the main pass alone.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Allocation, Job
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, NodeState, PendingReason
from hal.scheduler.framework import ClusterSnapshot, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import make_job
from hal.testing.examples import examples

SCHED: Scheduler = build_scheduler()
FCFS: Scheduler = build_scheduler(default_profile(backfill=False))
PARTS = ("p1", "p2")


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    n_nodes = draw(st.integers(1, 6))
    nodes = []
    for i in range(n_nodes):
        nodes.append(
            Node(
                name=f"n{i}",
                resources=ResourceVector(
                    draw(st.integers(1, 8)), draw(st.integers(1, 16)) * GiB, draw(st.integers(0, 4))
                ),
                state=draw(st.sampled_from([NodeState.UP] * 4 + [NodeState.DOWN, NodeState.DRAIN])),
                features=tuple(draw(st.sets(st.sampled_from(["ib", "ssd"])))),
                partitions=tuple(draw(st.sets(st.sampled_from(PARTS), min_size=1))),
            )
        )
    partitions = (
        Partition("p1", default=True),
        Partition("p2", max_time_s=draw(st.sampled_from([0, 3600]))),
    )
    # p1/p2 list no nodes themselves: membership comes from Node.partitions.
    partitions = tuple(
        Partition(
            p.name,
            nodes=tuple(n.name for n in nodes if p.name in n.partitions) or ("none",),
            max_time_s=p.max_time_s,
        )
        for p in partitions
    )

    # Running jobs that fit: carve them out of the nodes' capacity.
    free = {n.name: n.resources for n in nodes}
    next_gpu = dict.fromkeys(free, 0)
    running: list[Job] = []
    for jid in range(1000, 1000 + draw(st.integers(0, 8))):
        node = draw(st.sampled_from(nodes))
        f = free[node.name]
        if f.cpus < 1:
            continue
        want = ResourceVector(
            draw(st.integers(1, f.cpus)),
            draw(st.integers(0, f.memory_bytes // GiB)) * GiB,
            draw(st.integers(0, f.gpus)),
        )
        free[node.name] = f - want
        ids = tuple(range(next_gpu[node.name], next_gpu[node.name] + want.gpus))
        next_gpu[node.name] += want.gpus
        running.append(
            make_job(jid)
            .partition(draw(st.sampled_from(PARTS)))
            .limit(draw(st.sampled_from([0, 600, 7200])))
            .running_on(node.name, start=0.0, per_node=want, gpu_ids=(ids,) if want.gpus else ())
            .build()
        )

    pending: list[Job] = []
    for jid in range(1, draw(st.integers(0, 14)) + 1):
        b = (
            make_job(jid)
            .partition(draw(st.sampled_from(PARTS)))
            .priority(draw(st.integers(0, 3)))
            .cpus(draw(st.integers(1, 4)))
            .limit(draw(st.sampled_from([0, 60, 7200])))
        )
        mem = draw(st.sampled_from([None, 0, 1, 4, 12]))
        if mem is not None:
            b = b.mem(mem * GiB)
        if draw(st.booleans()):
            b = b.gpus(draw(st.integers(1, 2)))
        lo = draw(st.integers(1, 2))
        b = b.nodes(lo, lo + draw(st.integers(0, 1)))
        if draw(st.integers(0, 4)) == 0:
            b = b.exclusive()
        if draw(st.integers(0, 5)) == 0:
            b = b.constraint("ib")
        if draw(st.integers(0, 6)) == 0:
            b = b.hold()
        pending.append(b.build())
    return ClusterSnapshot(1, 10_000.0, tuple(nodes), partitions, tuple(pending), tuple(running))


def _holdings(
    snap: ClusterSnapshot, placed: dict[int, Allocation]
) -> dict[str, list[tuple[int, ResourceVector, tuple[int, ...]]]]:
    held: dict[str, list[tuple[int, ResourceVector, tuple[int, ...]]]] = defaultdict(list)
    allocs = [(j.id, j.allocation) for j in snap.running if j.allocation] + list(placed.items())
    for jid, alloc in allocs:
        assert alloc is not None
        for k, name in enumerate(alloc.nodes):
            ids = alloc.gpu_ids[k] if alloc.gpu_ids else ()
            held[name].append((jid, alloc.per_node[k], ids))
    return held


SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(snapshots())
def test_no_node_is_over_committed(snap: ClusterSnapshot) -> None:
    """Running plus placed never exceeds any node's CPUs, memory or GPUs, and no GPU id is
    handed out twice on a node."""
    plan = SCHED.schedule(snap)
    placed = {p.job_id: p.allocation for p in plan.placements}
    caps = {n.name: n.resources for n in snap.nodes}
    for name, items in _holdings(snap, placed).items():
        total = ResourceVector()
        ids: list[int] = []
        for _, res, gids in items:
            total = total + res
            ids.extend(gids)
        assert total.fits_in(caps[name]), (name, total, caps[name])
        assert len(ids) == len(set(ids)), (name, ids)
        assert all(0 <= g < caps[name].gpus for g in ids)


@SETTINGS
@given(snapshots())
def test_placements_respect_partition_state_and_node_count(snap: ClusterSnapshot) -> None:
    """Every placement is on distinct UP nodes of the job's partition, with a node count
    within the job's range, holding at least what the job asked per node."""
    plan = SCHED.schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    nodes = {n.name: n for n in snap.nodes}
    parts = {p.name: p for p in snap.partitions}
    for p in plan.placements:
        job = jobs[p.job_id]
        names = p.allocation.nodes
        assert len(set(names)) == len(names)
        assert job.spec.nodes_min <= len(names) <= job.spec.nodes_max
        for k, name in enumerate(names):
            node = nodes[name]
            assert node.state is NodeState.UP
            assert parts[job.partition].contains(name) or job.partition in node.partitions
            asked = job.spec.request_per_node(len(names), node.resources.memory_bytes)
            assert asked.fits_in(p.allocation.per_node[k])
            assert set(job.spec.constraint) <= set(node.features)


@SETTINGS
@given(snapshots())
def test_exclusive_jobs_are_alone(snap: ClusterSnapshot) -> None:
    """A node given to an exclusive job holds nothing else."""
    plan = SCHED.schedule(snap)
    placed = {p.job_id: p.allocation for p in plan.placements}
    exclusive = {j.id for j in snap.pending if j.spec.exclusive}
    for items in _holdings(snap, placed).values():
        if any(jid in exclusive for jid, _, _ in items):
            assert len(items) == 1


@SETTINGS
@given(snapshots())
def test_same_snapshot_same_plan(snap: ClusterSnapshot) -> None:
    """Determinism: two passes, and two scheduler instances, agree exactly."""
    assert SCHED.schedule(snap) == SCHED.schedule(snap)
    assert build_scheduler().schedule(snap) == SCHED.schedule(snap)


@SETTINGS
@given(snapshots())
def test_priority_order_within_a_partition(snap: ClusterSnapshot) -> None:
    """Without backfill, no job starts while a job ahead of it in its partition waits for
    Resources or Priority (backfill's own properties: test_backfill_properties.py)."""
    result = FCFS.run_pass(snap)
    order = FCFS.framework.sort(snap.pending)
    waiting_ahead: set[str] = set()
    for job in order:
        st = result.statuses[job.id]
        if st.is_success:
            assert job.partition not in waiting_ahead, job.id
        elif st.reason in (PendingReason.RESOURCES, PendingReason.PRIORITY):
            waiting_ahead.add(job.partition)


@SETTINGS
@given(snapshots())
def test_every_pending_job_gets_a_verdict(snap: ClusterSnapshot) -> None:
    """Each pending job is placed, terminated or has a reason; none is both placed and
    updated."""
    plan = SCHED.schedule(snap)
    placed = {p.job_id for p in plan.placements}
    updated = {u.job_id for u in plan.updates}
    assert not placed & updated
    result = SCHED.run_pass(snap)
    assert set(result.statuses) == {j.id for j in snap.pending}
    for job in snap.pending:
        if job.id not in placed:
            assert result.statuses[job.id].reason is not PendingReason.NONE
            assert job.state is JobState.PENDING
