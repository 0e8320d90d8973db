"""Fair sharing of the worker pool between sessions and users (pure, virtual clock)."""

from __future__ import annotations

import pytest

from hal.htc.fairshare import ReleasePolicy, SessionDemand, allocate


def s(
    name: str,
    user: str = "alice",
    *,
    prio: int = 1,
    mn: int = 0,
    mx: int = 100,
    demand: int = 1000,
) -> SessionDemand:
    return SessionDemand(name, user, prio, mn, mx, demand)


@pytest.mark.parametrize(
    ("sessions", "pool", "expected"),
    [
        # one session takes what it can use
        ([s("a")], 8, {"a": 8}),
        ([s("a", demand=3)], 8, {"a": 3}),
        ([s("a", mx=2)], 8, {"a": 2}),
        # equal sessions split evenly; priority weights the split
        ([s("a"), s("b")], 8, {"a": 4, "b": 4}),
        ([s("a", prio=3), s("b")], 8, {"a": 6, "b": 2}),
        # what one cannot use is lent to the other
        ([s("a", demand=1), s("b")], 8, {"a": 1, "b": 7}),
        # owned minimums first, even against priority
        ([s("a", prio=10), s("b", mn=3)], 4, {"a": 1, "b": 3}),
        # minimums beyond the pool: higher priority keeps its own
        ([s("a", mn=3, prio=2), s("b", mn=3)], 4, {"a": 3, "b": 1}),
        # idle sessions hold nothing beyond their minimum
        ([s("a", demand=0), s("b", demand=0, mn=1)], 8, {"a": 0, "b": 1}),
        # users share equally, whatever the number of sessions each opened
        ([s("a1"), s("a2"), s("a3"), s("b", user="bob")], 8, {"a1": 2, "a2": 1, "a3": 1, "b": 4}),
        # an empty pool gives nothing
        ([s("a", mn=2)], 0, {"a": 0}),
    ],
)
def test_allocate(sessions: list[SessionDemand], pool: int, expected: dict[str, int]) -> None:
    assert allocate(sessions, pool) == expected


def test_allocation_never_exceeds_the_pool_or_a_maximum() -> None:
    sessions = [s(f"s{i}", f"u{i % 3}", prio=i % 4 + 1, mn=i % 2, mx=i + 1) for i in range(20)]
    for pool in range(0, 60, 7):
        target = allocate(sessions, pool)
        assert sum(target.values()) <= pool
        assert all(target[x.session] <= x.max_workers for x in sessions)


def test_surplus_is_released_after_idle_or_when_someone_is_short() -> None:
    policy = ReleasePolicy(idle_s=10, reclaim_s=1)
    # Busy session with a surplus but nobody short: keep its workers warm.
    assert policy.releasable("a", 2, idle=False, others_short=False, now=0) == 0
    assert policy.releasable("a", 2, idle=False, others_short=False, now=100) == 0
    # Someone is short: released after reclaim_s.
    policy.forget("a")
    assert policy.releasable("a", 2, idle=False, others_short=True, now=200) == 0
    assert policy.releasable("a", 2, idle=False, others_short=True, now=201) == 2
    # Idle: released after idle_s.
    assert policy.releasable("b", 1, idle=True, others_short=False, now=0) == 0
    assert policy.releasable("b", 1, idle=True, others_short=False, now=9.9) == 0
    assert policy.releasable("b", 1, idle=True, others_short=False, now=10) == 1
    # No surplus resets the timer.
    assert policy.releasable("c", 1, idle=True, others_short=False, now=0) == 0
    assert policy.releasable("c", 0, idle=True, others_short=False, now=5) == 0
    assert policy.releasable("c", 1, idle=True, others_short=False, now=12) == 0
