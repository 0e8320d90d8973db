"""A job's end report says its CPU time's user and system parts (sacct's UserCPU and
SystemCPU of the batch step), as the supervisor's ``wait4`` measured them: of the batch
script and the children it waited for, and of the orphans the supervisor reaped."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import PYTHON, FakeChannel, agent_running, make_launch
from hal.agent import AgentConfig
from hal.wire.agent import JobReport

# about 0.5 s of user time (a loop that asks for its CPU time rarely: each ask is a
# system call), or of system time (the kernel filling a buffer from /dev/zero, again and
# again)
USER_BURN = (
    f"{PYTHON} -c 'import time; t = time.process_time()\n"
    "while time.process_time() - t < 0.5: sum(range(10000))'"
)
SYSTEM_BURN = (
    f"{PYTHON} -c 'import os, time; t = time.process_time()\n"
    'fd, buf = os.open("/dev/zero", os.O_RDONLY), bytearray(1 << 20)\n'
    "while time.process_time() - t < 0.5: os.readv(fd, [buf])\n"
    'open("burnt", "w").close()\''
)


def finished(config: AgentConfig, channel: FakeChannel, script: str, workdir: Path) -> JobReport:
    async def scenario() -> JobReport:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, script, workdir))
            report: JobReport = await agent.finished(1)
            return report

    report = asyncio.run(scenario())
    assert report.state == "COMPLETED", report
    assert report.user_cpu_seconds is not None and report.system_cpu_seconds is not None
    assert report.user_cpu_seconds + report.system_cpu_seconds == report.cpu_seconds, report
    return report


def test_a_script_burning_user_time_reports_user_time(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
) -> None:
    report = finished(agent_config, channel, USER_BURN + "\n", workdir)
    assert report.user_cpu_seconds is not None and report.system_cpu_seconds is not None
    assert report.user_cpu_seconds >= 0.4 > report.system_cpu_seconds, report


def test_an_orphan_burning_system_time_reports_system_time(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
) -> None:
    """Double-forked, so the supervisor (its subreaper) reaps it, not the script."""
    script = f"( {SYSTEM_BURN} & )\nwhile [ ! -f burnt ]; do sleep 0.05; done\nsleep 0.2\n"
    report = finished(agent_config, channel, script, workdir)
    assert report.user_cpu_seconds is not None and report.system_cpu_seconds is not None
    assert report.system_cpu_seconds >= 0.3 > report.user_cpu_seconds, report
