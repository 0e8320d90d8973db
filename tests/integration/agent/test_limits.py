"""Time limits, --signal, cancel, signals and memory limits with real processes.

The fake server's KillWait is 1 s; limits are 1-3 s. Assertions are about states and
signals, never about how long something took.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from pathlib import Path

import pytest

from conftest import PYTHON, FakeChannel, agent_running, make_launch, wait_for
from hal.agent import AgentConfig
from hal.agent.isolation import agent_cgroup_name, detect_isolation
from hal.core.errors import InvalidRequest
from hal.wire.agent import Cancel, Signal


def told(output: Path) -> str:
    """slurmstepd's line in a job's output ("" while there is none)."""
    text = output.read_text() if output.exists() else ""
    return next((line for line in text.splitlines() if line.startswith("slurmstepd-")), "")


TRAPS_TERM = "trap 'echo got TERM' TERM\nwhile :; do sleep 0.1; done\n"
HOG = f"{PYTHON} -c \"b = b'x' * 200_000_000; import time; time.sleep(60)\"\n"


def test_time_limit_sends_sigterm(agent_config: AgentConfig, channel: FakeChannel, workdir: Path):
    """`sleep` past a 1 s limit: TIMEOUT with ExitCode 0:15, like `sbatch -t` in Slurm."""

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "sleep 60\n", workdir, time_limit_seconds=1))
            report = await agent.finished(1)
            assert (report.state, report.exit_code, report.exit_signal) == ("TIMEOUT", 0, 15)
            # slurmstepd's line, as Slurm 22.05.8 writes it (docs/slurm-checks.md)
            node = agent_config.node
            line = await wait_for(lambda: told(workdir / "slurm-1.out"), "the time-limit line")
            assert re.fullmatch(
                rf"slurmstepd-{node}: error: \*\*\* JOB 1 ON {node} CANCELLED AT "
                r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d DUE TO TIME LIMIT \*\*\*",
                line,
            ), line

    asyncio.run(scenario())


def test_sigterm_trap_gets_sigkill_after_kill_wait(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, TRAPS_TERM, workdir, time_limit_seconds=1))
            report = await agent.finished(1)
            assert (report.state, report.exit_signal) == ("TIMEOUT", 9)
            assert "got TERM" in (workdir / "slurm-1.out").read_text()

    asyncio.run(scenario())


def test_cancel_ends_the_job_with_the_requested_state(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "sleep 60\n", workdir), make_launch(2, TRAPS_TERM, workdir))
            await agent.started(1)
            await agent.started(2)
            channel.push(
                Cancel(job_id=1, kill_wait_seconds=5),
                Cancel(job_id=2, state="PREEMPTED", kill_wait_seconds=1),
            )
            first = await agent.finished(1)
            assert (first.state, first.exit_signal) == ("CANCELLED", 15)
            second = await agent.finished(2)
            assert (second.state, second.exit_signal) == ("PREEMPTED", 9)
            line = await wait_for(lambda: told(workdir / "slurm-1.out"), "the cancel line")
            assert line.startswith(f"slurmstepd-{agent_config.node}: error: *** JOB 1 ON ")
            assert line.endswith("***") and "DUE TO" not in line
            assert told(workdir / "slurm-2.out") == ""  # preempted: not checked, none

    asyncio.run(scenario())


def test_batch_signal_arrives_before_the_time_limit(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """`--signal=B:USR1@2` with a 3 s limit: the script's trap runs well before TIMEOUT,
    which is how Nextflow (B:USR2@30) saves its state."""
    script = "trap 'echo usr1 > got_usr1; exit 0' USR1\nwhile :; do sleep 0.1; done\n"

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, script, workdir, time_limit_seconds=3, signal="B:USR1@2"))
            report = await agent.finished(1)
            assert (report.state, report.exit_code) == ("COMPLETED", 0)
            assert (workdir / "got_usr1").read_text() == "usr1\n"

    asyncio.run(scenario())


def test_signal_instruction_reaches_the_job(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """`scancel -s USR2`: delivered; a job that dies of `scancel -f -s TERM` FAILED, as
    Slurm 22.05.8's did of `scancel -f -s USR1` (only `-s KILL` reads CANCELLED)."""
    script = (
        "trap 'echo usr2 > got_usr2' USR2\ntouch ready\n"
        "while [ ! -f got_usr2 ]; do sleep 0.1; done\nsleep 60\n"
    )

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, script, workdir))
            await agent.started(1)
            # A USR2 before the trap is set would end the shell (its default action).
            await wait_for((workdir / "ready").exists, "the trap to be set")
            channel.push(Signal(job_id=1, signal=12, batch_only=True))
            await wait_for((workdir / "got_usr2").exists, "USR2 to arrive")
            channel.push(Signal(job_id=1, signal=15))
            report = await agent.finished(1)
            assert (report.state, report.exit_signal) == ("FAILED", 15)

    asyncio.run(scenario())


SETSID_CHILD = (
    'setsid sh -c \'trap "echo term > child_term; exit 0" TERM; echo $$ > child.pid; '
    "while :; do sleep 0.1; done' &\n"
    "while [ ! -s child.pid ]; do sleep 0.05; done\n"
)


def test_cancel_sends_sigterm_to_processes_that_left_the_group(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """Slurm signals every process of the job at a cancel or time limit. A process the
    job started with `setsid` got no SIGTERM, only the SIGKILL at the end: no chance to
    save its work in the KillWait grace."""
    script = SETSID_CHILD + (
        "trap 'while [ ! -f child_term ]; do sleep 0.05; done; exit 0' TERM\n"
        "touch ready\n"
        "while :; do sleep 0.1; done\n"
    )

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, script, workdir))
            await agent.started(1)
            await wait_for((workdir / "ready").exists, "the traps to be set")
            channel.push(Cancel(job_id=1, kill_wait_seconds=10))
            report = await agent.finished(1)
            assert (report.state, report.exit_code, report.exit_signal) == ("CANCELLED", 0, 0)
            assert (workdir / "child_term").read_text() == "term\n"

    asyncio.run(scenario())


def test_suspend_stops_processes_that_left_the_group(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """`scontrol suspend` (SIGSTOP to the job): a `setsid` child ran on while the job was
    suspended, on CPUs the scheduler had given to another job."""

    def state(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, SETSID_CHILD + "touch ready\nsleep 60\n", workdir))
            await agent.started(1)
            await wait_for((workdir / "ready").exists, "the setsid child to start")
            child = int((workdir / "child.pid").read_text())
            channel.push(Signal(job_id=1, signal=19))  # SIGSTOP
            await wait_for(lambda: state(child) == "T", "the setsid child to stop", 5)
            channel.push(Signal(job_id=1, signal=18))  # SIGCONT
            await wait_for(lambda: state(child) != "T", "the setsid child to continue", 5)
            channel.push(Cancel(job_id=1, kill_wait_seconds=1))
            await agent.finished(1)

    asyncio.run(scenario())


def _memory_test(config: AgentConfig, channel: FakeChannel, workdir: Path) -> None:
    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, HOG, workdir, memory_bytes=50 << 20))
            report = await agent.finished(1)
            assert report.state == "OUT_OF_MEMORY", report

    asyncio.run(scenario())


def test_memory_hog_is_out_of_memory_with_the_best_backend(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """200 MB touched under a 50 MiB limit: OUT_OF_MEMORY with whatever `auto` picks
    (cgroup v1 on the development host)."""
    _memory_test(agent_config, channel, workdir)


@pytest.mark.parametrize("kind", ["cgroup1", "cgroup2"])
def test_memory_hog_under_each_cgroup_version(
    kind: str, agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    try:
        detect_isolation(kind, agent_cgroup_name(agent_config.node, str(agent_config.state_dir)))
    except InvalidRequest as err:
        pytest.skip(f"{kind} memory controller not writable on this host: {err}")
    _memory_test(dataclasses.replace(agent_config, isolation=kind), channel, workdir)


def test_memory_hog_under_the_rlimit_backend(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    _memory_test(dataclasses.replace(agent_config, isolation="rlimit"), channel, workdir)


def test_rlimit_watchdog_counts_processes_that_left_the_job_tree(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """A double-forked hog is no longer below the batch shell: the watchdog, which
    sampled the shell's tree only, let it use 200 MB under a 50 MiB limit until the
    script ended, and the job COMPLETED."""
    config = dataclasses.replace(agent_config, isolation="rlimit")

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            script = f"( {HOG.strip()} & )\nsleep 15\n"
            channel.push(make_launch(1, script, workdir, memory_bytes=50 << 20))
            report = await agent.finished(1)
            assert report.state == "OUT_OF_MEMORY", report

    asyncio.run(scenario())


def test_the_rlimit_watchdog_watches_a_job_being_ended_too(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """Cancelled, the job's batch shell ends at once and what it started has KillWait to
    end on the SIGTERM; a program that grows past the job's memory meanwhile is killed
    then, without a cgroup to stop it, as it would have been while the job ran (not at
    the end of KillWait)."""
    config = dataclasses.replace(agent_config, isolation="rlimit")
    grows = (
        f'{PYTHON} -c "import signal, time; '
        "signal.signal(signal.SIGTERM, lambda *_: (bytearray(200_000_000), time.sleep(60))); "
        "open('ready', 'w').close(); time.sleep(60)\"\n"
    )

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, grows, workdir, memory_bytes=50 << 20))
            await agent.started(1)
            await wait_for((workdir / "ready").exists, "the program to start")
            began = time.monotonic()
            channel.push(Cancel(job_id=1, kill_wait_seconds=30))
            report = await agent.finished(1)
            assert report.state == "CANCELLED", report
            assert time.monotonic() - began < 15, "killed at KillWait's end, not for memory"

    asyncio.run(scenario())


def test_small_job_within_its_memory_limit_completes(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(
            dataclasses.replace(agent_config, isolation="rlimit"), channel
        ) as agent:
            channel.push(make_launch(1, "echo fine\n", workdir, memory_bytes=50 << 20))
            report = await agent.finished(1)
            assert report.state == "COMPLETED", report

    asyncio.run(scenario())
