"""The event loop's lag: a callback that holds the loop shows up as a late wake, in the
histogram, in sdiag's longest (reset by ``sdiag -r``), and, with the stall log on, in a
warning that names where the loop was held; the bench's quantile of the histogram."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from hal.bench.scale import _quantile
from hal.compat.sdiag import sdiag_lines
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.observe.config import ObserveConfig
from hal.server.observe.diag import reset_diag, scheduler_diag
from hal.server.observe.loop_lag import LoopLag
from hal.server.observe.plane import ObservePlane
from hal.state.cluster import Cluster


def hold_the_loop(seconds: float) -> None:
    """A callback that never yields: what a long stretch of work on the loop is."""
    time.sleep(seconds)


async def lags_around(lag: LoopLag, block_s: float, quiet_s: float = 0.25) -> None:
    task = asyncio.create_task(lag.run())
    try:
        await asyncio.sleep(quiet_s)  # a few quiet wakes first
        asyncio.get_running_loop().call_soon(hold_the_loop, block_s)
        await asyncio.sleep(0)  # (held here)
        await asyncio.sleep(0.25)  # the late wake, and a few after it
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_a_blocking_callback_shows_as_the_longest_lag() -> None:
    seen: list[float] = []
    lag = LoopLag(seen.append, interval_s=0.05)
    asyncio.run(lags_around(lag, 0.3))
    assert lag.max_s >= 0.2  # (the wake was due within 0.05 s of the block's start)
    assert max(seen) == lag.max_s and len(seen) == lag.samples >= 4
    assert sorted(seen)[len(seen) // 2] < 0.1  # the others woke about on time
    lag.reset()
    assert lag.max_s == 0.0


def test_the_stall_log_says_where_the_loop_was_held(caplog: pytest.LogCaptureFixture) -> None:
    lag = LoopLag(interval_s=0.05, stall_log_s=0.1)
    with caplog.at_level(logging.WARNING, logger="hal.observe"):
        asyncio.run(lags_around(lag, 0.4))
    held = [r.getMessage() for r in caplog.records if "event loop held" in r.getMessage()]
    assert len(held) == 1, held
    assert "hold_the_loop" in held[0]  # the callback's frame, from the loop's stack
    # (time.sleep holds no CPU: the thread ran little of the 0.4 s)
    ran = float(held[0].split("ran ")[1].split(" s")[0])
    assert ran < 0.2


def test_the_stall_log_gives_the_hold_not_a_later_wake(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the watcher looks every 0.125 s while the loop wakes every 0.01 s: the hold ends
    # about 0.06 s after one of its looks, so by its next look later (on-time) wakes have
    # come; the warning is the hold's own
    lag = LoopLag(interval_s=0.01, stall_log_s=0.5)
    with caplog.at_level(logging.WARNING, logger="hal.observe"):
        asyncio.run(lags_around(lag, 1.5, quiet_s=0.31))
    held = [r.getMessage() for r in caplog.records if "event loop held" in r.getMessage()]
    assert len(held) == 1, held
    seconds = float(held[0].split("held ")[1].split(" s")[0])
    assert 1.3 <= seconds <= lag.max_s + 0.01
    assert "hold_the_loop" in held[0]


def test_a_quiet_loop_logs_no_stall(caplog: pytest.LogCaptureFixture) -> None:
    lag = LoopLag(interval_s=0.05, stall_log_s=0.15)
    with caplog.at_level(logging.WARNING, logger="hal.observe"):
        asyncio.run(lags_around(lag, 0.0))
    assert not [r for r in caplog.records if "event loop held" in r.getMessage()]


def test_the_plane_exports_the_lag_and_sdiag_its_longest(
    cluster: Cluster, clock: VirtualClock
) -> None:
    async def scenario() -> ObservePlane:
        await cluster.load()
        plane = ObservePlane(HalConfig(cluster_name="test"), cluster, clock, ObserveConfig())
        plane.loop_lag.interval_s = 0.05
        await plane.start()
        try:
            await asyncio.sleep(0.2)
            hold_the_loop(0.3)
            await asyncio.sleep(0.2)
        finally:
            await plane.stop()
        return plane

    plane = asyncio.run(scenario())

    def value(name: str, **labels: str) -> float:
        return plane.metrics.registry.get_sample_value(name, labels) or 0.0

    count = value("hal_event_loop_lag_seconds_count")
    assert count >= 3
    # the held wake is in a bucket of 0.256 s or more; the quiet ones below it
    assert value("hal_event_loop_lag_seconds_bucket", le="0.128") < count
    assert value("hal_event_loop_lag_seconds_sum") >= 0.2
    d = scheduler_diag(plane)
    assert d.max_event_loop_lag_s is not None and d.max_event_loop_lag_s >= 0.2
    lines = sdiag_lines(d)
    block = lines.index("Event loop statistics (microseconds):")
    assert lines[block + 1] == f"\tMax lag:      {int(d.max_event_loop_lag_s * 1_000_000)}"
    reset_diag(plane)
    assert scheduler_diag(plane).max_event_loop_lag_s == 0.0
    # /metrics is not reset
    assert value("hal_event_loop_lag_seconds_count") == count


def test_the_bench_takes_the_quantile_of_the_window_only() -> None:
    def text(counts: dict[str, int]) -> str:
        return "\n".join(
            f'hal_event_loop_lag_seconds_bucket{{le="{le}"}} {n}' for le, n in counts.items()
        )

    before = text({"0.1": 50, "0.2": 50, "0.4": 50, "+Inf": 50})
    # in the window: 90 wakes under 0.1 s, 8 between 0.1 and 0.2, 2 between 0.2 and 0.4
    after = text({"0.1": 140, "0.2": 148, "0.4": 150, "+Inf": 150})
    assert _quantile(before, after, "hal_event_loop_lag_seconds", 0.5) == pytest.approx(
        0.1 * 50 / 90
    )
    # the 99th of 100 is the first of the two in (0.2, 0.4]: halfway up that bucket
    assert _quantile(before, after, "hal_event_loop_lag_seconds", 0.99) == pytest.approx(0.3)
    assert _quantile(before, before, "hal_event_loop_lag_seconds", 0.99) == 0.0
