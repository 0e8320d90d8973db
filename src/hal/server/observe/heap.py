"""The server's full garbage collections kept short: the heap frozen after each one.

At 25,000 jobs the server holds 0.6–0.9 million objects the collector tracks, and each
full collection (generation 2) walks all of them with the interpreter held: 0.33–0.62 s
of CPU that freed 0–70 objects each in the runs measured, and the event loop's longest
holds (docs/benchmarks-scale.md, "What holds the event loop"). What survives a full
collection is mostly long-lived (the jobs, nodes and views the mirror keeps), so
``HeapFreezer`` moves it to the permanent generation (``gc.freeze``) as the collection
ends, from the collector's own callback, when the younger generations are empty: the
next one walks only what came since, as CPython's documentation suggests for a server's
loaded state. What the mirror drops is freed by its reference count as before; only a
reference cycle among frozen objects waits, until the thaw every ``thaw_s``
(``gc.unfreeze``) and the first full collection after it. ``HAL_GC_THAW_S`` sets it
(default 600; 0: nothing frozen).

The collector is the process's: the freezers of several servers in one process (tests
run them in threads) share one callback, and the last to stop thaws the heap. The
callback also keeps when the latest full collections ran and how long
(``_Collector.full_between``): the slow-pass log (logger ``hal.server.observe.passes``)
counts those within a long pass; with no freezer running (``HAL_GC_THAW_S=0``) none are
timed, and it says so (null), not 0.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections import deque

THAW_S = 600.0
FULL_KEPT = 32  # the latest full collections kept (when, how long) for the slow-pass log


class _Collector:
    """The one callback on the process's collector, and how many freezers use it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.freezes = 0  # full collections seen, each followed by a freeze
        # the latest full collections: (began, seconds), on ``time.perf_counter``
        self.full: deque[tuple[float, float]] = deque(maxlen=FULL_KEPT)
        self._began = 0.0

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        # (in whichever thread collected; at "stop" of a full collection only its
        # survivors are tracked, so they are what is frozen)
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        elif phase == "stop":
            gc.freeze()
            self.freezes += 1
            self.full.append((self._began, time.perf_counter() - self._began))

    def full_between(self, since: float, until: float) -> tuple[int, float] | None:
        """The full collections that overlapped ``since``–``until`` (``perf_counter``)
        among the latest ``FULL_KEPT``, and their seconds within it: every thread
        waited for them (the interpreter is held while one runs). None while the
        callback is not installed (no freezer running): nothing was timed."""
        if self.users == 0:
            return None
        count, seconds = 0, 0.0
        for began, took in list(self.full):
            overlap = min(until, began + took) - max(since, began)
            if overlap > 0:
                count += 1
                seconds += overlap
        return count, seconds

    def join(self) -> None:
        with self.lock:
            if self.users == 0:
                gc.callbacks.append(self.on_gc)
            self.users += 1

    def leave(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                gc.callbacks.remove(self.on_gc)
                gc.unfreeze()


COLLECTOR = _Collector()


class HeapFreezer:
    """While ``run`` runs: the heap frozen after each full collection, thawed every
    ``thaw_s``."""

    def __init__(self, thaw_s: float = THAW_S, *, collector: _Collector | None = None) -> None:
        self.thaw_s = thaw_s
        self.collector = COLLECTOR if collector is None else collector
        self.thaws = 0

    async def run(self) -> None:
        if self.thaw_s <= 0:
            return
        self.collector.join()
        try:
            while True:
                await asyncio.sleep(self.thaw_s)
                gc.unfreeze()  # (the next full collection walks everything, then freezes)
                self.thaws += 1
        finally:
            self.collector.leave()
