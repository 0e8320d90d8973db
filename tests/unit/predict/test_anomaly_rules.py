"""The anomaly rules: overrunning jobs and nodes failing against their peers."""

from __future__ import annotations

import math
import random
import statistics

from hal.predict.anomaly import (
    FailureRateRule,
    InflationRule,
    NodeFailures,
    OverrunRule,
    binomial_tail,
)


def test_a_job_overruns_past_three_times_its_prediction_and_an_hour_more() -> None:
    rule = OverrunRule()
    assert rule.threshold(600) == 4200  # 600 + 1 h beats 3 × 600
    assert rule.threshold(7200) == 21_600  # 3 × 2 h beats 2 h + 1 h
    assert not rule.overrunning(600, 4200, model=True)
    assert rule.overrunning(600, 4201, model=True)
    # without a model (user, avg2, learned before its first) nothing is anomalous
    assert not rule.overrunning(600, 100_000, model=False)


def test_a_node_failing_every_job_stands_out_against_a_healthy_peer() -> None:
    rule = FailureRateRule()
    counts = {"bad": NodeFailures(5, 5), "good": NodeFailures(5, 0)}
    (found,) = rule.anomalous(counts)
    assert (found.node, found.rate, found.peer_median, found.threshold) == ("bad", 1.0, 0.0, 0.2)


def test_too_few_jobs_or_no_peer_means_no_verdict() -> None:
    rule = FailureRateRule()
    assert rule.anomalous({"bad": NodeFailures(4, 4), "good": NodeFailures(50, 0)}) == []
    assert rule.anomalous({"bad": NodeFailures(9, 9)}) == []
    assert rule.anomalous({"bad": NodeFailures(9, 9), "new": NodeFailures(2, 0)}) == []


def test_a_cluster_that_fails_everywhere_flags_no_one() -> None:
    """Everyone's jobs fail (a bad software release, not a bad node): no node is far
    worse than its peers."""
    rule = FailureRateRule()
    counts = {f"n{i}": NodeFailures(10, 6 + i % 3) for i in range(10)}
    assert rule.anomalous(counts) == []


def test_the_peer_median_equals_the_plain_median_of_the_others() -> None:
    rng = random.Random(3)
    for n in range(2, 12):
        counts = {f"n{i}": NodeFailures(10, rng.randrange(11)) for i in range(n)}
        rule = FailureRateRule(factor=0.0, margin=-1.0)  # flags every node: see each median
        for found in rule.anomalous(counts):
            others = [c.rate for name, c in counts.items() if name != found.node]
            assert found.peer_median == statistics.median(others)


def test_a_node_whose_jobs_run_four_times_their_prediction_stands_out() -> None:
    """The peers' jobs ran about as predicted (ratios 0.5-1.5); the slow node's six all
    ran about 4 times theirs."""
    rule = InflationRule()
    ratios = {
        "slow": [3.8, 4.1, 4.4, 3.9, 4.0, 4.2],
        "a": [0.5, 0.9, 1.1, 1.4, 0.8, 1.0],
        "b": [1.5, 0.7, 1.2, 0.9, 1.0, 0.6],
    }
    (found,) = rule.anomalous(ratios)
    assert (found.node, found.jobs, found.over) == ("slow", 6, 6)
    assert found.ratio == statistics.median(ratios["slow"])
    assert found.peer_ratio == statistics.median(ratios["a"] + ratios["b"])
    assert found.p_value == binomial_tail(6, 6, 1 / 14)  # no peer job over 2 × 0.95


def test_inflation_needs_enough_jobs_a_peer_and_more_than_chance() -> None:
    rule = InflationRule()
    peer = [1.0] * 10
    assert rule.anomalous({"slow": [5.0] * 4, "a": peer}) == []  # 4 < min_jobs
    assert rule.anomalous({"slow": [5.0] * 9}) == []  # nobody to compare with
    # over the line in median, but the peers cross it often too: chance
    noisy = [0.2, 0.3, 0.5, 1.0, 1.0, 1.2, 3.0, 4.0, 5.0, 6.0]
    assert rule.anomalous({"slow": [2.5, 2.6, 2.7, 2.8, 2.9], "a": noisy}) == []
    # a whole cluster running slow (a bad software release) flags no node
    assert rule.anomalous({f"n{i}": [4.0 + i / 10] * 6 for i in range(8)}) == []


def test_the_peer_median_is_the_median_of_the_other_nodes_jobs() -> None:
    rng = random.Random(5)
    for n in range(2, 9):
        ratios = {f"n{i}": [rng.lognormvariate(0, 1) for _ in range(rng.randrange(5, 12))]
                  for i in range(n)}  # fmt: skip
        everyone = InflationRule(factor=0.0, alpha=2.0)  # flags every node: see each median
        found = everyone.anomalous(ratios)
        assert len(found) == n
        for f in found:
            others = [x for name, r in ratios.items() if name != f.node for x in r]
            assert f.peer_ratio == statistics.median(others)


def test_binomial_tail() -> None:
    assert binomial_tail(5, 0, 0.3) == 1.0
    assert math.isclose(binomial_tail(5, 5, 0.5), 1 / 32)
    assert math.isclose(binomial_tail(3, 2, 0.5), 0.5)
