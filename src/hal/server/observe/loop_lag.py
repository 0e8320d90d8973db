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
again; the wake that ends the hold logs one warning: for how long it was held, how much
of that its thread ran (CPU time; the rest it waited for the interpreter or the machine)
and where the watcher saw it, the most seen place first. It is how the stalls in
docs/benchmarks-scale.md were found.
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
        self.samples = 0
        self._beat = time.monotonic()  # when the loop last went to sleep (the watcher's)
        # the stacks the watcher took while the loop was held past its beat ``_stall_beat``
        self._stall_lock = threading.Lock()
        self._stall_beat = 0.0
        self._stall_seen: Counter[str] = Counter()

    def record(self, lag: float) -> None:
        """One wake ``lag`` late."""
        self.max_s = max(self.max_s, lag)
        self.samples += 1
        self.observe(lag)

    def reset(self) -> None:
        """``sdiag -r``: the longest starts again from 0."""
        self.max_s = 0.0

    async def run(self) -> None:
        stop = threading.Event()
        if self.stall_log_s > 0:
            loop_thread = threading.get_ident()
            threading.Thread(
                target=self._watch, args=(loop_thread, stop), name="hal-loop-watch", daemon=True
            ).start()
        try:
            while True:
                before = self._beat = time.monotonic()
                cpu = time.thread_time()
                await asyncio.sleep(self.interval_s)
                lag = max(0.0, time.monotonic() - before - self.interval_s)
                self.record(lag)
                if self.stall_log_s > 0 and lag >= self.stall_log_s:
                    self._log_stall(before, lag, time.thread_time() - cpu)
        finally:
            stop.set()  # (the watcher wakes at once and ends; the loop does not wait for it)

    def _watch(self, loop_thread: int, stop: threading.Event) -> None:
        """The stall log's thread: the loop's stacks while it is held past
        ``stall_log_s``, kept for the wake that ends the stall to log."""
        while not stop.wait(self.stall_log_s / 4):
            beat = self._beat
            if time.monotonic() - beat - self.interval_s < self.stall_log_s:
                continue
            frame = sys._current_frames().get(loop_thread)
            if frame is None:
                continue
            stack = traceback.extract_stack(frame, limit=STACK_FRAMES)  # the innermost
            del frame
            with self._stall_lock:
                if self._stall_beat != beat:
                    self._stall_beat = beat
                    self._stall_seen = Counter()
                self._stall_seen["".join(traceback.format_list(stack))] += 1

    def _log_stall(self, beat: float, lag: float, cpu_s: float) -> None:
        """The wake ``lag`` late after the loop slept at ``beat``: one warning with that
        hold, its thread's CPU time ``cpu_s`` and the stacks the watcher took meanwhile."""
        with self._stall_lock:
            seen = self._stall_seen if self._stall_beat == beat else Counter()
            self._stall_seen = Counter()
        places = "\n".join(
            f"-- seen {n} times:\n{stack}" for stack, n in seen.most_common(STACKS_LOGGED)
        )
        log.warning(
            "event loop held %.2f s (its thread ran %.2f s of CPU meanwhile); it was at:\n%s",
            lag,
            cpu_s,
            places or "(no stack taken: it turned before the watcher looked)",
        )
