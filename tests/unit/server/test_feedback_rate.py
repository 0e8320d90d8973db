"""The per-job rate limit on feedback reports (``hal.server.feedback.RateLimit``): a burst
is taken, a flood beyond it is a 429 until the bucket refills, and jobs do not share one."""

from __future__ import annotations

import pytest

from hal.core.clock import VirtualClock
from hal.core.errors import TooManyRequests
from hal.server.feedback import RateLimit


def test_a_burst_is_taken_then_a_flood_refused_until_time_refills_it() -> None:
    clock = VirtualClock(1000.0)
    limit = RateLimit(clock, burst=3, per_s=0.5)
    for _ in range(3):
        limit.take(7)
    with pytest.raises(TooManyRequests, match=r"send again in 2\.0 s"):
        limit.take(7)
    limit.take(8)  # another job has its own bucket
    clock.advance(1.0)
    with pytest.raises(TooManyRequests):
        limit.take(7)  # half a report refilled: not yet
    clock.advance(1.0)
    limit.take(7)
    with pytest.raises(TooManyRequests):
        limit.take(7)


def test_a_forgotten_job_starts_again_with_a_full_bucket() -> None:
    limit = RateLimit(VirtualClock(0.0), burst=1, per_s=0.1)
    limit.take(7)
    limit.forget([8])
    limit.take(7)
