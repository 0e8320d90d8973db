"""The agent against an unreliable server: outages, restarts that forget the node."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import FakeChannel, agent_running, make_launch, wait_for
from hal.agent import AgentConfig
from hal.agent.channel import ChannelUnavailable
from hal.wire.agent import AgentInstructions, AgentSync


def test_reports_wait_out_an_outage(agent_config: AgentConfig, channel: FakeChannel, workdir: Path):
    """The server goes away while a job runs: the agent keeps going, retries with
    backoff, and delivers the job's end once the server is back."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "sleep 0.3\nexit 2\n", workdir))
            await agent.started(1)
            channel.down = True
            await asyncio.sleep(1.0)  # the job ends meanwhile; syncs fail
            assert agent.task is not None and not agent.task.done()
            assert channel.finished(1) is None
            channel.down = False
            report = await agent.finished(1)
            assert (report.state, report.exit_code) == ("FAILED", 2)

    asyncio.run(scenario())


def test_agent_starts_while_the_server_is_down(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    channel.down = True

    async def scenario() -> None:
        from hal.agent import run_agent

        stop = asyncio.Event()
        task = asyncio.create_task(run_agent(agent_config, stop, channel=channel))
        await asyncio.sleep(0.5)
        assert not task.done()
        channel.down = False
        await wait_for(lambda: channel.registrations, "registration after the outage")
        stop.set()
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())


def test_reregisters_when_the_server_forgot_the_node(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """A server restarted without its state answers reregister; the agent registers again
    listing the job it still runs, and the job's end still arrives."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            # long enough to be running still at the second registration on a loaded machine
            channel.push(make_launch(1, "sleep 3\n", workdir))
            pid = (await agent.started(1)).pid
            channel.forget_node = True
            await wait_for(lambda: len(channel.registrations) >= 2, "a second registration")
            assert [(r.job_id, r.pid) for r in channel.registrations[1].running] == [(1, pid)]
            report = await agent.finished(1)
            assert report.state == "COMPLETED"

    asyncio.run(scenario())


def test_unacknowledged_reports_are_resent(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """A sync that never reached the server: nothing acknowledged the reports it carried,
    so the agent sends them again, with the same seqs, and nothing is lost."""

    class LosesFirstReports(FakeChannel):
        lost: tuple[int, ...] = ()

        async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
            if request.reports and not self.lost:
                self.lost = tuple(r.seq for r in request.reports)
                raise ChannelUnavailable("connection reset")
            return await super().sync(node, request)

    lossy = LosesFirstReports()

    async def scenario() -> None:
        async with agent_running(agent_config, lossy) as agent:
            lossy.push(make_launch(1, "true\n", workdir))
            await agent.finished(1)
            assert lossy.lost
            stored = {r.seq for r in lossy.reports}
            assert set(lossy.lost) <= stored

    asyncio.run(scenario())
