"""A job step's tasks outlive their agent, as batch jobs do (ADR 0012): an agent upgrade
or restart (SIGTERM, then a new agent on the same state directory) must not end an MPI
job's ``srun`` tasks. The new agent adopts them from its state directory, lists them when
it registers, relays what they write next, delivers signals to them, and reports their
end with the tasks' own exit code — as slurmstepd keeps steps across slurmd restarts."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
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
    StepSignal,
)


@dataclass
class StepServer(FakeChannel):
    """Takes each byte of step output once by its offset, as the real server does."""

    kill_steps: list[RunningStep] = field(default_factory=list)
    streams: dict[tuple[int, int, int, str], bytearray] = field(default_factory=dict)
    ends: list[StepEnd] = field(default_factory=list)

    async def register(self, request: AgentRegister) -> AgentRegistered:
        reply = await super().register(request)
        reply.kill_steps, self.kill_steps = self.kill_steps, []
        return reply

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        for chunk in request.step_output:
            key = (chunk.job_id, chunk.step_id, chunk.rank, chunk.stream)
            have = self.streams.setdefault(key, bytearray())
            data = base64.b64decode(chunk.data_b64)
            if chunk.offset <= len(have) < chunk.offset + len(data):
                have += data[len(have) - chunk.offset :]
        self.ends.extend(request.step_ends)
        return await super().sync(node, request)

    def text(self, rank: int, stream: str = "stdout") -> str:
        return self.streams.get((12, 0, rank, stream), bytearray()).decode()


def a_step(workdir: Path, script: str) -> StepLaunch:
    return StepLaunch(
        job_id=12,
        step_id=0,
        launch=make_launch(12, "", workdir, nodes=["node1", "node2"], node_index=1),
        argv=["sh", "-c", script],
        ranks=[1, 2],
        step_node_index=1,
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_step_tasks_outlive_their_agent_and_the_next_one_reports_their_end(
    agent_config: AgentConfig, workdir: Path
) -> None:
    server = StepServer()
    script = (
        "echo $$ > pid.$SLURM_PROCID; echo before $SLURM_PROCID; "
        "while [ ! -e go ]; do sleep 0.05; done; "
        "echo after $SLURM_PROCID; echo oops >&2; exit $((SLURM_PROCID + 5))"
    )

    async def scenario() -> None:
        async with agent_running(agent_config, server):
            server.push(a_step(workdir, script))  # type: ignore[arg-type]
            await wait_for(
                lambda: "before 2" in server.text(2) and "before 1" in server.text(1),
                "both tasks to start",
            )
        # the agent stopped (SIGTERM's path): its tasks run on
        pids = [int((workdir / f"pid.{rank}").read_text()) for rank in (1, 2)]
        assert all(alive(pid) for pid in pids)
        await asyncio.sleep(0.3)
        assert all(alive(pid) for pid in pids) and not server.ends
        async with agent_running(agent_config, server):
            assert server.registrations[-1].steps == [RunningStep(job_id=12, step_id=0, attempt=0)]
            (workdir / "go").touch()
            ends = await wait_for(lambda: server.ends, "the step's end")
            # (two syncs in flight may both carry it: the server takes it once)
            assert {(e.job_id, e.step_id, e.exit_code, e.exit_signal) for e in ends} == {
                (12, 0, 7, 0)
            }
            # what they wrote before and after the restart, each byte once
            assert server.text(1) == "before 1\nafter 1\n"
            assert server.text(2) == "before 2\nafter 2\n"
            assert server.text(2, "stderr") == "oops\n"
            steps = agent_config.state_dir / "steps"
            await wait_for(lambda: not any(steps.iterdir()), "the step's folder to go")

    asyncio.run(scenario())


def test_an_adopted_step_gets_its_signals_and_the_server_may_end_it(
    agent_config: AgentConfig, workdir: Path
) -> None:
    """A suspended job's step stops and resumes, then the job ends while the agent is
    away: the server answers the registration with the step (``kill_steps``), and the
    adopted tasks are ended, SIGTERM first (143)."""
    server = StepServer()
    script = "echo $$ > pid.$SLURM_PROCID; exec sleep 600"

    async def scenario() -> None:
        async with agent_running(agent_config, server):
            server.push(a_step(workdir, script))  # type: ignore[arg-type]
            await wait_for((workdir / "pid.2").exists, "the tasks to start")
        pid = int((workdir / "pid.2").read_text())
        async with agent_running(agent_config, server) as agent:
            server.push(StepSignal(job_id=12, step_id=0, signal=signal.SIGSTOP))  # type: ignore[arg-type]
            await wait_for(lambda: _state(pid) == "T", "the adopted task to stop")
            server.push(StepSignal(job_id=12, step_id=0, signal=signal.SIGCONT))  # type: ignore[arg-type]
            await wait_for(lambda: _state(pid) == "S", "the adopted task to go on")
            del agent
        assert alive(pid)
        server.kill_steps = [RunningStep(job_id=12, step_id=0)]
        async with agent_running(agent_config, server):
            ends = await wait_for(lambda: server.ends, "the step's end")
            assert {(e.exit_code, e.exit_signal) for e in ends} == {(143, 15)}
            assert not alive(pid)

    asyncio.run(scenario())


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_the_step_folder_is_private(agent_config: AgentConfig, workdir: Path) -> None:
    """The tasks' output waits in the agent's state directory: root's alone (0700)."""
    server = StepServer()

    async def scenario() -> None:
        async with agent_running(agent_config, server):
            server.push(a_step(workdir, "exec sleep 600"))  # type: ignore[arg-type]
            folder = agent_config.state_dir / "steps" / "12.0.0"  # job, run, step
            await wait_for((folder / "tasks").exists, "the tasks to start")
            assert os.stat(folder).st_mode & 0o777 == 0o700
            server.push(StepSignal(job_id=12, step_id=0, signal=signal.SIGKILL))  # type: ignore[arg-type]
            ends = await wait_for(lambda: server.ends, "the step's end")
            assert {(e.exit_code, e.exit_signal) for e in ends} == {(137, 9)}

    asyncio.run(scenario())
