"""Jobs outlive their agent: a new agent re-adopts them and reports their real end once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from conftest import FakeChannel, agent_running, make_launch, wait_for
from hal.agent import AgentConfig
from hal.agent.records import JobRecord
from hal.agent.store import JobStore, StateDirLocked


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_running_job_is_readopted_not_relaunched(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """The agent crashes while `sleep 3` runs; the next agent finds the same process,
    lists it at registration, and reports its exit status (5) exactly once."""
    script = "echo run >> runs.txt\nsleep 3\nexit 5\n"

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as first:
            channel.push(make_launch(1, script, workdir))
            pid = (await first.started(1)).pid
            await wait_for(lambda: channel.acked_seq >= channel.of(1, "started")[0].seq, "ack")
        assert alive(pid), "stopping the agent must not stop its jobs"
        assert not channel.finished(1)

        async with agent_running(agent_config, channel) as second:
            assert [(r.job_id, r.pid) for r in channel.registrations[-1].running] == [(1, pid)]
            report = await second.finished(1)
            assert (report.state, report.exit_code, report.exit_signal) == ("FAILED", 5, 0)
            assert report.pid == pid
            await wait_for(lambda: channel.acked_seq >= report.seq, "the final ack")
            await asyncio.sleep(0.3)  # room for a wrong duplicate to show up
        # one report of each kind; a resend (same seq, before its ack) is not a second one
        assert len({r.seq for r in channel.of(1, "finished")}) == 1
        assert len({r.seq for r in channel.of(1, "started")}) == 1
        assert (workdir / "runs.txt").read_text() == "run\n"
        assert not list((agent_config.state_dir / "jobs").iterdir()), "acked jobs are forgotten"

    asyncio.run(scenario())


def test_job_that_ends_while_no_agent_runs(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as first:
            channel.push(make_launch(1, "sleep 0.5\nexit 4\n", workdir))
            await first.started(1)
        status = agent_config.state_dir / "jobs" / "1.0" / "status.json"
        await wait_for(status.exists, "the supervisor to record the exit")
        ended = json.loads(status.read_text())["end_time"]
        await asyncio.sleep(1.0)  # the agent's downtime: not the job's
        async with agent_running(agent_config, channel) as second:
            report = await second.finished(1)
            assert (report.state, report.exit_code) == ("FAILED", 4)
            assert report.time == ended  # when it ended, not when the agent came back

    asyncio.run(scenario())


def test_time_limit_is_enforced_across_a_restart(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """The limit passes while no agent runs; the next one still ends the job as TIMEOUT
    (SIGTERM, trapped, then SIGKILL) rather than letting it run forever."""
    script = "trap 'echo got TERM' TERM\nwhile :; do sleep 0.1; done\n"

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as first:
            channel.push(make_launch(1, script, workdir, time_limit_seconds=1))
            await first.started(1)
        await asyncio.sleep(1.2)
        async with agent_running(agent_config, channel) as second:
            report = await second.finished(1)
            assert (report.state, report.exit_signal) == ("TIMEOUT", 9)

    asyncio.run(scenario())


def test_cancel_in_progress_survives_a_restart(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """SIGTERM was sent and trapped, then the agent restarted: the new agent still sends
    SIGKILL after the grace and reports CANCELLED, not FAILED."""
    script = "trap 'echo got TERM > term.txt' TERM\nwhile :; do sleep 0.1; done\n"

    async def scenario() -> None:
        from hal.wire.agent import Cancel

        async with agent_running(agent_config, channel) as first:
            channel.push(make_launch(1, script, workdir))
            await first.started(1)
            channel.push(Cancel(job_id=1, kill_wait_seconds=2))
            await wait_for((workdir / "term.txt").exists, "SIGTERM to be trapped")
        async with agent_running(agent_config, channel) as second:
            report = await second.finished(1)
            assert (report.state, report.exit_signal) == ("CANCELLED", 9)

    asyncio.run(scenario())


def test_a_supervisor_killed_while_no_agent_runs_leaves_nothing(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """The supervisor is SIGKILLed while the agent is down: the next agent finds no status,
    kills the job's processes, including a setsid daemon outside the job's process group
    and session, and reports NODE_FAIL."""
    script = (
        "( setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' & )\n"
        "while [ ! -s daemon.pid ]; do sleep 0.05; done\n"
        "touch ready\nsleep 300\n"
    )

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as first:
            channel.push(make_launch(1, script, workdir))
            shell = (await first.started(1)).pid
            await wait_for((workdir / "ready").exists, "the daemon to start")
        daemon = int((workdir / "daemon.pid").read_text())
        supervisor = agent_config.state_dir / "jobs" / "1.0" / "supervisor"
        supervisor_pid = int(supervisor.read_text().split()[0])
        os.kill(supervisor_pid, signal.SIGKILL)
        await wait_for(lambda: not alive(supervisor_pid), "the supervisor to die")
        try:
            async with agent_running(agent_config, channel) as second:
                report = await second.finished(1)
                assert report.state == "NODE_FAIL", report
                await wait_for(lambda: not alive(daemon), "the daemon to be killed", 5)
                await wait_for(lambda: not alive(shell), "the batch shell to be killed", 5)
        finally:
            for pid in (shell, daemon):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)

    asyncio.run(scenario())


def test_server_may_drop_adopted_jobs_at_registration(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as first:
            channel.push(make_launch(1, "sleep 60\n", workdir))
            await first.started(1)
        channel.kill = [1]
        async with agent_running(agent_config, channel) as second:
            report = await second.finished(1)
            assert (report.state, report.exit_signal) == ("CANCELLED", 15)

    asyncio.run(scenario())


def test_launch_recorded_without_a_supervisor_never_ran(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """An agent that crashed between writing the job's folder and recording its
    supervisor launched nothing (the supervisor waits for that record): the next agent
    reports launch_failed, and the server may requeue the job."""
    store = JobStore(agent_config.state_dir)
    store.open()
    store.create(JobRecord(job_id=3, attempt=0, launch_time=1.0), "touch ran\n", None)
    store.close()

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            report = await agent.finished(3)
            assert report.kind == "launch_failed"
            assert not channel.registrations[0].running
        assert not (workdir / "ran").exists()

    asyncio.run(scenario())


def test_a_second_agent_on_the_same_state_dir_is_refused(
    agent_config: AgentConfig, channel: FakeChannel
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel):
            with pytest.raises(StateDirLocked):
                async with agent_running(agent_config, FakeChannel()):
                    pass

    asyncio.run(scenario())


def test_stopped_agent_leaves_no_descriptor_behind(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    before = len(os.listdir("/proc/self/fd"))

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(
                make_launch(1, "sleep 0.2\n", workdir), make_launch(2, "sleep 30\n", workdir)
            )
            await agent.finished(1)
            await agent.started(2)

    asyncio.run(scenario())
    assert len(os.listdir("/proc/self/fd")) <= before


def launcher_pids() -> list[int]:
    """Our children that run the step launcher."""
    pids = []
    for task in Path("/proc/self/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"hal.agent.forkserver" in cmdline:
                pids.append(int(child))
    return pids


def test_a_killed_step_launcher_is_replaced(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """Someone kills the launcher: running jobs are unaffected and later launches work."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "sleep 1\nexit 6\n", workdir))
            await agent.started(1)
            (launcher,) = launcher_pids()
            os.kill(launcher, 9)
            await asyncio.sleep(1.1)  # the launcher is restarted at most once a second
            channel.push(make_launch(2, "exit 7\n", workdir))
            assert (await agent.finished(2)).exit_code == 7
            assert (await agent.finished(1)).exit_code == 6
            assert launcher_pids() and launcher_pids() != [launcher]
        assert not launcher_pids(), "the launcher exits with its agent"

    asyncio.run(scenario())
