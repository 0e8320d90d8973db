"""The safety properties of ``test_backfill_properties`` with two partitions, ``p`` and
``q`` (overlapping node sets drawn at random), and jobs naming one or both (``-p p,q``,
``-p q,p``), which backfill tries in each: nothing is over-committed at any planned
instant (no start delays a protected reservation, wherever a job was reserved), a
reserved job is one that could not start now, and EASY gives at most one reservation
per partition."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
from test_backfill_properties import CONSERVATIVE, EASY, SETTINGS, _never_over_committed, snapshots

from hal.core.node import Partition
from hal.scheduler.framework import ClusterSnapshot

LISTS = (("p",), ("q",), ("p", "q"), ("q", "p"))


@st.composite
def two_partitions(draw: st.DrawFn) -> ClusterSnapshot:
    snap = draw(snapshots())
    names = [n.name for n in snap.nodes]
    in_p = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    in_q = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    nodes = tuple(dataclasses.replace(n, partitions=()) for n in snap.nodes)
    pending = []
    for job in snap.pending:
        listed = draw(st.sampled_from(LISTS))
        spec = dataclasses.replace(job.spec, partitions=listed)
        pending.append(job.evolve(spec=spec, partition=listed[0]))
    partitions = (Partition("p", tuple(in_p), default=True), Partition("q", tuple(in_q)))
    # the running jobs keep partition p: only their nodes and ends matter here
    return dataclasses.replace(snap, nodes=nodes, partitions=partitions, pending=tuple(pending))


@SETTINGS
@given(two_partitions())
def test_easy_never_delays_a_head_in_either_partition(snap: ClusterSnapshot) -> None:
    _never_over_committed(snap, EASY)
    assert len(EASY.run_pass(snap).reservations) <= 2


@SETTINGS
@given(two_partitions())
def test_conservative_never_delays_a_reservation_in_either_partition(snap: ClusterSnapshot) -> None:
    _never_over_committed(snap, CONSERVATIVE)
