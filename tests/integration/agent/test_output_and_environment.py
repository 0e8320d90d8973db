"""Output file names and the job's environment, as Slurm users and tools expect them."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import PYTHON, FakeChannel, agent_running, make_launch
from hal.agent import AgentConfig

DUMP_ENV = "env > env.txt\n"


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


def test_output_and_error_patterns_are_expanded(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(
                make_launch(
                    7,
                    "echo to-out; echo to-err >&2\n",
                    workdir,
                    name="sim",
                    stdout="o-%x-%4j-%A_%a-%N-%n-%t-%u-%%.log",
                    stderr=str(workdir / "e-%J.log"),
                ),
                make_launch(
                    8,
                    "echo element\n",
                    workdir,
                    stdout="",
                    array_job_id=5,
                    array_task_id=2,
                ),
                make_launch(9, "echo raw\n", workdir, stdout="raw\\%j.log"),
            )
            for job in (7, 8, 9):
                assert (await agent.finished(job)).state == "COMPLETED"
            out = workdir / f"o-sim-0007-7_4294967294-{agent_config.node}-0-0-tester-%.log"
            assert out.read_text() == "to-out\n"
            assert (workdir / "e-7.log").read_text() == "to-err\n"
            assert (workdir / "slurm-5_2.out").read_text() == "element\n"
            assert (workdir / "raw%j.log").read_text() == "raw\n"

    asyncio.run(scenario())


def test_environment_has_slurm_and_hal_variables(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            launch = make_launch(
                42,
                DUMP_ENV,
                workdir,
                name="envjob",
                cpus=3,
                memory_bytes=1536 << 20,
                nodes=["node1", "node2", "node3"],
                gpu_ids=[1, 3],
                environment={
                    "PATH": os.environ["PATH"],
                    "SLURM_JOB_CPUS_PER_NODE": "3(x3)",  # the server knows better
                    "CUDA_VISIBLE_DEVICES": "0,1,2,3",  # leaked from the submitter
                    "MY_VAR": "kept",
                },
            )
            channel.push(launch)
            report = await agent.finished(42)
            env = read_env(workdir / "env.txt")
            expected = {
                "SLURM_JOB_ID": "42",
                "SLURM_JOBID": "42",
                "HAL_JOB_ID": "42",
                "SLURM_JOB_NAME": "envjob",
                "SLURMD_NODENAME": agent_config.node,
                "HAL_NODE": agent_config.node,
                "SLURM_NODEID": "0",
                "SLURM_PROCID": "0",
                "SLURM_LOCALID": "0",
                "SLURM_CPUS_ON_NODE": "3",
                "SLURM_JOB_CPUS_PER_NODE": "3(x3)",
                "SLURM_MEM_PER_NODE": "1536",
                "SLURM_JOB_NODELIST": "node[1-3]",
                "SLURM_NODELIST": "node[1-3]",
                "SLURM_NNODES": "3",
                "SLURM_JOB_NUM_NODES": "3",
                "SLURM_SUBMIT_DIR": str(workdir),
                "SLURM_TASK_PID": str(report.pid),
                "CUDA_VISIBLE_DEVICES": "1,3",
                "SLURM_JOB_GPUS": "1,3",
                "HAL_JOB_GPUS": "1,3",
                "SLURM_GPUS_ON_NODE": "2",
                "ENVIRONMENT": "BATCH",
                "MY_VAR": "kept",
                # as slurmstepd sets them (HAL had none of them)
                "SLURM_GTIDS": "0",
                "SLURM_TOPOLOGY_ADDR": agent_config.node,
                "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
                "TMPDIR": "/tmp",
            }
            assert {k: env.get(k) for k in expected} == expected
            assert "SLURM_ARRAY_JOB_ID" not in env

    asyncio.run(scenario())


def test_array_element_variables(agent_config: AgentConfig, channel: FakeChannel, workdir: Path):
    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(9, DUMP_ENV, workdir, array_job_id=4, array_task_id=2))
            await agent.finished(9)
            env = read_env(workdir / "env.txt")
            assert env["SLURM_ARRAY_JOB_ID"] == "4"
            assert env["SLURM_ARRAY_TASK_ID"] == "2"
            assert env["SLURM_JOB_ID"] == "9"
            assert "CUDA_VISIBLE_DEVICES" not in env

    asyncio.run(scenario())


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root agent")
def test_root_agent_runs_the_job_as_its_user(agent_config: AgentConfig, channel: FakeChannel):
    """Launch.uid is honoured: the script and its output file belong to that user."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user on this host")
    # The job's user must be able to reach its script and working directory.
    base = Path(tempfile.mkdtemp(prefix="hal-agent-uid-"))
    try:
        base.chmod(0o711)
        work = base / "work"
        work.mkdir(mode=0o777)
        work.chmod(0o777)
        config = dataclasses.replace(agent_config, state_dir=base / "state")

        async def scenario() -> None:
            async with agent_running(config, channel) as agent:
                launch = make_launch(
                    1, "id -u; id -g\n", work, uid=nobody.pw_uid, gid=nobody.pw_gid
                )
                channel.push(launch)
                report = await agent.finished(1)
                assert report.state == "COMPLETED", report
                out = work / "slurm-1.out"
                assert out.read_text().split() == [str(nobody.pw_uid), str(nobody.pw_gid)]
                assert out.stat().st_uid == nobody.pw_uid

        asyncio.run(scenario())
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root agent could run a job as root")
def test_root_agent_refuses_a_job_whose_user_has_no_unix_account(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """A HAL user the control plane found no Unix account for (``Launch.uid`` None, e.g.
    a server host without the site's accounts) got their job run as the agent's own
    user: as root, on a root agent. Slurm never runs a user's job as root; the launch
    fails and says why, and nothing of the script runs."""
    config = dataclasses.replace(agent_config, unknown_users_as_agent=False)

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, "id -u > whoami.txt\n", workdir, user="hal-no-such-user"))
            report = await agent.finished(1)
            assert report.kind == "launch_failed", report
            assert "hal-no-such-user" in report.message and "Unix account" in report.message
            assert not (workdir / "whoami.txt").exists()

    asyncio.run(scenario())


def test_an_agent_told_so_runs_users_without_unix_account_as_itself(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """``--unknown-users-as-agent`` (single-user clusters, the tests' own): such a job runs
    as the agent's user, root or not."""
    config = dataclasses.replace(agent_config, unknown_users_as_agent=True)

    async def scenario() -> None:
        async with agent_running(config, channel) as agent:
            channel.push(make_launch(1, "id -u > whoami.txt\n", workdir, user="hal-no-such-user"))
            report = await agent.finished(1)
            assert report.state == "COMPLETED", report
            assert (workdir / "whoami.txt").read_text().strip() == str(os.geteuid())

    asyncio.run(scenario())


def test_job_inherits_no_descriptor_but_stdin_stdout_stderr(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """The job gets 0-2 only, as under slurmstepd. The supervisor's "started" pipe to the
    agent leaked into it as fd 3: a job writing there could pass for the supervisor, and
    once the agent had closed its end a write killed the job with SIGPIPE."""
    script = (
        f"#!{PYTHON}\n"
        "import os\n"
        "extra = []\n"
        "for fd in range(3, 256):\n"
        "    try:\n"
        "        os.fstat(fd)\n"
        "    except OSError:\n"
        "        continue\n"
        "    extra.append(fd)\n"
        "print(extra)\n"
    )

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(make_launch(1, script, workdir))
            assert (await agent.finished(1)).state == "COMPLETED"
            assert (workdir / "slurm-1.out").read_text() == "[]\n"

    asyncio.run(scenario())


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_submitters_umask_is_the_jobs(
    agent_config: AgentConfig, channel: FakeChannel, workdir: Path
):
    """sbatch sends the submitter's umask as SLURM_UMASK and slurmstepd applies it: a
    user with umask 077 gets private files from the job (its output file too), not the
    agent's 022. Without one (or with a value that is no umask) the job keeps the
    agent's umask, as before."""
    script = "touch made-$SLURM_JOB_ID\necho umask=${SLURM_UMASK-none}\n"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    agents = os.umask(0o022)
    os.umask(agents)

    async def scenario() -> None:
        async with agent_running(agent_config, channel) as agent:
            channel.push(
                make_launch(1, script, workdir, environment={**env, "SLURM_UMASK": "0077"}),
                make_launch(2, script, workdir, environment={**env, "SLURM_UMASK": "027"}),
                make_launch(3, script, workdir),
                make_launch(4, script, workdir, environment={**env, "SLURM_UMASK": "9x"}),
            )
            for job in (1, 2, 3, 4):
                assert (await agent.finished(job)).state == "COMPLETED"

    asyncio.run(scenario())
    assert _mode(workdir / "made-1") == 0o600
    assert _mode(workdir / "slurm-1.out") == 0o600
    assert (workdir / "slurm-1.out").read_text() == "umask=0077\n"
    assert _mode(workdir / "made-2") == 0o640
    assert _mode(workdir / "made-3") == 0o666 & ~agents
    assert (workdir / "slurm-3.out").read_text() == "umask=none\n"
    assert _mode(workdir / "made-4") == 0o666 & ~agents
