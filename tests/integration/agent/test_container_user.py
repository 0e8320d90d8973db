"""A root agent runs a container job as the job's user (hal.agent.containers): podman
runs as root and starts the script as that user, whose files it writes in the mounted
working directory, and whose output file the supervisor opened as that user; the job's
memory limit is seen inside. An OCI bundle (no server needed) on real podman."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from conftest import FakeChannel, agent_running, as_nobody, make_launch
from hal.agent import AgentConfig
from hal.testing.images import make_bundle
from hal.wire.agent import ContainerPin

SCRIPT = """id -u; id -g
cat /etc/hal-test-image
cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes
echo made > made.txt
"""


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root agent")
def test_the_container_runs_as_the_jobs_user(
    agent_config: AgentConfig, channel: FakeChannel
) -> None:
    nobody, base = as_nobody("hal-container-uid-")
    try:
        bundle = make_bundle(base / "bundle", marker="user-test")
        work = base / "work"
        config = dataclasses.replace(agent_config, state_dir=base / "state")

        async def scenario() -> None:
            async with agent_running(config, channel) as agent:
                launch = make_launch(
                    1,
                    SCRIPT,
                    work,
                    uid=nobody.pw_uid,
                    gid=nobody.pw_gid,
                    memory_bytes=64 << 20,
                    container=ContainerPin(bundle=str(bundle)),
                )
                channel.push(launch)
                report = await agent.finished(1)
                out = work / "slurm-1.out"
                assert report.state == "COMPLETED", out.read_text() if out.exists() else report
                lines = out.read_text().split()
                assert lines[:3] == [str(nobody.pw_uid), str(nobody.pw_gid), "user-test"]
                assert int(lines[3]) == 64 << 20
                assert out.stat().st_uid == nobody.pw_uid  # opened as the user
                assert (work / "made.txt").stat().st_uid == nobody.pw_uid  # written inside

        asyncio.run(scenario())
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_node_without_podman_fails_the_job_before_it_starts_saying_what_to_install(
    agent_config: AgentConfig,
    channel: FakeChannel,
    workdir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # no podman on the PATH
    bundle = make_bundle(tmp_path / "bundle")

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            launch = make_launch(
                1, "echo ran\n", workdir, container=ContainerPin(bundle=str(bundle))
            )
            channel.push(launch)
            report = await agent.finished(1)
            assert report.kind == "launch_failed", report  # (the server fails the job)
            assert "container: this node has no podman: install podman and runc" in report.message
            out = (workdir / "slurm-1.out").read_text()
            assert "ran" not in out and "hal: container: this node has no podman" in out

    asyncio.run(scenario())
