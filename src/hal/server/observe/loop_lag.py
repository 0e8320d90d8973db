"""How late the server's event loop answers: ``hal_event_loop_lag_seconds``.

Everything the control plane does between two awaits holds its one event loop: a
request waits for whatever ran before it (a plan's starts being written, a batch of
agents' reports mirrored, a list's JSON built) and for the interpreter, which the
scheduler's pass (a thread) and the store's thread share with it. ``LoopLag.run`` sleeps
``INTERVAL_S`` again and again and records how much later than asked it woke: the lag a
request arriving then would have waited before the loop first looked at it. The longest
is kept for sdiag (``max_event_loop_lag_s``, reset by ``sdiag -r``), every one goes to
the histogram.

``stall_log_s`` (``HAL_LOOP_STALL_LOG_S``; 0: off) adds a thread that looks at the loop
every quarter of it: a loop held that long has its thread's stack taken until it turns
again, then one warning says for how long it was held, how much of that its thread ran
(CPU time; the rest it waited for the interpreter or the machine) and where it was seen,
the most seen place first. It is how the stalls in docs/benchmarks-scale.md were found.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("hal.observe")

INTERVAL_S = 0.1
# 1 ms to about 16 s, ×2: a loop that answers within a few milliseconds to one held for
# seconds (the scheduling cycles' buckets)
LAG_BUCKETS = tuple(0.001 * 2**i for i in range(15))
STACK_FRAMES = 14  # of a stall's stacks, the innermost frames logged
STACKS_LOGGED = 3


class LoopLag:
    """The lag of the loop ``run`` runs on. ``observe`` gets every lag (seconds)."""

    def __init__(
        self,
        observe: Callable[[float], None] = lambda lag: None,
        *,
        interval_s: float = INTERVAL_S,
        stall_log_s: float = 0.0,
    ) -> None:
        self.observe = observe
        self.interval_s = interval_s
        self.stall_log_s = stall_log_s
        self.max_s = 0.0
        self.last_s = 0.0
        self.last_cpu_s = 0.0
        self.samples = 0
        self._beat = time.monotonic()  # when the loop last went to sleep (the watcher's)

    def record(self, lag: float, cpu_s: float = 0.0) -> None:
        """One wake ``lag`` late; ``cpu_s``: the loop's thread's CPU time since it slept."""
        self.last_s = lag
        self.last_cpu_s = cpu_s
        self.max_s = max(self.max_s, lag)
        self.samples += 1
        self.observe(lag)

    def reset(self) -> None:
        """``sdiag -r``: the longest starts again from 0."""
        self.max_s = 0.0

    async def run(self) -> None:
        stop = threading.Event()
        watcher = None
        if self.stall_log_s > 0:
            loop_thread = threading.get_ident()
            watcher = threading.Thread(
                target=self._watch, args=(loop_thread, stop), name="hal-loop-watch", daemon=True
            )
            watcher.start()
        try:
            while True:
                # (set after the last wake was recorded: the watcher reads that wake's)
                before = self._beat = time.monotonic()
                cpu = time.thread_time()
                await asyncio.sleep(self.interval_s)
                lag = max(0.0, time.monotonic() - before - self.interval_s)
                self.record(lag, time.thread_time() - cpu)
        finally:
            stop.set()
            if watcher is not None:
                watcher.join(timeout=1.0)  # (it wakes at once: ``stop`` is set)

    def _watch(self, loop_thread: int, stop: threading.Event) -> None:
        """The stall log's thread: the loop's stacks while it is held past
        ``stall_log_s``, logged once it turns again."""
        seen: Counter[str] = Counter()
        held_since = None
        while not stop.wait(self.stall_log_s / 4):
            beat = self._beat
            if held_since is not None and beat != held_since:  # it turned: log the stall
                self._log_stall(seen)
                seen.clear()
                held_since = None
            if time.monotonic() - beat - self.interval_s >= self.stall_log_s:
                frame = sys._current_frames().get(loop_thread)
                if frame is not None:
                    held_since = beat
                    seen["".join(traceback.format_stack(frame)[-STACK_FRAMES:])] += 1

    def _log_stall(self, seen: Counter[str]) -> None:
        places = "\n".join(
            f"-- seen {n} times:\n{stack}" for stack, n in seen.most_common(STACKS_LOGGED)
        )
        log.warning(
            "event loop held %.2f s (its thread ran %.2f s of CPU meanwhile); it was at:\n%s",
            self.last_s,
            self.last_cpu_s,
            places,
        )
