"""Real scripts, real exit statuses: what sacct's ExitCode=code:signal shows."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from pathlib import Path

import pytest

from conftest import PYTHON, FakeChannel, agent_running, make_launch, wait_for
from hal.agent import AgentConfig
from hal.agent.isolation import agent_cgroup_name, detect_isolation


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_exit_code_3_is_failed_3_0(agent_config: AgentConfig, channel: FakeChannel, workdir: Path):
    """`exit 3` must show as FAILED with ExitCode=3:0, as Slurm does."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "#!/bin/sh\necho out; echo err >&2; exit 3\n", workdir))
            report = await agent.finished(1)
            assert (report.state, report.exit_code, report.exit_signal) == ("FAILED", 3, 0)
            started = await agent.started(1)
            assert started.pid == report.pid > 0
            # no --error: stderr shares the output file
            assert (workdir / "slurm-1.out").read_text() == "out\nerr\n"

    run(scenario())


def test_zero_exit_is_completed(agent_config: AgentConfig, channel: FakeChannel, workdir: Path):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "true\n", workdir))
            report = await agent.finished(1)
            assert (report.state, report.exit_code, report.exit_signal) == ("COMPLETED", 0, 0)
            assert report.cpu_seconds >= 0

    run(scenario())


def test_killed_by_its_own_signal_is_failed_0_9(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """A script that dies of SIGKILL nobody at HAL sent reports the signal, not 137."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "kill -9 $$\n", workdir))
            report = await agent.finished(1)
            assert (report.state, report.exit_code, report.exit_signal) == ("FAILED", 0, 9)

    run(scenario())


def test_shebang_is_honoured(agent_config: AgentConfig, channel: FakeChannel, workdir: Path):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            script = "#!/bin/bash -e\necho ${BASH_VERSION:+bash}\nfalse\necho not reached\n"
            channel.push(make_launch(1, script, workdir))
            report = await agent.finished(1)
            assert (report.state, report.exit_code) == ("FAILED", 1)
            assert (workdir / "slurm-1.out").read_text() == "bash\n"

    run(scenario())


def test_missing_workdir_runs_in_tmp_saying_so_unless_its_output_is_there(
    agent_config: AgentConfig, channel: FakeChannel, tmp_path: Path
):
    """As slurmstepd (Slurm 22.05.8): a job whose -D is missing runs in /tmp,
    with "couldn't chdir to `DIR': No such file or directory: going to /tmp instead" in
    its output (HAL failed it, and its output said nothing); one whose output file would
    be in that directory cannot start: the server hears launch_failed and why."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            out = tmp_path / "out.txt"
            channel.push(make_launch(1, "pwd\n", tmp_path / "nowhere", stdout=str(out)))
            report = await agent.finished(1)
            assert (report.state, report.exit_code) == ("COMPLETED", 0)
            missing = tmp_path / "nowhere"
            assert out.read_text() == (
                f"slurmstepd-{agent_config.node}: error: couldn't chdir to `{missing}': "
                "No such file or directory: going to /tmp instead\n/tmp\n"
            )
            channel.push(make_launch(2, "true\n", tmp_path / "nowhere"))
            report = await agent.finished(2)
            assert report.kind == "launch_failed"
            assert "output file" in report.message and "nowhere" in report.message
            assert not channel.of(2, "started")

    run(scenario())


def test_missing_interpreter_is_a_launch_failure(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "#!/no/such/shell\ntrue\n", workdir))
            report = await agent.finished(1)
            assert report.kind == "launch_failed"
            assert "/no/such/shell" in report.message

    run(scenario())


def test_unopenable_output_is_a_launch_failure(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "true\n", workdir, stdout="missing-dir/out-%j.txt"))
            report = await agent.finished(1)
            assert report.kind == "launch_failed"
            assert "missing-dir/out-1.txt" in report.message

    run(scenario())


def test_background_leftovers_are_killed_with_the_script(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """Like Slurm, a job's processes end with its batch script."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "sleep 300 &\necho $! > bg.pid\n", workdir))
            await agent.finished(1)
            pid = int((workdir / "bg.pid").read_text())

            def gone() -> bool:
                try:
                    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except OSError:
                    return True
                return state == "Z"

            await wait_for(gone, "the background sleep to be killed")

    run(scenario())


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("isolation", ["auto", "rlimit", "none"])
def test_leftovers_that_left_the_process_group_are_killed_too(
    isolation: str, agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """A daemon the job started with `setsid` (or a double fork) ends with the job under
    every backend, not only where a cgroup finds it: without cgroups (a non-root agent,
    a container) it used to run on forever, reparented to init."""
    script = "setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' &\n"
    script += "while [ ! -s daemon.pid ]; do sleep 0.05; done\n"
    config = dataclasses.replace(agent_config, isolation=isolation)

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, script, workdir))
            assert (await agent.finished(1)).state == "COMPLETED"
            pid = int((workdir / "daemon.pid").read_text())
            try:
                await wait_for(lambda: not _running(pid), "the setsid daemon to be killed", 5)
            finally:
                if _running(pid):
                    os.kill(pid, signal.SIGKILL)

    run(scenario())


# The job double-forks a sleeper into a session of its own (out of its process group and
# its supervisor's session), then waits; "ready" says the sleeper's pid is written.
DAEMON_SCRIPT = (
    "( setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' & )\n"
    "while [ ! -s daemon.pid ]; do sleep 0.05; done\n"
    "echo $$ > ready\n"
    "sleep 300\n"
)


def kill_supervisor(state_dir: Path, job_id: int) -> None:
    pid = int((state_dir / "jobs" / f"{job_id}.0" / "supervisor").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_killed_supervisor_leaves_no_process_of_its_job(
    isolation: str, agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """An operator (or the kernel's OOM killer) SIGKILLs a job's step supervisor: the
    agent kills the job's processes, the batch shell and a double-forked setsid daemon
    alike, removes its cgroup, and reports NODE_FAIL, as slurmctld ends a batch job whose
    slurmstepd is gone. They used to run on, reparented to init, outside any job."""
    config = dataclasses.replace(agent_config, isolation=isolation)

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, DAEMON_SCRIPT, workdir))
            await wait_for((workdir / "ready").exists, "the daemon to start")
            shell = int((workdir / "ready").read_text())
            daemon = int((workdir / "daemon.pid").read_text())
            kill_supervisor(config.state_dir, 1)
            try:
                report = await agent.finished(1)
                assert report.state == "NODE_FAIL", report
                assert "supervisor" in report.message
                await wait_for(lambda: not _running(daemon), "the daemon to be killed", 5)
                await wait_for(lambda: not _running(shell), "the batch shell to be killed", 5)
            finally:
                for pid in (shell, daemon):
                    if _running(pid):
                        os.kill(pid, signal.SIGKILL)
            name = agent_cgroup_name(config.node, str(config.state_dir))
            base = detect_isolation(config.isolation, name).base
            assert isolation == "none" or base, "this host offers a cgroup: test it"
            if base:
                assert not os.path.exists(os.path.join(base, "job_1.0")), "cgroup left"

    run(scenario())


def test_cpu_time_of_orphaned_processes_is_counted(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """A double-forked worker's CPU time belongs to the job: init used to reap it, so
    the job reported the batch shell's few milliseconds instead of the worker's second."""
    burn = (
        f"{PYTHON} -c 'import time; t = time.process_time()\n"
        "while time.process_time() - t < 1: pass\n"
        'open("burnt", "w").close()\''
    )
    script = f"( {burn} & )\nwhile [ ! -f burnt ]; do sleep 0.05; done\nsleep 0.2\n"

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, script, workdir))
            report = await agent.finished(1)
            assert report.state == "COMPLETED"
            assert report.cpu_seconds >= 0.9, report

    run(scenario())


def test_many_jobs_each_reported_once(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(*(make_launch(j, f"exit {j % 4}\n", workdir) for j in range(1, 41)))
            for j in range(1, 41):
                report = await agent.finished(j)
                assert report.exit_code == j % 4
            for j in range(1, 41):
                assert len({r.seq for r in channel.of(j, "finished")}) == 1

    run(scenario())
