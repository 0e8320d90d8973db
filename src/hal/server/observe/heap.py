"""The server's full garbage collections kept short: the heap frozen after each one.

At 25,000 jobs the server holds 0.6–0.9 million objects the collector tracks, and each
full collection (generation 2) walks all of them with the interpreter held: 0.33–0.62 s
of CPU that freed 0–70 objects each in the runs measured, and the event loop's longest
holds (docs/benchmarks-scale.md, "What holds the event loop"). What survives a full
collection is mostly long-lived (the jobs, nodes and views the mirror keeps), so
``HeapFreezer`` moves it to the permanent generation (``gc.freeze``) once the collection
is over: the next one walks only what came since, as CPython's documentation suggests
for a server's loaded state. What the mirror drops is freed by its reference count as
before; only a reference cycle among frozen objects waits, until the thaw every
``thaw_s`` (``gc.unfreeze``), after which the next full collection walks everything once
more and frees it: what can wait is bounded by the cycles made in ``thaw_s``.
``HAL_GC_THAW_S`` sets it (default 600; 0: nothing frozen).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("hal.observe")

THAW_S = 600.0
CHECK_S = 1.0  # how soon after a full collection its survivors are frozen


class HeapFreezer:
    """Freezes the heap after each full collection and thaws it every ``thaw_s``."""

    def __init__(
        self,
        thaw_s: float = THAW_S,
        *,
        check_s: float = CHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.thaw_s, self.check_s, self.clock = thaw_s, check_s, clock
        self.full_collections = 0  # seen since ``run`` started
        self.freezes = 0
        self.thaws = 0
        self._collected = False  # a full collection ended since the last look

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # (called by the collector, in whichever thread collected: only a flag here)
        if phase == "stop" and info["generation"] == 2:
            self.full_collections += 1
            self._collected = True

    def step(self, thawed: float) -> float:
        """One look: freeze after a full collection, thaw when due; when it last thawed."""
        if self._collected:
            self._collected = False
            gc.freeze()
            self.freezes += 1
        now = self.clock()
        if now - thawed < self.thaw_s:
            return thawed
        if gc.get_freeze_count():
            log.debug(
                "heap thawed: %d objects back in the oldest generation", gc.get_freeze_count()
            )
            gc.unfreeze()
            self.thaws += 1
        return now

    async def run(self) -> None:
        if self.thaw_s <= 0:
            return
        gc.callbacks.append(self._on_gc)
        thawed = self.clock()
        try:
            while True:
                await asyncio.sleep(self.check_s)
                thawed = self.step(thawed)
        finally:
            gc.callbacks.remove(self._on_gc)
            gc.unfreeze()
