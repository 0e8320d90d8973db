"""Where multi-node jobs land on random switch trees (issue 7's placement targets).

Clusters of at most 256 nodes: 2-16 leaf switches of 1-16 nodes under 1-3 switch
levels, node rows shuffled (so row order says nothing about leaves), some nodes busy. A
job of 2..free nodes goes through a real scheduler pass with the default profile plus
the topology plugin, and is checked against an exact oracle: the fewest leaves whose
free nodes add up to the job, found by exhaustive search over sets of leaves.

* whenever some leaf has enough free nodes, the job lands inside one leaf (always);
* otherwise it spans at most optimum + 1 leaves in >= 95% of cases (the issue's
  target; this implementation is exact, which the seeded sweep also pins down);
* a ``--topology required=leaf`` job is never split.
"""

from __future__ import annotations

import itertools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.topology import Topology
from hal.scheduler.framework import ClusterSnapshot, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import cluster, make_job, placed_nodes
from hal.testing.examples import examples

SCHED: Scheduler = build_scheduler(default_profile(topology=Topology()))


def _case(rng: random.Random) -> tuple[list[Node], set[str], dict[str, str]]:
    """Nodes with paths (rows shuffled), the busy ones, and node → leaf."""
    n_leaves = rng.randint(2, 16)
    levels = rng.randint(1, 3)
    nodes: list[Node] = []
    leaf_of: dict[str, str] = {}
    for leaf in range(n_leaves):
        spine = rng.randrange(max(1, n_leaves // 3))
        core = spine % 2
        path = (f"c{core}", f"s{spine}", f"l{leaf}")[3 - levels :]
        for i in range(rng.randint(1, 16)):
            name = f"l{leaf}n{i}"
            leaf_of[name] = f"l{leaf}"
            nodes.append(Node(name, ResourceVector(4, 8 * GiB), topology=path))
    rng.shuffle(nodes)
    busy = {n.name for n in nodes if rng.random() < rng.choice((0.0, 0.3, 0.6))}
    return nodes, busy, leaf_of


def _free_per_leaf(nodes: list[Node], busy: set[str], leaf_of: dict[str, str]) -> list[int]:
    free: dict[str, int] = {}
    for n in nodes:
        if n.name not in busy:
            free[leaf_of[n.name]] = free.get(leaf_of[n.name], 0) + 1
    return sorted(free.values(), reverse=True)


def _optimum(free: list[int], count: int) -> int:
    """Exhaustive: the fewest leaves (any of them, in any combination) whose free nodes
    add up to ``count``. Independent of the scheduler's greedy reasoning on purpose."""
    for k in range(1, len(free) + 1):
        if any(sum(combo) >= count for combo in itertools.combinations(free, k)):
            return k
    raise AssertionError("the job does not fit at all")


def _snapshot(nodes: list[Node], busy: set[str], job_nodes: int, **topo: object) -> ClusterSnapshot:
    snap = cluster().nodes(*nodes)
    if busy:
        names = sorted(busy)
        holder = make_job(900).tasks(4 * len(names), per_node=4).nodes(len(names))
        snap = snap.running(holder.running_on(*names))
    job = make_job(1).nodes(job_nodes)
    if topo:
        job = job.topology(str(topo["level"]), required=bool(topo["required"]))
    return snap.pending(job).build()


def _leaves_used(
    nodes: list[Node], busy: set[str], leaf_of: dict[str, str], count: int
) -> tuple[int, int, int]:
    """(leaves used, optimum, largest free leaf) for a ``count``-node job."""
    plan = SCHED.schedule(_snapshot(nodes, busy, count))
    placed = placed_nodes(plan)[1]
    assert len(placed) == count and not set(placed) & busy
    free = _free_per_leaf(nodes, busy, leaf_of)
    return len({leaf_of[n] for n in placed}), _optimum(free, count), free[0]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), fraction=st.floats(0.0, 1.0))
def test_one_leaf_when_one_fits_and_near_optimal_otherwise(seed: int, fraction: float) -> None:
    rng = random.Random(seed)
    nodes, busy, leaf_of = _case(rng)
    total_free = len(nodes) - len(busy)
    if total_free < 2:
        return
    count = 2 + int(fraction * (total_free - 2))
    used, optimum, largest = _leaves_used(nodes, busy, leaf_of, count)
    if largest >= count:
        assert used == 1
    else:
        assert used <= optimum + 1


def test_seeded_sweep_meets_the_95_percent_target_and_is_exact() -> None:
    """500 random clusters and jobs that no single leaf can hold."""
    rng = random.Random(7)
    results: list[tuple[int, int]] = []
    while len(results) < 500:
        nodes, busy, leaf_of = _case(rng)
        free = _free_per_leaf(nodes, busy, leaf_of)
        if len(free) < 2 or sum(free) <= free[0]:
            continue
        count = rng.randint(free[0] + 1, sum(free))
        used, optimum, _ = _leaves_used(nodes, busy, leaf_of, count)
        results.append((used, optimum))
    within = sum(used <= opt + 1 for used, opt in results) / len(results)
    exact = sum(used == opt for used, opt in results) / len(results)
    assert within >= 0.95
    assert exact == 1.0  # largest-first is exact for "fewest leaves"; a heuristic may drop this


@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(2, 20))
def test_required_leaf_is_never_split(seed: int, count: int) -> None:
    nodes, busy, leaf_of = _case(random.Random(seed))
    plan = SCHED.schedule(_snapshot(nodes, busy, count, level="leaf", required=True))
    placed = placed_nodes(plan).get(1)
    free = _free_per_leaf(nodes, busy, leaf_of)
    if placed is None:
        assert not free or free[0] < count
    else:
        assert len({leaf_of[n] for n in placed}) == 1
