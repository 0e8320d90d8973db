"""The heap frozen after each full garbage collection and thawed when due
(``hal.server.observe.heap``), with the real collector."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from hal.observe.config import ObserveConfig
from hal.server.observe.heap import HeapFreezer, _Collector


class Node:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def alone() -> Iterator[_Collector]:
    """A collector of the test's own, and no other callback on the process's collector
    meanwhile (a server another test left running in this process may hold one; the
    list is the collector's own, so it is emptied and filled again in place)."""
    others = list(gc.callbacks)
    gc.callbacks.clear()
    gc.unfreeze()
    try:
        yield _Collector()
    finally:
        gc.unfreeze()
        gc.callbacks[:] = others


@pytest.fixture
def joined(alone: _Collector) -> Iterator[_Collector]:
    alone.join()
    try:
        yield alone
    finally:
        alone.leave()


def test_a_full_collections_survivors_are_frozen_and_a_cycle_waits_for_the_thaw(
    joined: _Collector,
) -> None:
    before = joined.freezes
    cycle = Node()
    seen = weakref.ref(cycle)
    gc.collect()  # (cycle alive: it survives, as the mirror's objects do)
    assert joined.freezes == before + 1 and gc.get_freeze_count() > 0
    del cycle
    gc.collect()
    assert seen() is not None  # frozen: the collector does not walk it
    gc.unfreeze()  # the thaw
    gc.collect()
    assert seen() is None  # the next full collection frees it


def test_young_collections_freeze_nothing_and_young_garbage_is_still_freed(
    joined: _Collector,
) -> None:
    gc.collect()  # frozen
    before = joined.freezes
    cycle = Node()
    seen = weakref.ref(cycle)
    del cycle
    gc.collect(0)
    assert seen() is None  # made after the freeze: a young collection frees it
    gc.collect(1)
    assert joined.freezes == before


def test_run_freezes_thaws_and_leaves_the_collector_as_it_was_when_cancelled(
    alone: _Collector,
) -> None:
    async def scenario() -> tuple[int, int]:
        heap = HeapFreezer(thaw_s=0.05, collector=alone)
        task = asyncio.create_task(heap.run())
        await asyncio.sleep(0)
        gc.collect()
        frozen = gc.get_freeze_count()
        await asyncio.sleep(0.08)
        thawed = gc.get_freeze_count()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert heap.thaws >= 1
        return frozen, thawed

    frozen, thawed = asyncio.run(scenario())
    assert frozen > 0 and thawed == 0
    assert gc.callbacks == [] and alone.users == 0


def test_two_freezers_share_the_callback_and_the_last_to_stop_thaws(alone: _Collector) -> None:
    alone.join()
    alone.join()
    assert gc.callbacks == [alone.on_gc]
    alone.leave()
    gc.collect()
    assert gc.get_freeze_count() > 0  # the other still freezes
    alone.leave()
    assert gc.get_freeze_count() == 0 and gc.callbacks == []


def test_zero_freezes_nothing_and_the_setting_is_read(alone: _Collector) -> None:
    assert ObserveConfig.from_env({"HAL_GC_THAW_S": "0"}).gc_thaw_s == 0
    assert ObserveConfig.from_env({}).gc_thaw_s == 600
    asyncio.run(HeapFreezer(thaw_s=0, collector=alone).run())  # returns at once
    assert gc.callbacks == [] and alone.users == 0
