"""``hal emulate``'s ``Emulator`` around its channel: what it leaves behind when it
stops, and the open files it makes room for."""

from __future__ import annotations

import asyncio
import resource

import pytest

from hal.agent import emulate
from hal.agent.emulate import EmulateConfig, Emulator, raise_open_files
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentRegistered,
    AgentSync,
    JobReport,
)


class Hanging:
    """A channel that registers at once and never answers a sync; it records what
    happened in ``events``."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.flushing = asyncio.Event()

    async def register(self, request: AgentRegister) -> AgentRegistered:
        return AgentRegistered(
            node=request.node,
            heartbeat_interval_seconds=30,
            node_timeout_seconds=90,
            kill_wait_seconds=5,
            server_time=0.0,
        )

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        flush = request.wait_seconds == 0
        if flush:
            self.flushing.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if flush:
                self.events.append("flush cancelled")
            raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self.events.append("closed")


def test_a_stopping_emulator_ends_its_flushes_before_closing_the_channel() -> None:
    async def scenario() -> list[str]:
        emulator = Emulator(EmulateConfig("http://127.0.0.1:1", "t", nodes=1))
        channel = Hanging()
        emulator.channel = channel  # type: ignore[assignment]
        stop = asyncio.Event()
        running = asyncio.create_task(emulator.run(stop))
        node = emulator.nodes[0]
        while not node.registered:
            await asyncio.sleep(0.01)
        report = JobReport(seq=1, job_id=1, attempt=0, kind="started", time=1.0, pid=1)
        node.machine.outbox.append(report)
        emulator._sync_soon(node)
        await asyncio.wait_for(channel.flushing.wait(), 5)
        stop.set()
        await running
        return channel.events

    assert asyncio.run(scenario()) == ["flush cancelled", "closed"]


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The open-file limits (soft, hard): the first is what the process has, each
    ``setrlimit`` appends."""
    now = [(1024, 4096)]
    monkeypatch.setattr(resource, "getrlimit", lambda which: now[-1])
    monkeypatch.setattr(resource, "setrlimit", lambda which, pair: now.append(pair))
    return now


def test_the_soft_limit_on_open_files_is_raised_to_the_hard_one(
    limits: list[tuple[int, int]],
) -> None:
    assert raise_open_files(1000) == 4096
    assert limits == [(1024, 4096), (4096, 4096)]
    assert raise_open_files(10) == 4096  # enough already: left as it is
    assert len(limits) == 2


def test_nodes_whose_sockets_cannot_fit_are_refused_saying_what_to_do(
    limits: list[tuple[int, int]],
) -> None:
    nodes = (4096 - emulate.SPARE_FILES) // emulate.SOCKETS_PER_NODE + 1
    with pytest.raises(ValueError, match=r"need about 4098 open files.*4096 \(`ulimit -Hn`\)"):
        raise_open_files(nodes)
    assert limits == [(1024, 4096)]
