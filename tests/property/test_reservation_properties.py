"""Advance reservations are never broken, by the main pass or by backfill.

Random clusters of 2-5 nodes, random one-off or daily reservations (some active now,
some later, some on several nodes), running jobs, and a queue of ordinary jobs and jobs
naming a reservation. For every placement and every backfill plan (start, nodes):

* an ordinary job never holds a reserved node during a window that meets
  ``[start, start + time limit)`` (an unlimited job: ``[start, ∞)``);
* a reservation's job runs only on its nodes, inside a window, and ends by its end;
* the pass is deterministic with reservations too.
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.reservation import Reservation, ReservationFlag
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework import ClusterSnapshot, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import make_job
from hal.testing.examples import examples

NOW = 100_000.0
SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
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
    n_nodes = draw(st.integers(2, 5))
    nodes = tuple(
        Node(f"n{i}", ResourceVector(draw(st.integers(1, 4)), 8 * GiB), partitions=("p",))
        for i in range(n_nodes)
    )
    names = [n.name for n in nodes]
    reservations = []
    for i in range(draw(st.integers(0, 3))):
        start = NOW + draw(st.integers(-300, 600))
        length = draw(st.integers(30, 500))
        daily = draw(st.booleans())
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        reservations.append(
            Reservation(
                name=f"r{i}",
                start=start,
                end=start + length,
                nodes=tuple(sorted(chosen)),
                users=("u",),
                flags=frozenset({ReservationFlag.DAILY}) if daily else frozenset(),
            )
        )
    running: list[Job] = []
    free = {n.name: n.resources.cpus for n in nodes}
    for jid in range(1000, 1000 + draw(st.integers(0, 4))):
        node = draw(st.sampled_from(nodes))
        if free[node.name] < 1:
            continue
        free[node.name] -= 1
        running.append(
            make_job(jid).partition("p").limit(draw(st.integers(10, 500)))
            .running_on(node.name, start=NOW - 5, per_node=ResourceVector(1, 0))
            .build()
        )  # fmt: skip
    pending: list[Job] = []
    for jid in range(1, draw(st.integers(1, 10)) + 1):
        unlimited = draw(st.integers(0, 5)) == 0
        job = (
            make_job(jid).partition("p").user("u").nodes(draw(st.integers(1, 2)))
            .cpus(draw(st.integers(1, 2))).limit(0 if unlimited else draw(st.integers(5, 400)))
            .build()
        )  # fmt: skip
        if reservations and draw(st.booleans()):
            name = draw(st.sampled_from(reservations)).name
            job = dataclasses.replace(job, spec=job.spec.with_changes(reservation=name))
        pending.append(job)
    return ClusterSnapshot(
        1, NOW, nodes, (Partition("p", default=True),), tuple(pending), tuple(running),
        reservations=tuple(reservations),
    )  # fmt: skip


def _check(job: Job, start: float, nodes: tuple[str, ...], snap: ClusterSnapshot) -> None:
    limit = job.time_limit_s
    end = start + limit if limit else math.inf
    by_name = {r.name: r for r in snap.reservations}
    if job.spec.reservation:
        r = by_name[job.spec.reservation]
        w_start, w_end = r.window_at(start)
        assert set(nodes) <= set(r.nodes), f"job {job.id} left reservation {r.name}"
        assert w_start <= start < w_end, f"job {job.id} starts outside {r.name}'s window"
        assert end <= w_end, f"job {job.id} runs past {r.name}'s end"
        return
    for r in snap.reservations:
        if r.overlaps(start, end):
            shared = set(nodes) & set(r.nodes)
            assert not shared, f"job {job.id} on {shared} during reservation {r.name}"


def _never_breaks_a_reservation(snap: ClusterSnapshot, sched: Scheduler) -> None:
    result = sched.run_pass(snap)
    jobs = {j.id: j for j in snap.pending}
    for p in result.plan.placements:
        _check(jobs[p.job_id], NOW, p.allocation.nodes, snap)
    for jid, (start, _end, alloc) in result.reservations.items():
        _check(jobs[jid], start, alloc.nodes, snap)


@SETTINGS
@given(snapshots())
def test_easy_backfill_respects_reservations(snap: ClusterSnapshot) -> None:
    _never_breaks_a_reservation(snap, EASY)


@SETTINGS
@given(snapshots())
def test_conservative_backfill_respects_reservations(snap: ClusterSnapshot) -> None:
    _never_breaks_a_reservation(snap, CONSERVATIVE)


@SETTINGS
@given(snapshots())
def test_same_snapshot_same_plan_with_reservations(snap: ClusterSnapshot) -> None:
    for sched in (EASY, CONSERVATIVE):
        a, b = sched.run_pass(snap), sched.run_pass(snap)
        assert a.plan == b.plan and a.reservations == b.reservations
