"""A fake control plane at the ``AgentChannel`` seam, and helpers to run a real agent.

The agent under test forks real supervisors and runs real scripts; only the server is
replaced, by ``FakeChannel``, which stores reports like the real one should (idempotent
by ``(job_id, kind, attempt)``), acknowledges them, and hands out queued instructions.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hal.agent import AgentConfig, run_agent
from hal.agent.channel import ChannelUnavailable
from hal.agent.isolation import agent_cgroup_name, detect_isolation
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentRegistered,
    AgentSync,
    Cancel,
    JobReport,
    JobTraffic,
    JobUsage,
    Launch,
    Signal,
)

WAIT = 30.0  # generous bound for anything a test waits for; never a timing assertion


@dataclass
class FakeChannel:
    kill_wait_seconds: int = 1
    heartbeat_seconds: float = 0.5
    down: bool = False  # True: every call fails as if the server were unreachable
    forget_node: bool = False  # True: the next sync answers reregister
    kill: list[int] = field(default_factory=list)
    registrations: list[AgentRegister] = field(default_factory=list)
    reports: list[JobReport] = field(default_factory=list)  # stored, deduplicated
    received: list[JobReport] = field(default_factory=list)  # everything sent, with repeats
    syncs: int = 0
    traffic: list[JobTraffic] = field(default_factory=list)  # every sync's, in order
    usage: list[JobUsage] = field(default_factory=list)  # every sync's samples, in order
    acked_seq: int = 0
    _queue: list[Launch | Signal | Cancel] = field(default_factory=list)

    def push(self, *instructions: Launch | Signal | Cancel) -> None:
        self._queue.extend(instructions)

    async def register(self, request: AgentRegister) -> AgentRegistered:
        if self.down:
            raise ChannelUnavailable("fake server is down")
        self.registrations.append(request)
        kill, self.kill = self.kill, []
        return AgentRegistered(
            node=request.node,
            heartbeat_interval_seconds=self.heartbeat_seconds,
            node_timeout_seconds=30,
            kill_wait_seconds=self.kill_wait_seconds,
            kill=kill,
            server_time=time.time(),
        )

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        if self.down:
            raise ChannelUnavailable("fake server is down")
        self.syncs += 1
        self.received.extend(request.reports)
        self.traffic.extend(request.traffic)
        self.usage.extend(request.usage)
        seen = {(r.job_id, r.kind, r.attempt) for r in self.reports}
        for report in request.reports:
            if (report.job_id, report.kind, report.attempt) not in seen:
                self.reports.append(report)
                seen.add((report.job_id, report.kind, report.attempt))
            self.acked_seq = max(self.acked_seq, report.seq)
        if self.forget_node:
            self.forget_node = False
            return AgentInstructions(acked_seq=0, server_time=time.time(), reregister=True)
        deadline = time.monotonic() + request.wait_seconds
        while not self._queue and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        instructions, self._queue = self._queue, []
        return AgentInstructions(
            acked_seq=self.acked_seq, instructions=instructions, server_time=time.time()
        )

    async def aclose(self) -> None:
        return None

    def finished(self, job_id: int) -> JobReport | None:
        return next((r for r in self.reports if r.job_id == job_id and r.kind != "started"), None)

    def of(self, job_id: int, kind: str) -> list[JobReport]:
        return [r for r in self.received if r.job_id == job_id and r.kind == kind]


async def wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class RunningAgent:
    def __init__(self, config: AgentConfig, channel: FakeChannel) -> None:
        self.config = config
        self.channel = channel
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def finished(self, job_id: int, timeout: float = WAIT) -> JobReport:
        report: JobReport = await wait_for(
            lambda: self.channel.finished(job_id), f"job {job_id} to finish", timeout
        )
        return report

    async def started(self, job_id: int) -> JobReport:
        reports: list[JobReport] = await wait_for(
            lambda: self.channel.of(job_id, "started"), f"job {job_id} to start"
        )
        return reports[0]


@asynccontextmanager
async def agent_running(config: AgentConfig, channel: FakeChannel) -> Any:
    """Run ``run_agent`` in a task; on exit set ``stop`` and wait for it (jobs live on)."""
    agent = RunningAgent(config, channel)
    agent.task = asyncio.create_task(run_agent(config, agent.stop, channel=channel))
    registered = len(channel.registrations)
    try:
        await wait_for(
            lambda: len(channel.registrations) > registered or agent.task.done(), "registration"
        )
        if agent.task.done():
            agent.task.result()
        yield agent
    finally:
        agent.stop.set()
        await asyncio.wait_for(agent.task, WAIT)


def as_nobody(prefix: str) -> tuple[pwd.struct_passwd, Path]:
    """``nobody`` (skipped where there is none), and a folder it may reach (pytest's is
    root's only) for the agent's state and the job's work, which the caller removes."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user on this host")
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o711)
    work = base / "work"
    work.mkdir()
    work.chmod(0o777)
    return nobody, base


def make_launch(job_id: int, script: str, workdir: Path, **changes: Any) -> Launch:
    fields: dict[str, Any] = {
        "job_id": job_id,
        "attempt": 0,
        "name": f"job{job_id}",
        "user": "tester",
        "script": script,
        "workdir": str(workdir),
        "environment": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        "stdout": "slurm-%j.out",
        "stderr": None,
        "time_limit_seconds": 0,
        "memory_bytes": 0,
        "cpus": 1,
        "nodes": ["node1"],
        "node_index": 0,
    }
    fields.update(changes)
    return Launch(**fields)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def kill_leftovers(config: AgentConfig) -> None:
    """End jobs a test left running (e.g. on purpose, to test restarts), then remove the
    node's cgroup folder once their supervisors have cleaned up."""
    for started in config.state_dir.glob("jobs/*/started"):
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(started.read_text().split()[0]), signal.SIGKILL)
    for tasks in config.state_dir.glob("steps/*/tasks"):  # step tasks outlive agents too
        for line in tasks.read_text().splitlines():
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(line.split()[1]), signal.SIGKILL)
    isolation = detect_isolation("auto", agent_cgroup_name(config.node, str(config.state_dir)))
    deadline = time.monotonic() + 5
    while isolation.base and os.path.isdir(isolation.base) and time.monotonic() < deadline:
        isolation.release()
        time.sleep(0.05)


@pytest.fixture
def agent_config(tmp_path: Path) -> Iterator[AgentConfig]:
    # A node name of its own per test, so that reports and files are easy to tell apart.
    config = AgentConfig(
        server_url="http://fake",
        token="t",
        node=f"node-{uuid.uuid4().hex[:8]}",
        cpus=2,
        memory_bytes=1 << 30,
        gpus=0,
        state_dir=tmp_path / "state",
        isolation="auto",
        heartbeat_interval_seconds=0.5,
        max_backoff_seconds=0.2,
        validate=True,
        unknown_users_as_agent=True,  # "tester" is no Unix user; as root it is refused
    )
    yield config
    kill_leftovers(config)


@pytest.fixture
def channel() -> FakeChannel:
    return FakeChannel()


PYTHON = sys.executable
