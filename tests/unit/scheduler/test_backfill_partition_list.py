"""Backfill of a job naming several partitions (``sbatch -p a,b``): Slurm's backfill
plans it in each of them. Partitions ``a`` (n0001-n0004) and ``b`` (n0005-n0008) of
single-CPU nodes; bf_resolution 1 s, so planned times are exact."""

from __future__ import annotations

import pytest

from hal.config.model import config_from_dict
from hal.core.states import PendingReason
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.plugins import build_scheduler
from hal.server.profile import server_profile
from hal.testing import JobBuilder, cluster, expected_starts, make_job

NOW = 1000.0
A = tuple(f"n{i:04d}" for i in range(1, 5))
B = tuple(f"n{i:04d}" for i in range(5, 9))


def _scheduler(mode: str = "easy") -> Scheduler:
    args = {"backfill": {"resolution_s": 1, "mode": mode}}
    return build_scheduler(server_profile(config_from_dict({"scheduler": {"plugin_args": args}})))


def _busy(part: str, nodes: tuple[str, ...], job_id: int, until: float) -> JobBuilder:
    """``nodes`` of ``part`` busy until ``until`` (started at 990)."""
    limit = int(until - (NOW - 10))
    job = make_job(job_id).partition(part).nodes(len(nodes)).limit(limit)
    return job.running_on(*nodes, start=NOW - 10)


def _pass(
    mode: str,
    running: list[JobBuilder],
    pending: list[JobBuilder],
    defaults: int = 0,
    sched: Scheduler | None = None,
) -> PassResult:
    """``defaults``: DefaultTime of ``a`` (it is 3 times ``b``'s). ``sched``: the
    scheduler to run (absent: a new one for ``mode``)."""
    builder = cluster(NOW).uniform_nodes(8, cpus=1).partition("a", *A, default_time_s=defaults)
    builder.partition("b", *B, default_time_s=defaults // 3)
    sched = sched or _scheduler(mode)
    return sched.run_pass(builder.running(*running).pending(*pending).build())


def _holes(*jobs: JobBuilder, sched: Scheduler | None = None) -> PassResult:
    """Both partitions' heads wait for all four nodes: ``a``'s from 1090 (n0003 and n0004
    free until then), ``b``'s from 1200 (n0008 free until then); ``jobs`` come after."""
    running = [_busy("a", A[:2], 1, 1090), _busy("b", B[:3], 2, 1200)]
    heads = [make_job(10).partition("a").nodes(4).limit(100),
             make_job(12).partition("b").nodes(4).limit(100)]  # fmt: skip
    return _pass("easy", running, [*heads, *jobs], defaults=450, sched=sched)


def test_a_job_blocked_in_its_first_partition_backfills_in_the_second() -> None:
    """It cannot start in ``a`` without delaying ``a``'s head (it would hold n0003 past
    1090), but fits in ``b``'s hole before ``b``'s head's reservation at 1200, with ``b``'s
    DefaultTime (150 s: it named no --time; ``a``'s 450 s would not fit there)."""
    result = _holes(make_job(15).partitions("a", "b").limit(450))
    (placed,) = result.plan.placements
    assert (placed.job_id, placed.partition, placed.allocation.nodes) == (15, "b", ("n0008",))
    starts = {u.job_id: u.expected_start for u in result.plan.updates}
    assert starts == {10: 1090, 12: 1200}  # both heads keep their reservations


def test_a_job_of_one_partition_is_planned_there_only() -> None:
    """The same job in ``a`` alone waits: it is not EASY's head, so its start is only a
    forecast, after ``a``'s head (not ``b``'s hole)."""
    sched = _scheduler("easy")
    result = _holes(make_job(15).partition("a").limit(150), sched=sched)
    assert result.plan.placements == ()
    updates = {u.job_id: u for u in result.plan.updates}
    assert updates[15].reason is PendingReason.PRIORITY
    assert expected_starts(sched, result.plan)[15] == 1190


def test_a_job_of_two_partitions_is_forecast_where_it_starts_first() -> None:
    """A 4-node job naming ``b`` then ``a`` fits in neither now: its forecast is after
    ``a``'s head (1190), not after ``b``'s, the partition it names first (1300)."""
    sched = _scheduler("easy")
    result = _holes(make_job(16).partitions("b", "a").nodes(4).limit(100), sched=sched)
    assert result.plan.placements == ()
    assert expected_starts(sched, result.plan)[16] == 1190
    assert set(result.reservations) == {10, 12}  # (a forecast holds nothing)


@pytest.mark.parametrize(
    ("listed", "a_until", "b_until", "start", "nodes"),
    [
        (("a", "b"), 1300, 1090, 1090, B),  # b frees first
        (("b", "a"), 1090, 1300, 1090, A),  # a frees first, though listed second
        (("b", "a"), 1090, 1090, 1090, B),  # a tie: the one listed first
    ],
)
def test_the_head_is_reserved_where_it_starts_first(
    listed: tuple[str, str], a_until: float, b_until: float, start: float, nodes: tuple[str, ...]
) -> None:
    """The head of ``a`` needs four nodes: its reservation (and squeue --start) is in the
    partition that frees them first, not the first it waits in."""
    running = [_busy("a", A, 1, a_until), _busy("b", B, 2, b_until)]
    result = _pass("easy", running, [make_job(10).partitions(*listed).nodes(4).limit(100)])
    (update,) = result.plan.updates
    assert (update.job_id, update.reason, update.expected_start) == (
        10,
        PendingReason.RESOURCES,
        start,
    )
    assert result.reservations[10][2].nodes == nodes


def test_conservative_plans_later_jobs_around_that_reservation() -> None:
    """The ``-p a,b`` job reserved in ``b`` from 1090 holds ``b``'s nodes until 1190: the
    ``b`` job after it is planned from then, the ``a`` job from 1300."""
    running = [_busy("a", A, 1, 1300), _busy("b", B, 2, 1090)]
    pending = [make_job(10).partitions("a", "b").nodes(4).limit(100),
               make_job(11).partition("b").nodes(4).limit(100),
               make_job(12).partition("a").nodes(4).limit(100)]  # fmt: skip
    result = _pass("conservative", running, pending)
    starts = {u.job_id: u.expected_start for u in result.plan.updates}
    assert starts == {10: 1090, 11: 1190, 12: 1300}


def test_a_time_min_job_starts_shortened_in_the_partition_it_fits_only_shortened() -> None:
    """``--time-min`` counts in each listed partition: 10 minutes fit neither ``a``'s 90 s
    hole nor ``b``'s 200 s one, and 2 minutes do not fit ``a``'s; it starts in ``b`` with
    the longest whole minute before ``b``'s head's reservation, 3 minutes."""
    result = _holes(make_job(15).partitions("a", "b").limit(600).time_min(120))
    (placed,) = result.plan.placements
    assert (placed.job_id, placed.partition, placed.allocation.nodes) == (15, "b", ("n0008",))
    assert placed.time_limit_s == 180
    starts = {u.job_id: u.expected_start for u in result.plan.updates}
    assert starts == {10: 1090, 12: 1200}


def test_a_shortened_start_in_the_first_partition_comes_before_a_whole_one_in_the_next() -> None:
    """As Slurm's backfill, each listed partition is tried in turn with its own
    time-min logic: the job fits ``a``'s 90 s hole only shortened (1 minute), which comes
    before its whole 150 s run in ``b``'s 200 s hole."""
    result = _holes(make_job(15).partitions("a", "b").limit(150).time_min(60))
    (placed,) = result.plan.placements
    assert (placed.partition, placed.time_limit_s) == ("a", 60)


def test_jobs_without_time_min_are_not_shortened_in_any_partition() -> None:
    """The job that starts shortened in ``b`` above waits without --time-min."""
    result = _holes(make_job(15).partitions("a", "b").limit(600))
    assert result.plan.placements == ()


def test_two_equal_time_min_jobs_both_start_shortened() -> None:
    """Two equal ``-p a,b`` jobs (an array's elements: one placement key): the first
    takes ``a``'s hole on one node with 1 minute, and the failed whole try must not keep
    the second from the other node of that hole."""
    first = make_job(15).partitions("a", "b").limit(600).time_min(60)
    result = _holes(first, make_job(16).partitions("a", "b").limit(600).time_min(60))
    placed = {p.job_id: (p.partition, p.time_limit_s) for p in result.plan.placements}
    assert placed == {15: ("a", 60), 16: ("a", 60)}


@pytest.mark.parametrize("mode", ["easy", "conservative"])
def test_a_job_waiting_in_both_partitions_holds_back_both_queues(mode: str) -> None:
    """As Slurm's main loop, which queues a ``-p a,b`` job once per partition and marks
    each partition where it waits for room: the ``b`` job behind it must not take
    n0008 (free now, needed by the head in ``b`` from 1090) for 450 s, which would put
    the head off to 1300 in ``a``. It waits behind the head in ``b`` too."""
    running = [_busy("a", A, 1, 1300), _busy("b", B[:3], 2, 1090)]
    pending = [make_job(10).partitions("a", "b").nodes(4).limit(100),
               make_job(11).partition("b").limit(450)]  # fmt: skip
    result = _pass(mode, running, pending)
    assert result.plan.placements == ()
    updates = {u.job_id: u for u in result.plan.updates}
    assert updates[10].expected_start == 1090
    assert updates[11].reason is PendingReason.PRIORITY
