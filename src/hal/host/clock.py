"""The host's wall clock, the ``hal.core.clock.Clock`` that a running server, agent or
cache node is given."""

from __future__ import annotations

import time


class SystemClock:
    def now(self) -> float:
        return time.time()
