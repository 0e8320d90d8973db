"""A real agent and a real control plane whose replies go astray: a `Signal` in a reply
the agent never got was lost for good, and one in a reply that overtook the reply with
its job's `Launch` was dropped (the agent did not know the job yet). Instructions are now
numbered and resent until applied, each once, in order (``hal.wire.agent``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import WAIT, wait_for
from hal.agent import AgentConfig, run_agent
from hal.agent.channel import ChannelUnavailable, HttpAgentChannel
from hal.testing.live import LiveServer
from hal.wire.agent import AgentInstructions, AgentSync, Launch, Signal
from hal.wire.submit import JobSubmit

# traps SIGUSR1 once it says it is ready; without the signal it runs 30 s and succeeds
TRAPS_USR1 = """#!/bin/sh
trap 'echo got > got-usr1; exit 3' USR1
touch ready
sleep 30 &
wait
"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path / "server") as server:
        yield server


def config_for(config: AgentConfig, live: LiveServer) -> AgentConfig:
    return dataclasses.replace(config, server_url=live.url, token=live.agent_token)


async def run_with(
    config: AgentConfig, channel: HttpAgentChannel, job_ended: Callable[[], bool]
) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(run_agent(config, stop, channel=channel))
    try:
        await wait_for(job_ended, "the job to end", WAIT + 30)
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT)


class LosesFirstSignal(HttpAgentChannel):
    """The first reply with a signal in it is lost on its way back (the server sent it)."""

    lost = 0

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        reply = await super().sync(node, request)
        if not self.lost and any(isinstance(i, Signal) for i in reply.instructions):
            self.lost += 1
            raise ChannelUnavailable("reply lost on its way")
        return reply


def test_a_signal_in_a_lost_reply_comes_again(
    agent_config: AgentConfig, live: LiveServer, workdir: Path
) -> None:
    config = config_for(agent_config, live)
    channel = LosesFirstSignal(live.url, live.agent_token)
    with live.client() as admin:
        submit = JobSubmit(script=TRAPS_USR1, nodelist=[config.node], workdir=str(workdir))
        job = admin.submit(submit).job_id
        signalled: list[int] = []

        def ended() -> bool:
            if (workdir / "ready").exists() and not signalled:
                signalled.extend(admin.cancel(job, signal=10))
            return admin.job(job).state not in ("PENDING", "RUNNING", "COMPLETING")

        asyncio.run(run_with(config, channel, ended))
        assert (channel.lost, signalled) == (1, [job])
        assert (workdir / "got-usr1").read_text() == "got\n"
        assert admin.job(job).state == "FAILED"  # the trap's exit 3


class HoldsLaunchReply(HttpAgentChannel):
    """The long poll's reply with the launch of job ``job_id`` is held back until a flush
    (a second sync, which a finished job's report starts) has overtaken it."""

    def __init__(self, server_url: str, token: str) -> None:
        super().__init__(server_url, token)
        self.job_id = 0
        self.held = False
        self.flushed = asyncio.Event()

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        reply = await super().sync(node, request)
        if request.wait_seconds == 0:
            self.flushed.set()
        elif not self.held and any(
            isinstance(i, Launch) and i.job_id == self.job_id for i in reply.instructions
        ):
            self.held = True
            self.flushed.clear()
            await asyncio.wait_for(self.flushed.wait(), WAIT)
        return reply


def test_a_signal_that_overtakes_its_launch_reaches_the_job(
    agent_config: AgentConfig, live: LiveServer, workdir: Path
) -> None:
    config = config_for(agent_config, live)
    channel = HoldsLaunchReply(live.url, live.agent_token)
    go = workdir / "go"
    # a job that ends when told, on the same node: its report makes the agent flush
    waits = f"#!/bin/sh\ntouch first-ready\nwhile [ ! -e {go} ]; do sleep 0.05; done\n"
    with live.client() as admin:

        def at(job: int) -> str:
            return admin.job(job).state

        def submit(script: str) -> int:
            spec = JobSubmit(script=script, nodelist=[config.node], workdir=str(workdir))
            return admin.submit(spec).job_id

        def step() -> bool:
            """Moves the scenario on as the waiting loop polls; true once the second
            job has ended."""
            if not channel.job_id:
                if (workdir / "first-ready").exists():
                    channel.job_id = submit(TRAPS_USR1)
            elif channel.held and not go.exists():
                admin.cancel(channel.job_id, signal=10)
                go.touch()  # the first job ends: its report goes in a flush, before the launch
            elif go.exists():
                return at(channel.job_id) not in ("PENDING", "RUNNING", "COMPLETING")
            return False

        first = submit(waits)
        asyncio.run(run_with(config, channel, step))
        assert at(first) == "COMPLETED"
        # the signal reached it: without, it would have run its 30 s and COMPLETED
        assert at(channel.job_id) in ("FAILED", "CANCELLED")
