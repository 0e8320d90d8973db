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
    Run,
    rank_sum_p,
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


def runs_on(node: str, ratios: list[float]) -> list[Run]:
    return [Run(r, (node,), f"u{i % 3}") for i, r in enumerate(ratios)]


def test_a_node_whose_jobs_run_four_times_their_prediction_stands_out() -> None:
    """Forty runs elsewhere went about as predicted (ratios 0.5-1.5); the slow node's
    eight all ran about 4 times theirs."""
    rng = random.Random(2)
    slow = [3.8, 4.1, 4.4, 3.9, 4.0, 4.2, 3.7, 4.5]
    others = [rng.uniform(0.5, 1.5) for _ in range(40)]
    runs = runs_on("slow", slow) + [Run(r, (f"n{i % 4}",), "u") for i, r in enumerate(others)]
    (found,) = InflationRule().anomalous(runs)
    assert (found.node, found.jobs) == ("slow", 8)
    assert found.ratio == statistics.median(slow)
    assert found.peer_ratio == statistics.median(others)
    # all 8 above all 40: U = 320, its mean 160 and sd sqrt(8 * 40 * 49 / 12)
    z = (320 - 160 - 0.5) / math.sqrt(8 * 40 * 49 / 12)
    assert math.isclose(found.p_value, 0.5 * math.erfc(z / math.sqrt(2)))


def test_a_wide_job_slowed_by_one_node_does_not_flag_its_partners() -> None:
    """Every run that touched ``slow`` ran 4 times longer, also those it shared with
    ``partner``; ``partner``'s own runs went as predicted: only ``slow`` is flagged."""
    rng = random.Random(4)
    runs = [Run(4 * rng.uniform(0.8, 1.2), ("slow", "partner"), "u1") for _ in range(6)]
    runs += [Run(4 * rng.uniform(0.8, 1.2), ("slow",), "u2") for _ in range(6)]
    runs += [Run(rng.uniform(0.8, 1.2), ("partner",), "u3") for _ in range(6)]
    runs += [Run(rng.uniform(0.8, 1.2), (f"n{i % 5}",), "u4") for i in range(40)]
    assert [f.node for f in InflationRule().anomalous(runs)] == ["slow"]


def test_runs_on_many_nodes_cannot_say_which_node_slowed_them() -> None:
    """Ten mispredicted jobs each on the same 100 nodes (ratios near 5) beside narrow
    runs going as predicted: no node of the hundred is to blame, none is flagged; the
    same jobs on 4 nodes each do point at those 4."""
    rng = random.Random(8)
    wide = tuple(f"w{i}" for i in range(100))
    usual = [Run(rng.uniform(0.8, 1.2), (f"n{i % 10}",), f"u{i % 4}") for i in range(60)]
    bad = [Run(5.0 + i / 10, wide, f"u{i % 2}") for i in range(10)]
    assert InflationRule().anomalous(bad + usual) == []
    narrow = [Run(r.ratio, wide[:4], r.user) for r in bad]
    assert [f.node for f in InflationRule().anomalous(narrow + usual)] == list(wide[:4])


def test_inflation_needs_enough_runs_on_both_sides_and_more_than_chance() -> None:
    rule = InflationRule()
    usual = [Run(1.0, (f"n{i}",), "u") for i in range(40)]
    assert rule.anomalous(runs_on("slow", [5.0] * 4) + usual) == []  # 4 < min_jobs
    assert rule.anomalous(runs_on("slow", [5.0] * 9) + usual[:4]) == []  # 4 to compare with
    # five runs with a median 2.7 times the others', but the others spread as widely
    rng = random.Random(6)
    noisy = [Run(rng.lognormvariate(0, 1.5), ("a",), "u") for _ in range(40)]
    assert rule.anomalous(runs_on("slow", [0.5, 0.9, 2.7, 9.0, 12.0]) + noisy) == []
    # a whole cluster running slow (a bad software release) flags no node
    assert rule.anomalous([Run(4.0 + i / 100, (f"n{i % 8}",), "u") for i in range(80)]) == []
    # one user's jobs, all mispredicted alike, landed on one node: nothing about the node
    alone = [Run(5.0, ("busy",), "burst") for _ in range(10)]
    assert rule.anomalous(alone + usual) == []
    assert [f.node for f in rule.anomalous(alone + runs_on("busy", [5.0]) + usual)] == ["busy"]


def test_the_yardstick_is_the_median_of_the_runs_that_did_not_touch_the_node() -> None:
    rng = random.Random(5)
    names = [f"n{i}" for i in range(6)]
    runs = [Run(rng.lognormvariate(0, 1), tuple(rng.sample(names, rng.randrange(1, 4))),
                f"u{i % 5}") for i in range(60)]  # fmt: skip
    everyone = InflationRule(factor=0.0, alpha=2.0)  # flags every node: see each median
    found = everyone.anomalous(runs)
    assert {f.node for f in found} == set(names)
    for f in found:
        elsewhere = [r.ratio for r in runs if f.node not in r.nodes]
        assert f.peer_ratio == statistics.median(elsewhere)
        assert f.jobs == len(runs) - len(elsewhere)


def test_the_rank_sum_p_value_is_mann_whitney_s() -> None:
    """Against scipy's asymptotic Mann-Whitney U (no ties, so no tie correction)."""
    from scipy.stats import mannwhitneyu

    rng = random.Random(7)
    for _ in range(20):
        mine = sorted(rng.lognormvariate(0.4, 1) for _ in range(rng.randrange(5, 15)))
        others = [rng.lognormvariate(0, 1) for _ in range(rng.randrange(5, 200))]
        got = rank_sum_p(sorted(mine + others), mine)
        want = mannwhitneyu(mine, others, alternative="greater", method="asymptotic").pvalue
        assert math.isclose(got, want, rel_tol=1e-9)
