"""``StartBound`` against a full screen: whenever it names the row of the head's last
start, no earlier row of the new profile has enough fitting nodes.

Passes over random clusters where jobs start, end early, have their planned ends moved
(earlier or later), start again on other nodes, the ledger compacts, the partition's
nodes change and now and then a job starts inside the pass before the head's screen (an
event the ledger does not know about)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hal.core.job import Allocation
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework import availability
from hal.scheduler.framework.availability import AvailabilityProfile, ReleaseLedger
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.request import NodeRequest


def allocation(rng: random.Random, names: list[str]) -> Allocation:
    picked = rng.sample(names, rng.randint(1, 6))  # wide: releases free several nodes at once
    per = tuple(ResourceVector(rng.randint(3, 8), rng.randint(0, 4) * GiB, 0) for _ in picked)
    return Allocation(tuple(picked), per)


def build(
    ledger: ReleaseLedger,
    table: NodeTable,
    now: float,
    running: dict[int, tuple[Allocation, float]],
) -> AvailabilityProfile:
    """What the backfill stage's ``_build`` does: slots, then gather, then forget."""
    ends, firsts, counts = [], [], []
    for jid, (alloc, end) in running.items():
        first, count = ledger.slot(table, jid, alloc)
        ends.append(end)
        firsts.append(first)
        counts.append(count)
    exclusive = [False] * len(ends)
    gathered = ledger.gather(now, ends, firsts, counts, exclusive, 1.0, np.inf)
    ledger.keep_only(set(running))
    return AvailabilityProfile(table, now, (), gathered=gathered)


@pytest.mark.parametrize("seed", range(60))
def test_the_bound_never_skips_a_row_the_screen_passes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    if seed % 2:
        monkeypatch.setattr(availability, "_LEDGER_SLACK", 0)  # compact often
    n = rng.randint(16, 24)
    nodes = [Node(f"n{i}", ResourceVector(8, 16 * GiB, 0), partitions=("p",)) for i in range(n)]
    names = [x.name for x in nodes]
    table = NodeTable(nodes, [Partition("p")])
    ledger = ReleaseLedger()
    running: dict[int, tuple[Allocation, float]] = {}
    now, next_id, hits = 1000.0, 0, 0
    request = NodeRequest(rng.randint(5, 10), rng.randint(3, 6), None, 0, False)
    mask = np.ones(n, dtype=np.bool_)
    for _ in range(120):
        now += rng.choice((0.0, 1.0, 5.0))
        for jid in [j for j in running if rng.random() < 0.08]:  # ended (early or not)
            table.release(running.pop(jid)[0], exclusive=False)
        for jid in [j for j in running if rng.random() < 0.05]:  # a planned end moved
            alloc, end = running[jid]
            running[jid] = (alloc, max(now + 1.0, end + rng.uniform(-200, 200)))
        for _ in range(rng.choice((0, 0, 1, 2))):  # started
            alloc = allocation(rng, names)
            table.take(alloc, exclusive=False)
            running[next_id] = (alloc, now + rng.uniform(1, 600))
            next_id += 1
        if rng.random() < 0.05:
            mask = np.array([rng.random() < 0.9 for _ in names])
        if rng.random() < 0.05:
            request = NodeRequest(rng.randint(5, 10), rng.randint(3, 6), None, 0, False)
        profile = build(ledger, table, now, running)
        if rng.random() < 0.2:  # a job started in this pass before the head's screen
            ar = table.rows_of(allocation(rng, names))
            profile.reserve(now, now + rng.uniform(1, 600), ar, False)
        k = ledger.start_bound.row(profile, ledger, 7, request, mask, 300.0)
        counts = profile._free_rows(request, mask, 300.0)
        if k is not None:
            hits += 1
            assert profile.times[k] == ledger.start_bound._start
            assert (counts[:k] < request.n_nodes).all(), (k, counts.tolist())
        screened = [r for r in np.flatnonzero(counts >= request.n_nodes).tolist() if r]
        if screened:  # as if the framework confirmed the first screened row
            ledger.start_bound.remember(
                profile, ledger, 7, request, mask, 300.0, screened[0], counts
            )
    assert hits
