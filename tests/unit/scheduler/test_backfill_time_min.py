"""``--time-min`` in the backfill stage (Slurm's TimeMin): four one-CPU nodes, two of
them busy until 1190 (planned to 1200 on bf_resolution's 60 s grid), so the 4-node head
is reserved from 1200 and two nodes have a 200 s hole before it."""

from __future__ import annotations

import dataclasses

import pytest

from hal.core.reservation import Reservation, parse_flags
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import JobBuilder, cluster, make_job, placed_nodes

NOW = 1000.0


def with_mode(mode: str) -> Scheduler:
    prof = default_profile()
    plugin_args = prof["plugin_args"]
    assert isinstance(plugin_args, dict)
    plugin_args["backfill"] = {"mode": mode}
    return build_scheduler(prof)


def head_blocked(*pending: JobBuilder) -> ClusterSnapshot:
    return (
        cluster(NOW)
        .uniform_nodes(4, cpus=1)
        .running(
            make_job(1).limit(200).running_on("n0001", start=NOW - 10),
            make_job(2).limit(200).running_on("n0002", start=NOW - 10),
        )
        .pending(make_job(10).nodes(4).limit(100), *pending)
        .build()
    )


def limits(plan: Plan) -> dict[int, int | None]:
    return {p.job_id: p.time_limit_s for p in plan.placements}


@pytest.mark.parametrize("mode", ["easy", "conservative"])
def test_a_time_min_job_starts_now_with_the_hole_as_its_limit(mode: str) -> None:
    """A 10-minute job that may run for 2 fits the 200 s before the head's reservation
    only shortened: it starts now with the longest whole minute that ends by then, 3
    minutes, and the head keeps its start."""
    result = with_mode(mode).run_pass(head_blocked(make_job(12).limit(600).time_min(120)))
    assert limits(result.plan) == {12: 180}
    (update,) = result.plan.updates
    assert (update.job_id, update.expected_start) == (10, 1200)


def test_a_time_min_longer_than_the_hole_does_not_start() -> None:
    """Its time-min (4 minutes) would still run past the head's start: it waits."""
    result = with_mode("easy").run_pass(head_blocked(make_job(12).limit(600).time_min(240)))
    assert placed_nodes(result.plan) == {}


def test_a_job_without_time_min_is_never_shortened() -> None:
    """The same job without --time-min waits; one that fits whole starts with its own
    limit (no new limit in the placement)."""
    snap = head_blocked(make_job(12).limit(600), make_job(13).limit(120))
    result = with_mode("easy").run_pass(snap)
    assert limits(result.plan) == {13: None}


def test_a_time_min_job_that_fits_whole_keeps_its_limit() -> None:
    """Lowering is only for a job that cannot start otherwise: 150 s fits the hole."""
    result = with_mode("easy").run_pass(head_blocked(make_job(12).limit(150).time_min(60)))
    assert limits(result.plan) == {12: None}


def test_the_second_job_of_a_key_is_shortened_too() -> None:
    """Two equal jobs (an array's elements share a placement key): the failed full-length
    try of the first must not stop the second from starting shortened on the other
    node of the hole."""
    snap = head_blocked(make_job(12).limit(600).time_min(60), make_job(13).limit(600).time_min(60))
    result = with_mode("easy").run_pass(snap)
    assert limits(result.plan) == {12: 180, 13: 180}


def test_a_time_min_job_fits_before_a_maintenance_window() -> None:
    """The free node goes into maintenance in 250 s (the head waits for both nodes,
    after it): a job held back behind the head starts there now with 4 minutes, which
    end before the window, instead of its 10."""
    maint = Reservation(
        name="maint", start=NOW + 250, end=NOW + 3600, nodes=("n0001", "n0002"),
        users=("root",), flags=parse_flags("MAINT"),
    )  # fmt: skip
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=1)
        .running(make_job(1).limit(200).running_on("n0001", start=NOW - 10))
        .pending(make_job(10).nodes(2).limit(100), make_job(12).limit(600).time_min(120))
        .build()
    )
    result = with_mode("easy").run_pass(dataclasses.replace(snap, reservations=(maint,)))
    assert limits(result.plan) == {12: 240}


@pytest.mark.parametrize("listed", [("a", "b"), ("b", "a")])
def test_a_job_naming_two_partitions_starts_shortened_where_it_fits(
    listed: tuple[str, str],
) -> None:
    """``-p a,b`` or ``-p b,a``: ``a`` (n0001-n0002) is busy for an hour, ``b``
    (n0003-n0004) goes into maintenance in 250 s. The job's 10 minutes fit nowhere; in
    ``b`` it starts now with 4 minutes, which end before the window."""
    maint = Reservation(
        name="maint", start=NOW + 250, end=NOW + 3600, nodes=("n0003", "n0004"),
        users=("root",), flags=parse_flags("MAINT"),
    )  # fmt: skip
    builder = cluster(NOW).uniform_nodes(4, cpus=1).partition("a", "n0001", "n0002")
    snap = (
        builder.partition("b", "n0003", "n0004")
        .running(make_job(1).partition("a").nodes(2).limit(3600).running_on("n0001", "n0002"))
        .pending(make_job(12).partitions(*listed).limit(600).time_min(120))
        .build()
    )
    result = with_mode("easy").run_pass(dataclasses.replace(snap, reservations=(maint,)))
    (placed,) = result.plan.placements
    assert (placed.partition, placed.time_limit_s) == ("b", 240)
