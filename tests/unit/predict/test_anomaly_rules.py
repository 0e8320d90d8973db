"""The anomaly rules: overrunning jobs and nodes failing against their peers."""

from __future__ import annotations

import random
import statistics

from hal.predict.anomaly import FailureRateRule, NodeFailures, OverrunRule


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
