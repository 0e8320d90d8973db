"""``GET /v1/events`` follows the cluster: an event committed while the stream was
writing its last batch (no one waiting on the condition at that moment) is sent at
once, not after the next event or the 15 s keepalive."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hal.api.routes_events import _stream
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import JobSpec
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore

SPEC = JobSpec(user="ann", script="#!/bin/sh\ntrue\n", hold=True)


def test_an_event_committed_while_the_stream_wrote_is_sent_at_once(tmp_path: Path) -> None:
    async def scenario() -> str:
        cluster = Cluster(
            SqlStateStore(f"sqlite:///{tmp_path}/hal.db"), HalConfig(), VirtualClock(5.0)
        )
        await cluster.load()
        await cluster.submit([SPEC])
        ctx: Any = SimpleNamespace(cluster=cluster)
        stream = _stream(ctx, 0, True)
        first = await anext(stream)  # the stream is now suspended at its write
        assert "id: 1\n" in first
        await cluster.submit([SPEC])  # notified with no one waiting yet
        second = await asyncio.wait_for(anext(stream), 2.0)
        await stream.aclose()
        await cluster.close()
        return second

    assert "id: 2\n" in asyncio.run(scenario())
