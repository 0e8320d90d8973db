"""The malleable jobs' controller (``hal.core.malleable``): it fits each job's curve
from the rates it reported, gives CPUs where they gain most, converges (asked again on
its own result it changes nothing), holds back small or too-frequent changes, and keeps
every job within its range and its quota."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.core.malleable import (
    CPUS,
    NODES,
    Candidate,
    MalleableRange,
    Mover,
    Policy,
    declared_range,
    feedback_fell,
    fit_serial_share,
    mover,
    parse_range,
    plan_resizes,
    rates_by_size,
    speedup,
)

NOW = 10_000.0
OLD = NOW - 3600.0  # started an hour ago: past the default interval


def job(
    job_id: int,
    size: int,
    low: int = 1,
    high: int = 8,
    serial: float = 0.05,
    seen: tuple[int, ...] | None = None,
    cap: int = 0,
    since: float = OLD,
    cpus: int = 4,
) -> Candidate:
    """A running job whose reported rates follow ``serial`` at the sizes ``seen``."""
    sizes = seen if seen is not None else (size,)
    rates = {n: 100.0 * speedup(n, serial) for n in sizes}
    return Candidate(job_id, size, low, high, cpus, rates, since, cap=cap)


def test_the_fit_finds_the_serial_share_from_two_sizes() -> None:
    rates = {2: 50 * speedup(2, 0.2), 6: 50 * speedup(6, 0.2)}
    assert fit_serial_share(rates) == pytest.approx(0.2, abs=0.005)
    assert fit_serial_share({4: 10.0}) == 0.05  # one size: the prior


def test_rates_by_size_follows_the_runs_and_inverts_min_goals() -> None:
    runs = [(0.0, 2), (100.0, 4)]
    points = [(-5.0, 1.0), (10.0, 2.0), (20.0, 4.0), (150.0, 8.0)]
    assert rates_by_size(points, runs, "max") == {2: 3.0, 4: 8.0}
    assert rates_by_size([(10.0, 0.5)], runs, "min") == {2: 2.0}


def test_free_cpus_go_to_the_job_that_scales_best() -> None:
    """Two jobs at 2 nodes, 8 CPUs free (2 nodes' worth): the one that scales almost
    linearly gets them, not the one whose serial share is 0.4; and where the poor one
    may shrink, its second node goes to the good one too (it gains more there)."""
    good = job(1, 2, serial=0.01, seen=(1, 2))
    poor = job(2, 2, low=2, serial=0.4, seen=(1, 2))
    plan = plan_resizes([good, poor], free_cpus=8, now=NOW)
    assert [(r.job_id, r.old, r.new) for r in plan] == [(1, 2, 4)]
    assert "speedup" in plan[0].reason and "goodput" in plan[0].reason
    shrinkable = job(2, 2, low=1, serial=0.4, seen=(1, 2))
    plan = plan_resizes([good, shrinkable], free_cpus=8, now=NOW)
    assert [(r.job_id, r.old, r.new) for r in plan] == [(1, 2, 5), (2, 2, 1)]


def test_it_converges_asked_again_on_its_own_plan_it_changes_nothing() -> None:
    jobs = [job(1, 2, serial=0.01, seen=(1, 2)), job(2, 6, serial=0.5, seen=(3, 6))]
    plan = plan_resizes(jobs, free_cpus=8, now=NOW)
    assert plan  # the poor scaler gives nodes to the good one
    after = {r.job_id: r.new for r in plan}
    again = [
        job(
            c.job_id,
            after.get(c.job_id, c.size),
            serial=s,
            seen=(*c.rates, after.get(c.job_id, c.size)),
        )
        for c, s in zip(jobs, (0.01, 0.5), strict=True)
    ]
    used = sum(c.size * c.cpus_per_unit for c in jobs) + 8
    left = used - sum(c.size * c.cpus_per_unit for c in again)
    assert plan_resizes(again, free_cpus=left, now=NOW) == []


def test_hysteresis_a_small_gain_is_not_worth_a_restart() -> None:
    """At 8 nodes with serial share 0.3 one more node adds under 2 % of speedup."""
    flat = job(1, 7, high=8, serial=0.3, seen=(4, 7))
    assert plan_resizes([flat], free_cpus=4, now=NOW) == []
    assert plan_resizes([flat], free_cpus=4, now=NOW, policy=Policy(min_gain=0.0))


def test_hysteresis_a_job_resized_recently_keeps_its_size() -> None:
    fresh = job(1, 2, serial=0.01, seen=(1, 2), since=NOW - 60)
    assert plan_resizes([fresh], free_cpus=40, now=NOW) == []
    assert plan_resizes([fresh], free_cpus=40, now=NOW, policy=Policy(min_interval_s=30))


def test_a_job_that_has_reported_nothing_at_its_size_is_left_alone() -> None:
    silent = job(1, 2, seen=())
    assert plan_resizes([silent], free_cpus=40, now=NOW) == []


def test_the_range_and_the_quota_bound_the_growth() -> None:
    (r,) = plan_resizes([job(1, 2, high=5, serial=0.0)], free_cpus=400, now=NOW)
    assert r.new == 5
    (r,) = plan_resizes([job(1, 2, high=8, cap=3, serial=0.0)], free_cpus=400, now=NOW)
    assert r.new == 3


def test_a_job_above_a_lowered_quota_comes_down_at_once() -> None:
    over = job(1, 6, cap=4, since=NOW - 1)  # even within its interval
    (r,) = plan_resizes([over], free_cpus=0, now=NOW)
    assert (r.old, r.new) == (6, 4) and "quota" in r.reason


def test_room_is_made_for_a_waiting_malleable_job() -> None:
    """A job that waits gets its low bound from the nodes of one that has more than it
    gains much from."""
    wide = job(1, 8, low=2, serial=0.3, seen=(4, 8))
    waiting = Candidate(2, 0, 2, 8, 4, {}, NOW)
    plan = {r.job_id: r for r in plan_resizes([wide, waiting], free_cpus=0, now=NOW)}
    assert plan[1].new < 8 and plan[2].new >= 2
    assert "waiting" in plan[2].reason


def test_ranges_are_parsed_and_declared() -> None:
    assert parse_range("4-16", "--cpus-per-task") == (4, 16)
    assert parse_range("3", "-c") == (3, 3)
    for bad in ("16-4", "0-2", "x", "2-"):
        with pytest.raises(InvalidRequest):
            parse_range(bad, "--cpus-per-task")
    assert declared_range(True, 2, 8, 1, None) == MalleableRange(NODES, 2, 8)
    assert declared_range(True, 1, 1, 4, 16) == MalleableRange(CPUS, 4, 16)
    assert declared_range(False, 2, 8, 1, None) is None
    with pytest.raises(InvalidRequest, match="needs a range"):
        declared_range(True, 2, 2, 1, None)
    with pytest.raises(InvalidRequest, match="not both"):
        declared_range(True, 2, 4, 1, 8)
    with pytest.raises(InvalidRequest, match="needs --malleable"):
        declared_range(False, 1, 1, 4, 16)


def test_feedback_falls_only_when_it_stays_down() -> None:
    steady = [(float(t), 100.0) for t in range(6)]
    assert not feedback_fell(steady, "max")
    dip = [*steady, (6.0, 50.0), (7.0, 100.0), (8.0, 50.0)]
    assert not feedback_fell(dip, "max")  # one good point among the last three
    down = [*steady, (6.0, 70.0), (7.0, 60.0), (8.0, 75.0)]
    assert feedback_fell(down, "max")
    latency = [(float(t), 10.0) for t in range(6)] + [(6.0, 14.0), (7.0, 15.0), (8.0, 13.0)]
    assert feedback_fell(latency, "min")


def test_the_mover_is_the_checkpointable_lower_priority_job() -> None:
    high, low = Mover(1, True, 900), Mover(2, True, 100)
    assert mover(high, low) == low
    assert mover(high, Mover(2, False, 100)) == high
    assert mover(Mover(1, False, 1), Mover(2, False, 1)) is None
