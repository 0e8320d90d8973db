"""A real agent's step tasks under the job's memory limit (ADR 0012): each step runs in
``job_<id>.<n>/step_<m>`` inside the job's cgroup, as Slurm's ``job_N/step_M``, so a
task that touches more than the job's memory on its node is killed and the node's part
ends as out of memory; without cgroups the rlimit backend's watchdog does the same.

On a host with a writable cgroup memory controller the agent's ``auto`` backend is
cgroup1 or cgroup2; elsewhere it is rlimit, and the cgroup tests are skipped."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import PYTHON, FakeChannel, agent_running, as_nobody, make_launch, wait_for
from hal.agent import AgentConfig
from hal.agent.isolation import Isolation, agent_cgroup_name, detect_isolation
from hal.wire.agent import AgentInstructions, AgentSync, Cancel, StepEnd, StepLaunch

MiB = 1 << 20
HOG = [PYTHON, "-c", "b = b'x' * 200_000_000; import time; time.sleep(60)"]


@dataclass
class StepsChannel(FakeChannel):
    printed: bytearray = field(default_factory=bytearray)
    ends: list[StepEnd] = field(default_factory=list)

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        for chunk in request.step_output:
            self.printed += base64.b64decode(chunk.data_b64)
        self.ends.extend(request.step_ends)
        return await super().sync(node, request)


def step(
    workdir: Path, argv: list[str], *, step_id: int, node_index: int, memory: int
) -> StepLaunch:
    launch = make_launch(
        1, "", workdir, memory_bytes=memory, nodes=["node1", "node2"], node_index=node_index
    )
    return StepLaunch(
        job_id=1, step_id=step_id, launch=launch, argv=argv, ranks=[0], step_node_index=0
    )


def isolation_of(config: AgentConfig) -> Isolation:
    return detect_isolation(config.isolation, agent_cgroup_name(config.node, str(config.state_dir)))


def cgroup_backend(config: AgentConfig) -> Isolation:
    isolation = isolation_of(config)
    if not isolation.base:
        pytest.skip(f"no writable cgroup memory controller here (auto is {isolation.kind})")
    return isolation


def test_a_step_on_the_batch_node_runs_in_the_jobs_cgroup_and_its_hog_is_out_of_memory(
    agent_config: AgentConfig, workdir: Path
) -> None:
    """The job has 50 MiB on the node; its batch script sleeps while step 0 prints its
    cgroup (inside the job's, not beside it) and step 1 touches 200 MB: step 1 ends out of
    memory (SIGKILL), the batch script runs on, and the steps' cgroups are gone after."""
    isolation = cgroup_backend(agent_config)
    channel = StepsChannel()
    job_group = isolation.group_path(1, 0)

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, "sleep 60\n", workdir, memory_bytes=50 * MiB))
            await agent.started(1)
            where = [PYTHON, "-c", "print(open('/proc/self/cgroup').read())"]
            channel.push(step(workdir, where, step_id=0, node_index=0, memory=50 * MiB))  # type: ignore[arg-type]
            await wait_for(lambda: len(channel.ends) == 1, "step 0 to end")
            assert f"{os.path.basename(job_group)}/step_0\n" in channel.printed.decode()
            channel.push(step(workdir, HOG, step_id=1, node_index=0, memory=50 * MiB))  # type: ignore[arg-type]
            await wait_for(lambda: len(channel.ends) == 2, "step 1 to end")
            hog = channel.ends[1]
            assert (hog.step_id, hog.oom, hog.exit_code, hog.exit_signal) == (1, True, 137, 9)
            assert channel.finished(1) is None  # the batch script runs on
            assert os.path.isdir(job_group)
            assert not os.path.exists(os.path.join(job_group, "step_0"))
            assert not os.path.exists(os.path.join(job_group, "step_1"))
            channel.push(Cancel(job_id=1, kill_wait_seconds=1))
            await agent.finished(1)
        assert not os.path.exists(job_group)

    asyncio.run(scenario())


def test_a_step_on_another_node_gets_the_jobs_memory_there(
    agent_config: AgentConfig, workdir: Path
) -> None:
    """Node 2 of the job runs no batch script: it had no limit for the step at all. Now
    the job's cgroup is made there with the job's 50 MiB, the hog in it is out of
    memory, and the cgroup goes with the step."""
    isolation = cgroup_backend(agent_config)
    channel = StepsChannel()
    job_group = isolation.group_path(1, 0)

    async def scenario() -> None:
        async with agent_running(agent_config, channel):
            channel.push(step(workdir, HOG, step_id=0, node_index=1, memory=50 * MiB))  # type: ignore[arg-type]
            await wait_for(lambda: os.path.isdir(job_group), "the job's cgroup")
            end = (await wait_for(lambda: channel.ends, "the step to end"))[0]
            assert (end.oom, end.exit_code, end.exit_signal) == (True, 137, 9)
            assert not os.path.exists(job_group)

    asyncio.run(scenario())


def test_a_step_within_its_memory_ends_normally_and_leaves_no_cgroup(
    agent_config: AgentConfig, workdir: Path
) -> None:
    isolation = cgroup_backend(agent_config)
    channel = StepsChannel()

    async def scenario() -> None:
        async with agent_running(agent_config, channel):
            argv = ["sh", "-c", "exit 3"]
            channel.push(step(workdir, argv, step_id=0, node_index=1, memory=50 * MiB))  # type: ignore[arg-type]
            end = (await wait_for(lambda: channel.ends, "the step to end"))[0]
            assert (end.oom, end.exit_code, end.exit_signal) == (False, 3, 0)
            assert not os.path.exists(isolation.group_path(1, 0))

    asyncio.run(scenario())


def test_the_rlimit_watchdog_kills_a_step_past_the_jobs_memory(
    agent_config: AgentConfig, workdir: Path
) -> None:
    """Without cgroups (isolation=rlimit) the agent samples the step's tasks' resident
    memory and kills them past the job's memory on the node, as it does a batch script."""
    config = dataclasses.replace(agent_config, isolation="rlimit")
    channel = StepsChannel()

    async def scenario() -> None:
        async with agent_running(config, channel):
            channel.push(step(workdir, HOG, step_id=0, node_index=1, memory=50 * MiB))  # type: ignore[arg-type]
            end = (await wait_for(lambda: channel.ends, "the step to end"))[0]
            assert (end.oom, end.exit_code, end.exit_signal) == (True, 137, 9)

    asyncio.run(scenario())


@pytest.mark.skipif(os.geteuid() != 0, reason="running a job as another user needs root")
def test_the_jobs_user_may_make_a_steps_cgroup_but_not_change_the_limit(
    agent_config: AgentConfig, channel: FakeChannel
) -> None:
    """A job run as ``nobody``: the agent gave it the job's cgroup folder, so it makes
    ``step_0`` there, limits it to the step's memory and moves into it (what srun does
    for the tasks it runs on the batch node, ``hal.compat.step_cgroup``), and the job's
    memory limit is still root's."""
    nobody, base = as_nobody("hal-agent-uid-")
    config = dataclasses.replace(agent_config, state_dir=base / "state")
    isolation = cgroup_backend(config)
    job = isolation.group_path(1, 0)
    limit = "memory.max" if isolation.kind == "cgroup2" else "memory.limit_in_bytes"
    work = base / "work"
    script = (
        f"mkdir {job}/step_0 && echo 0 > {job}/step_0/cgroup.procs && cat /proc/self/cgroup\n"
        f"(echo 1 > {job}/{limit}) 2>/dev/null || echo limit kept\n"
        f"(echo {50 * MiB} > {job}/step_0/{limit}) && cat {job}/step_0/{limit}\n"
    )

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            launch = make_launch(
                1, script, work, uid=nobody.pw_uid, gid=nobody.pw_gid, memory_bytes=100 * MiB
            )
            channel.push(launch)
            report = await agent.finished(1)
            assert report.state == "COMPLETED", (work / "slurm-1.out").read_text()

    try:
        asyncio.run(scenario())
        out = (work / "slurm-1.out").read_text()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert f"/{os.path.basename(job)}/step_0\n" in out, out
    assert "limit kept" in out, out
    assert f"\n{50 * MiB}\n" in out, out  # the step's own limit, under the job's
    assert not os.path.exists(job)  # removed with the job, the user's step_0 too
