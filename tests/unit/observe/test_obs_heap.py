"""The heap frozen after each full garbage collection and thawed when due
(``hal.server.observe.heap``), with the real collector."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from hal.observe.config import ObserveConfig
from hal.server.observe.heap import COLLECTOR, HeapFreezer


class Node:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.fixture
def joined() -> Iterator[None]:
    COLLECTOR.join()
    try:
        yield
    finally:
        COLLECTOR.leave()


@pytest.mark.usefixtures("joined")
def test_a_full_collections_survivors_are_frozen_and_a_cycle_waits_for_the_thaw() -> None:
    before = COLLECTOR.freezes
    cycle = Node()
    seen = weakref.ref(cycle)
    gc.collect()  # (cycle alive: it survives, as the mirror's objects do)
    assert COLLECTOR.freezes == before + 1 and gc.get_freeze_count() > 0
    del cycle
    gc.collect()
    assert seen() is not None  # frozen: the collector does not walk it
    gc.unfreeze()  # the thaw
    gc.collect()
    assert seen() is None  # the next full collection frees it


@pytest.mark.usefixtures("joined")
def test_young_collections_freeze_nothing_and_young_garbage_is_still_freed() -> None:
    gc.collect()  # frozen
    before = COLLECTOR.freezes
    cycle = Node()
    seen = weakref.ref(cycle)
    del cycle
    gc.collect(0)
    assert seen() is None  # made after the freeze: a young collection frees it
    gc.collect(1)
    assert COLLECTOR.freezes == before


def test_run_freezes_thaws_and_leaves_the_collector_as_it_was_when_cancelled() -> None:
    async def scenario() -> tuple[int, int]:
        heap = HeapFreezer(thaw_s=0.05)
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
    assert COLLECTOR.on_gc not in gc.callbacks and COLLECTOR.users == 0


def test_two_freezers_share_the_callback_and_the_last_to_stop_thaws() -> None:
    COLLECTOR.join()
    COLLECTOR.join()
    assert gc.callbacks.count(COLLECTOR.on_gc) == 1
    COLLECTOR.leave()
    gc.collect()
    assert gc.get_freeze_count() > 0  # the other still freezes
    COLLECTOR.leave()
    assert gc.get_freeze_count() == 0 and COLLECTOR.on_gc not in gc.callbacks


def test_zero_freezes_nothing_and_the_setting_is_read() -> None:
    assert ObserveConfig.from_env({"HAL_GC_THAW_S": "0"}).gc_thaw_s == 0
    assert ObserveConfig.from_env({}).gc_thaw_s == 600
    asyncio.run(HeapFreezer(thaw_s=0).run())  # returns at once
    assert COLLECTOR.on_gc not in gc.callbacks
