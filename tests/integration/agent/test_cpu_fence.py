"""A real agent's CPU fence (``--constrain-cores``, Slurm's ConstrainCores) on a host with
a cpuset controller: a bound job runs in a cpuset cgroup of its CPUs; run as ``nobody``,
it may make a step's cpuset cgroup inside it on its own CPUs and move into it (what srun
does for an ``--exact`` step it runs on the batch node, ``hal.compat.step_cgroup``), but
not widen the job's fence, which stays root's. Skipped where there is no cpuset
controller the agent may use (not root, or a cgroup2 host without it delegated)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from conftest import FakeChannel, agent_running, as_nobody, make_launch
from hal.agent import AgentConfig
from hal.agent.isolation import agent_cgroup_name, detect_isolation


def test_the_jobs_user_may_fence_a_step_but_not_widen_the_job(
    agent_config: AgentConfig, channel: FakeChannel
) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a host of at least two CPUs to bind to")
    nobody, base = as_nobody("hal-agent-fence-")
    config = dataclasses.replace(agent_config, state_dir=base / "state", bind_cpus="yes")
    name = agent_cgroup_name(config.node, str(config.state_dir))
    isolation = detect_isolation(config.isolation, name, cores="auto")
    if not isolation.cores or isolation.cores == "cgroup2":
        isolation.release()
        pytest.skip(f"no cgroup1 cpuset hierarchy here (fence: {isolation.cores or 'none'})")
    job = Path(isolation.cores) / "job_1.0"
    two = sorted(os.sched_getaffinity(0))[:2]
    work = base / "work"
    script = (
        f"grep Cpus_allowed_list /proc/self/status\n"
        f"mkdir {job}/step_0 && cat {job}/cpuset.mems > {job}/step_0/cpuset.mems\n"
        f"echo {two[1]} > {job}/step_0/cpuset.cpus && echo 0 > {job}/step_0/tasks\n"
        f"grep Cpus_allowed_list /proc/self/status\n"
        f"(echo {two[0]} > {job}/cpuset.cpus) 2>/dev/null || echo fence kept\n"
    )

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            launch = make_launch(1, script, work, uid=nobody.pw_uid, gid=nobody.pw_gid, cpus=2)
            channel.push(launch)
            report = await agent.finished(1)
            assert report.state == "COMPLETED", (work / "slurm-1.out").read_text()

    try:
        asyncio.run(scenario())
        out = (work / "slurm-1.out").read_text().split("\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert out[0].split()[1] == f"{two[0]}-{two[1]}" or out[0].split()[1] == f"{two[0]},{two[1]}"
    assert out[1].split()[1] == str(two[1]), out  # in the step's cpuset: its CPU alone
    assert out[2] == "fence kept", out
    assert not job.exists()  # removed with the job, the user's step_0 too
