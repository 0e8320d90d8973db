"""The burst decision (``hal.cloud.burst``): the gate on the expected start, the
expected cost of each group, and the patience users and administrators give."""

from __future__ import annotations

import math
import random

import pytest

from hal.cloud.burst import (
    NEVER,
    Patience,
    decide,
    expected_busy_s,
    interruption_probability,
    offer,
    parse_patience,
    patience,
)
from hal.core.errors import InvalidRequest
from hal.core.node_groups import SPOT, NodeGroup
from hal.core.resources import GiB, ResourceVector

NOW = 1_000_000.0


def group(name: str, price: float, *, spot: bool = False, rate: float = 0.0, boot: float = 100.0):
    return NodeGroup(
        name=name,
        provider="local",
        nodes=tuple(f"{name}{i}" for i in range(8)),
        resources=ResourceVector(4, 8 * GiB, 0),
        price_per_hour=price,
        market=SPOT if spot else "on_demand",
        boot_seconds=boot,
        interruption_rate=rate,
    )


def test_interruption_probability_is_poisson_over_nodes_and_time() -> None:
    assert interruption_probability(0.0, 4, 3600) == 0.0
    # one node an hour at 0.1/h: 1 - e^-0.1; four nodes: 1 - e^-0.4
    assert interruption_probability(0.1, 1, 3600) == pytest.approx(1 - math.exp(-0.1))
    assert interruption_probability(0.1, 4, 3600) == pytest.approx(1 - math.exp(-0.4))


def test_expected_busy_time_matches_a_replayed_restart_process() -> None:
    """Restarts from scratch on each interruption, a new boot each time: the formula
    against the same process drawn 20,000 times."""
    rate, nodes, run, boot = 0.5, 2, 3600.0, 60.0
    rng = random.Random(7)
    total = 0.0
    for _ in range(20_000):
        held = boot
        while True:
            t = rng.expovariate(rate * nodes / 3600.0)
            if t >= run:
                held += run
                break
            held += t + boot
        total += held
    assert expected_busy_s(rate, nodes, run, 0.0, boot) == pytest.approx(total / 20_000, rel=0.03)


def test_checkpoints_bound_the_work_an_interruption_loses() -> None:
    without = expected_busy_s(0.5, 4, 4 * 3600.0)
    every_ten_minutes = expected_busy_s(0.5, 4, 4 * 3600.0, checkpoint_s=600.0)
    assert 4 * 3600.0 < every_ten_minutes < without
    assert expected_busy_s(0.0, 4, 100.0, boot_s=30.0) == 130.0
    # a job that would all but never finish between two interruptions
    assert math.isinf(expected_busy_s(10.0, 64, 24 * 3600.0))


def test_offer_prices_boot_and_run_and_spot_risk() -> None:
    od = offer(group("od", 0.4), 2, 3600.0, NOW)
    assert od.run_cost == pytest.approx(0.4 * 2 * 3700 / 3600)
    assert od.interruption_cost == 0.0 and od.ready_at == NOW + 100.0
    spot = offer(group("sp", 0.1, spot=True, rate=0.2), 2, 3600.0, NOW)
    assert spot.p_interruption == pytest.approx(1 - math.exp(-0.4))
    assert spot.interruption_cost > 0
    # the risk over a longer run (a time limit) costs more than over the prediction
    longer = offer(group("sp", 0.1, spot=True, rate=0.2), 2, 3600.0, NOW, risk_s=4 * 3600.0)
    assert longer.interruption_cost > spot.interruption_cost
    # observed boots win over the configured one
    assert offer(group("od", 0.4), 1, 60.0, NOW, boot_s=20.0).ready_at == NOW + 20.0


def judge(expected: float | None, offers, *, patience_s: float = 0.0, waited: float = 600.0):
    return decide(
        7,
        NOW,
        waited_s=waited,
        expected_start=expected,
        patience_s=patience_s,
        floor_s=60.0,
        runtime_s=3600.0,
        offers=offers,
    )


def test_a_job_that_starts_before_a_node_boots_waits() -> None:
    offers = [offer(group("od", 0.4), 1, 3600.0, NOW)]
    soon = judge(NOW + 50.0, offers)
    assert soon.group is None and not soon.costs
    assert "no later than" in soon.why
    late = judge(NOW + 500.0, offers)
    assert late.group == "od" and set(late.costs) == {"od"}
    # patience moves the line: 500 s later is not worth it to a job that waits 10 min
    assert judge(NOW + 500.0, offers, patience_s=600.0).group is None
    assert judge(NOW + 800.0, offers, patience_s=600.0).group == "od"


def test_the_floor_never_and_no_forecast() -> None:
    offers = [offer(group("od", 0.4), 1, 3600.0, NOW)]
    assert judge(None, offers).group == "od"  # none known: no node there can hold it
    assert judge(None, offers, waited=30.0).group is None  # under pending_seconds
    never = judge(None, offers, patience_s=NEVER)
    assert never.group is None and "never" in never.why
    assert judge(None, []).why == "no group can hold it"


def test_only_groups_that_boot_in_time_may_open_nodes() -> None:
    fast = offer(group("fast", 0.9, boot=60.0), 1, 3600.0, NOW)
    slow = offer(group("slow", 0.1, boot=900.0), 1, 3600.0, NOW)
    d = judge(NOW + 600.0, [slow, fast])
    assert d.group == "fast" and set(d.costs) == {"fast"}
    assert [o.group for o in d.offers] == ["slow", "fast"]  # cheapest first, shown all


def test_spot_wins_small_jobs_and_loses_wide_long_ones() -> None:
    od = group("od", 0.4)
    sp = group("sp", 0.14, spot=True, rate=0.05)
    small = judge(None, [offer(od, 1, 1800.0, NOW), offer(sp, 1, 1800.0, NOW)])
    assert small.group == "sp"
    wide = judge(None, [offer(od, 64, 12 * 3600.0, NOW), offer(sp, 64, 12 * 3600.0, NOW)])
    assert wide.group == "od"
    # a spot job that would never finish is not sent there even alone
    alone = judge(None, [offer(group("sp", 0.14, spot=True, rate=5.0), 64, 86400.0, NOW)])
    assert alone.group is None


def test_data_cost_decides_between_equal_groups() -> None:
    a = offer(group("a", 0.4), 1, 3600.0, NOW, data_cost=2.0)
    b = offer(group("b", 0.4), 1, 3600.0, NOW, data_cost=0.0)
    assert judge(None, [a, b]).group == "b"


@pytest.mark.parametrize(
    ("text", "seconds", "of_limit"),
    [
        ("90", 90.0, 0.0),
        ("10m", 600.0, 0.0),
        ("2h", 7200.0, 0.0),
        ("01:30:00", 5400.0, 0.0),
        ("0.5x", 0.0, 0.5),
        ("10m+0.5x", 600.0, 0.5),
        ("NEVER", NEVER, 0.0),
    ],
)
def test_burst_after_forms(text: str, seconds: float, of_limit: float) -> None:
    p = parse_patience(text)
    assert (p.seconds, p.of_limit) == (seconds, of_limit)
    assert parse_patience(str(p)) == p  # as stored and shown


@pytest.mark.parametrize("text", ["soon", "-5", "1:2:3:4", "x", "10m+", "nanx"])
def test_bad_burst_after_says_what_to_write(text: str) -> None:
    with pytest.raises(InvalidRequest, match=r"10m.*0\.5x.*never"):
        parse_patience(text)


def test_patience_comes_from_the_job_then_qos_then_partition() -> None:
    by_qos = {"low": Patience(NEVER)}
    by_part = {"gpu": Patience(3600.0)}
    default = Patience(0.0, 0.25)
    assert patience("5m", "low", "gpu", by_qos, by_part, default) == Patience(300.0)
    assert patience("", "low", "gpu", by_qos, by_part, default).at(100) == NEVER
    assert patience("", "normal", "gpu", by_qos, by_part, default).at(100) == 3600.0
    assert patience("", None, "batch", by_qos, by_part, default).at(4000) == 1000.0


def test_a_job_not_forecast_yet_waits_a_pass() -> None:
    offers = [offer(group("od", 0.4), 1, 3600.0, NOW)]
    due = decide(
        7,
        NOW,
        waited_s=600.0,
        expected_start=None,
        patience_s=0.0,
        floor_s=0.0,
        runtime_s=3600.0,
        offers=offers,
        forecast_due=True,
    )
    assert due.group is None and "not worked out yet" in due.why
