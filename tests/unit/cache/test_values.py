"""The node's value store: TTL, maxmemory and eviction policies, as Redis behaves."""

from __future__ import annotations

import pytest

from hal.cache.values import ENTRY_OVERHEAD, OOM_MESSAGE, OutOfMemory, ValueStore
from hal.core.clock import VirtualClock


def _store(maxmemory: int = 0, policy: str = "noeviction") -> tuple[ValueStore, VirtualClock]:
    clock = VirtualClock(1000.0)
    return ValueStore(clock.now, maxmemory, policy), clock


def test_expired_keys_vanish_on_read_and_are_returned_for_reporting() -> None:
    store, clock = _store()
    store.set(b"a", b"1", deadline=1005.0)
    store.set(b"b", b"2", deadline=None)
    assert store.get(b"a") is not None
    clock.advance(5)
    assert store.get(b"a") is None
    assert store.expire_due() == [b"a"] and store.expire_due() == []
    assert store.get(b"b") is not None and store.expired_total == 1


def test_overwriting_a_key_replaces_its_old_deadline() -> None:
    """The heap still holds the old deadline; it must not expire the new value."""
    store, clock = _store()
    store.set(b"a", b"1", deadline=1001.0)
    store.set(b"a", b"2", deadline=None)
    clock.advance(2)
    assert store.expire_due() == [] and store.get(b"a") is not None


def test_noeviction_refuses_a_write_that_does_not_fit_with_redis_oom_text() -> None:
    per = 1 + 10 + ENTRY_OVERHEAD
    store, _ = _store(maxmemory=2 * per)
    store.set(b"a", b"x" * 10, None)
    store.set(b"b", b"x" * 10, None)
    with pytest.raises(OutOfMemory) as err:
        store.set(b"c", b"x" * 10, None)
    assert str(err.value) == OOM_MESSAGE
    assert OOM_MESSAGE == "OOM command not allowed when used memory > 'maxmemory'."
    # overwriting with the same size still fits
    store.set(b"a", b"y" * 10, None)


def test_allkeys_lru_evicts_the_least_recently_used_keys() -> None:
    per = 1 + 10 + ENTRY_OVERHEAD
    store, _ = _store(maxmemory=3 * per, policy="allkeys-lru")
    for k in (b"a", b"b", b"c"):
        store.set(k, b"x" * 10, None)
    store.get(b"a")  # a is now the most recently used
    _, evicted = store.set(b"d", b"x" * 10, None)
    assert evicted == [b"b"]
    assert sorted(store.items) == [b"a", b"c", b"d"] and store.evicted_total == 1


def test_a_value_larger_than_maxmemory_is_refused_under_lru_and_victims_are_reported() -> None:
    store, _ = _store(maxmemory=200, policy="allkeys-lru")
    store.set(b"a", b"x", None)
    with pytest.raises(OutOfMemory) as err:
        store.set(b"big", b"x" * 500, None)
    assert err.value.evicted == [b"a"]


def test_lowering_maxmemory_below_use_succeeds_and_lru_trims_at_once() -> None:
    store, _ = _store()
    for i in range(10):
        store.set(b"k%d" % i, b"x" * 100, None)
    assert store.configure(maxmemory=1, policy="noeviction") == []
    assert len(store) == 10
    evicted = store.configure(policy="allkeys-lru")
    assert len(evicted) == 10 and store.used == 0


def test_volatile_policies_only_evict_keys_with_a_ttl() -> None:
    per = 1 + 10 + ENTRY_OVERHEAD
    store, _ = _store(maxmemory=2 * per, policy="volatile-lru")
    store.set(b"a", b"x" * 10, None)
    store.set(b"b", b"x" * 10, 2000.0)
    _, evicted = store.set(b"c", b"x" * 10, None)
    assert evicted == [b"b"]
    with pytest.raises(OutOfMemory):
        store.set(b"d", b"x" * 10, None)


def test_deleting_an_expired_key_leaves_it_for_expire_due_to_report() -> None:
    """DEL of a key expired but not yet reaped: nothing live is deleted (0), and the key
    is still reported by ``expire_due`` (it was dropped unreported, and the control plane
    offered the node as a holder until its next inventory)."""
    store, clock = _store()
    store.set(b"k", b"v", deadline=1001.0)
    clock.advance(2)
    assert store.delete(b"k") is False
    assert store.expire_due() == [b"k"] and store.used == 0


def test_refreshing_a_ttl_again_and_again_keeps_the_deadline_heap_bounded() -> None:
    store, clock = _store()
    for i in range(20_000):
        store.set(b"k", b"v", deadline=1000.0 + 3600 + i)
    assert len(store._deadlines) <= 2 * len(store) + 1024
    clock.advance(7200)
    assert store.expire_due() == []  # its live deadline is later
    clock.advance(20_000)
    assert store.expire_due() == [b"k"]
