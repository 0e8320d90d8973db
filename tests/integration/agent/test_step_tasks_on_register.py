"""A real agent's step tasks across a registration (ADR 0012): it tells the server which
steps still run on the node, and ends those the server no longer knows (a restarted
server: nothing would end them with their job)."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from pathlib import Path

from conftest import FakeChannel, agent_running, make_launch, wait_for
from hal.agent import AgentConfig
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentRegistered,
    AgentSync,
    RunningStep,
    StepEnd,
    StepLaunch,
)


@dataclass
class StepsChannel(FakeChannel):
    kill_steps: list[RunningStep] = field(default_factory=list)
    printed: bytearray = field(default_factory=bytearray)
    ends: list[StepEnd] = field(default_factory=list)

    async def register(self, request: AgentRegister) -> AgentRegistered:
        reply = await super().register(request)
        reply.kill_steps = list(self.kill_steps)
        return reply

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        for chunk in request.step_output:
            self.printed += base64.b64decode(chunk.data_b64)
        self.ends.extend(request.step_ends)
        return await super().sync(node, request)


def test_a_step_the_server_no_longer_knows_is_ended_at_registration(
    agent_config: AgentConfig, workdir: Path
) -> None:
    channel = StepsChannel()
    step = StepLaunch(
        job_id=12,
        step_id=0,
        launch=make_launch(12, "", workdir),
        argv=["sh", "-c", "echo up; exec sleep 600"],
        ranks=[0],
        step_node_index=0,
    )

    async def scenario() -> None:
        async with agent_running(agent_config, channel):
            channel.push(step)  # type: ignore[arg-type]
            await wait_for(lambda: b"up" in channel.printed, "the step's task to start")
            channel.kill_steps = [RunningStep(job_id=12, step_id=0, attempt=0)]
            channel.forget_node = True  # the server restarted: it registers again
            await wait_for(lambda: len(channel.registrations) >= 2, "a second registration")
            assert channel.registrations[1].steps == [RunningStep(job_id=12, step_id=0, attempt=0)]
            ended = await wait_for(lambda: channel.ends, "the step's end")
            assert [(e.job_id, e.step_id, e.exit_code) for e in ended] == [(12, 0, 143)]

    asyncio.run(scenario())
