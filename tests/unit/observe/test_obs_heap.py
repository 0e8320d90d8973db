"""The heap frozen after each full garbage collection and thawed when due
(``hal.server.observe.heap``), with the real collector."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from hal.observe.config import ObserveConfig
from hal.server.observe.heap import HeapFreezer


class Node:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_full_collection_is_frozen_after_and_a_cycle_waits_for_the_thaw() -> None:
    clock = Clock()
    heap = HeapFreezer(thaw_s=60, clock=clock)
    gc.callbacks.append(heap._on_gc)
    try:
        cycle = Node()
        seen = weakref.ref(cycle)
        gc.collect()  # (cycle alive: it survives, as the mirror's objects do)
        assert heap.full_collections == 1
        thawed = heap.step(0.0)
        assert heap.freezes == 1 and gc.get_freeze_count() > 0 and thawed == 0.0
        del cycle
        gc.collect()
        assert seen() is not None  # frozen: the collector does not walk it
        heap.step(thawed)  # (that collection's survivors frozen too)
        clock.now = 60.0
        assert heap.step(thawed) == 60.0
        assert heap.thaws == 1 and gc.get_freeze_count() == 0
        gc.collect()
        assert seen() is None  # thawed, the next full collection frees it
    finally:
        gc.callbacks.remove(heap._on_gc)


def test_young_collections_freeze_nothing() -> None:
    heap = HeapFreezer(thaw_s=60, clock=Clock())
    gc.callbacks.append(heap._on_gc)
    try:
        gc.collect(0)
        gc.collect(1)
        heap.step(0.0)
        assert heap.full_collections == 0 and gc.get_freeze_count() == 0
    finally:
        gc.callbacks.remove(heap._on_gc)


def test_run_freezes_and_leaves_the_heap_thawed_when_cancelled() -> None:
    async def scenario() -> int:
        heap = HeapFreezer(thaw_s=600, check_s=0.01)
        task = asyncio.create_task(heap.run())
        await asyncio.sleep(0.02)
        gc.collect()
        await asyncio.sleep(0.05)
        frozen = gc.get_freeze_count()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert heap._on_gc not in gc.callbacks
        return frozen

    assert asyncio.run(scenario()) > 0
    assert gc.get_freeze_count() == 0


def test_zero_freezes_nothing_and_the_setting_is_read() -> None:
    assert ObserveConfig.from_env({"HAL_GC_THAW_S": "0"}).gc_thaw_s == 0
    assert ObserveConfig.from_env({}).gc_thaw_s == 600
    heap = HeapFreezer(thaw_s=0)
    asyncio.run(heap.run())  # returns at once
    assert heap._on_gc not in gc.callbacks
