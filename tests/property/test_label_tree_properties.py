"""The label tree (rack < zone < region < site) as the placement tree, on random
clusters of at most ~200 nodes: random labels (some levels missing, some nodes without a
rack), rows shuffled, some nodes busy.

* the tree built from labels nests: two nodes in one rack share their zone, region and
  site domains (so "one rack" always implies "one zone");
* whenever some rack has enough free nodes, a job lands inside one rack;
* a ``--topology required=zone`` job is never split across zones, and waits only when
  no zone has enough free nodes;
* a multi-node ``required=nvlink`` job never spans two NVLink domains.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.topology_labels import label_path
from hal.scheduler.framework import Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.topology import TreeIndex
from hal.testing import cluster, make_job, placed_nodes
from hal.testing.examples import examples

SCHED: Scheduler = build_scheduler(default_profile())


def _case(rng: random.Random) -> tuple[list[Node], set[str]]:
    nodes: list[Node] = []
    n_zones = rng.randint(1, 4)
    with_region = rng.random() < 0.5
    for rack in range(rng.randint(2, 12)):
        zone = f"z{rng.randrange(n_zones)}"
        for i in range(rng.randint(1, 16)):
            name = f"r{rack}n{i}"
            labels = {"rack": f"r{rack}", "zone": zone}
            if with_region:
                labels["region"] = f"g{int(zone[1:]) % 2}"
            if rng.random() < 0.05:
                del labels["rack"]  # a rack of its own
            domain = f"d{rack // 2}" if rng.random() < 0.9 else ""
            nodes.append(
                Node(
                    name,
                    ResourceVector(4, 8 * GiB),
                    topology=label_path(name, labels),
                    labels=labels,
                    nvlink_domain=domain,
                )
            )
    rng.shuffle(nodes)
    busy = {n.name for n in nodes if rng.random() < rng.choice((0.0, 0.3, 0.6))}
    return nodes, busy


def _rack(n: Node) -> str:
    return n.topology[-1]


def _zone(n: Node) -> tuple[str, ...]:
    return n.topology[:-1]


def _place(
    nodes: list[Node], busy: set[str], count: int, level: str = "", required: bool = False
) -> tuple[str, ...] | None:
    snap = cluster().nodes(*nodes)
    if busy:
        names = sorted(busy)
        holder = make_job(900).tasks(4 * len(names), per_node=4).nodes(len(names))
        snap = snap.running(holder.running_on(*names))
    job = make_job(1).nodes(count)
    if level:
        job = job.topology(level, required=required)
    return placed_nodes(SCHED.schedule(snap.pending(job).build())).get(1)


@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_label_tree_follows_the_labels(seed: int) -> None:
    """Same rack and zone labels: same leaf; no rack label: a leaf of its own; same
    zone: same level-1 domain, different zones: different ones."""
    nodes, _ = _case(random.Random(seed))
    index = TreeIndex.from_nodes(nodes)
    assert index.label_levels[:2] == ("rack", "zone")
    leaf = {n.name: int(index.leaf_of[row]) for row, n in enumerate(nodes)}
    zone = {n.name: int(index.up[1][leaf[n.name]]) for n in nodes}
    for a in nodes:
        for b in nodes:
            same_zone = a.labels["zone"] == b.labels["zone"]
            assert (zone[a.name] == zone[b.name]) == same_zone
            racked = "rack" in a.labels and "rack" in b.labels
            same_rack = racked and a.labels["rack"] == b.labels["rack"] and same_zone
            assert (leaf[a.name] == leaf[b.name]) == (same_rack or a.name == b.name)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), fraction=st.floats(0.0, 1.0))
def test_one_rack_whenever_one_fits(seed: int, fraction: float) -> None:
    nodes, busy = _case(random.Random(seed))
    free = [n for n in nodes if n.name not in busy]
    if len(free) < 2:
        return
    count = 2 + int(fraction * (len(free) - 2))
    placed = _place(nodes, busy, count)
    assert placed is not None and len(placed) == count and not set(placed) & busy
    by_name = {n.name: n for n in nodes}
    if max(Counter(_rack(n) for n in free).values()) >= count:
        assert len({_rack(by_name[p]) for p in placed}) == 1


@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(2, 40))
def test_required_zone_is_never_split(seed: int, count: int) -> None:
    nodes, busy = _case(random.Random(seed))
    free = Counter(_zone(n) for n in nodes if n.name not in busy)
    placed = _place(nodes, busy, count, "zone", required=True)
    by_name = {n.name: n for n in nodes}
    if placed is None:
        assert not free or max(free.values()) < count
    else:
        assert len({_zone(by_name[p]) for p in placed}) == 1


@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(2, 40))
def test_required_nvlink_never_spans_two_domains(seed: int, count: int) -> None:
    nodes, busy = _case(random.Random(seed))
    free = Counter(n.nvlink_domain for n in nodes if n.name not in busy and n.nvlink_domain)
    placed = _place(nodes, busy, count, "nvlink", required=True)
    by_name = {n.name: n for n in nodes}
    if placed is None:
        assert not free or max(free.values()) < count
    else:
        domains = {by_name[p].nvlink_domain for p in placed}
        assert len(domains) == 1 and "" not in domains
