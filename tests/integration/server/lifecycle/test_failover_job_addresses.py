"""A job submitted without a ``HAL_URL`` of its own, on an agent given both servers of a
failover pair (one PostgreSQL): its environment lists both, the leader first (then the
leader's ``--advertise-url``, a name the agent does not use), so ``hal feedback`` and
``srun`` from inside it reach the new leader after the old one is killed (kill -9) while
the job runs; a job launched afterwards lists the new leader first. Before, a job had
the leader's address alone and its commands failed with the leader."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from hal.bench.failover import ServerProcess, leader_and_standby
from hal.bench.scale import make_tokens
from hal.client import HalClient
from hal.server.feedback import KEY_FILE
from hal.testing.live import free_port, stop_process, wait_until
from hal.wire.submit import JobSubmit

pytestmark = pytest.mark.live  # starts `hal server` and `hal agent` processes

PY = sys.executable


@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Iterator[tuple[list[ServerProcess], str, str]]:
    """Two servers on ``pg_url`` sharing one feedback key (as docs/admin/failover.md
    says), the leader first; the admin's and the agents' tokens."""
    admin, agent = make_tokens(pg_url, "alice", "agents")
    key = secrets.token_bytes(32).hex() + "\n"
    for name in ("s0", "s1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / KEY_FILE).write_text(key)
    # s0 advertises another name for itself than its agents use: the job lists it too
    port = free_port()
    advertised = ("--advertise-url", f"http://localhost:{port}")
    with leader_and_standby(
        lambda: ServerProcess(pg_url, tmp_path / "s0", *advertised, port=port),
        lambda: ServerProcess(pg_url, tmp_path / "s1"),
    ) as servers:
        yield servers, admin, agent


def test_a_jobs_own_commands_follow_the_leader_after_a_takeover(
    pair: tuple[list[ServerProcess], str, str], tmp_path: Path
) -> None:
    servers, admin, agent_token = pair
    leader, standby = (s.url for s in servers)
    env = {
        **os.environ,
        "HAL_FAILOVER_TIMEOUT": "60",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    with open(tmp_path / "agent.log", "ab") as log:
        agent = subprocess.Popen(
            [
                *(PY, "-m", "hal.cli.main", "agent", "--server", leader, "--server", standby),
                *("--name", "node1", "--cpus", "2", "--memory", "2G"),
                *("--state-dir", str(tmp_path / "agent"), "--unknown-users-as-agent"),
            ],
            env={**env, "HAL_URL": f"{leader},{standby}", "HAL_TOKEN": agent_token},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    work = tmp_path / "job"
    work.mkdir()
    hal = f"{PY} -m hal.cli.main"
    script = (
        "#!/bin/sh\n"
        'echo "$HAL_URL" > url.txt\n'
        "i=0; while [ ! -e go ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i+1)); done\n"
        f"{hal} feedback loss=0.25 > feedback.out 2>&1; echo $? > feedback.rc\n"
        f"{hal} srun -n1 echo step-ran > step.out 2>&1; echo $? > step.rc\n"
    )
    # the SDK's submission: the environment is what the submitter gives, no HAL_URL
    job = JobSubmit(
        script=script,
        workdir=str(work),
        name="inside",
        environment={
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "HAL_TOKEN": admin,
            "HAL_FAILOVER_TIMEOUT": "60",
            "XDG_CACHE_HOME": str(tmp_path / "job-cache"),
        },
    )
    client = HalClient(f"{leader},{standby}", admin)
    try:
        wait_until(
            lambda: any(n.name == "node1" and n.state == "UP" for n in client.nodes()),
            timeout=60,
            message="the agent to register",
        )
        job_id = client.submit(job).job_id
        wait_until((work / "url.txt").exists, timeout=120, message="the job to run")
        own = leader.replace("127.0.0.1", "localhost")  # s0's --advertise-url
        assert (work / "url.txt").read_text().strip() == f"{leader},{standby},{own}"

        os.kill(servers[0].proc.pid, signal.SIGKILL)
        servers[0].proc.wait(10)
        wait_until(lambda: servers[1].role() == "leader", timeout=30, message="s1 to lead")
        (work / "go").touch()

        for name in ("feedback", "step"):
            wait_until(
                (work / f"{name}.rc").exists,
                timeout=120,
                message=f"the job's {name} command to end",
            )
            out = (work / f"{name}.out").read_text()
            assert (work / f"{name}.rc").read_text().strip() == "0", out
        assert "step-ran" in (work / "step.out").read_text()
        wait_until(
            lambda: client.job(str(job_id)).state == "COMPLETED",
            timeout=60,
            message="the job to end on the new leader",
        )
        found = {m.name: m.latest for m in client.job_feedback(job_id).metrics}
        assert found == {"loss": 0.25}
        # a job launched by the new leader lists it first
        later = replace(job, script='#!/bin/sh\necho "$HAL_URL" > later.txt\n', name="later")
        client.submit(later)
        wait_until((work / "later.txt").exists, timeout=120, message="the later job to run")
        assert (work / "later.txt").read_text().split()[0].split(",")[:2] == [standby, leader]
        acct = subprocess.run(
            [PY, "-m", "hal.cli.main", "sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State"],
            env={**env, "HAL_URL": f"{leader},{standby}", "HAL_TOKEN": admin},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert acct.returncode == 0, acct.stderr
        assert f"{job_id}.0|COMPLETED" in acct.stdout.split(), acct.stdout
    finally:
        (work / "go").touch()  # (a job left waiting ends: agents leave their jobs running)
        client.close()
        stop_process(agent)
