"""A site lists all its servers (``HAL_URL=a,b``, ``hal agent --server A --server B``) and
one of them is down: the commands and the agents reach the live one. Here the first
address is dead (nothing listens: a server killed, or a host not yet back) and the second
is a real control plane on SQLite; an agent given both registers and runs a job that
``hal sbatch`` submitted through both, and ``squeue`` and ``hal events`` see it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hal.testing.live import LiveServer, free_port, stop_process, wait_until


def test_commands_and_an_agent_pass_a_dead_first_address(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with LiveServer(tmp_path) as live:
        both = f"{dead},{live.url}"
        env = {
            **live.env(),
            "HAL_URL": both,
            "HAL_FAILOVER_TIMEOUT": "20",
            "XDG_CACHE_HOME": str(tmp_path / "cache"),  # the leader file's
        }
        log = open(tmp_path / "agent.log", "ab")  # noqa: SIM115 - the agent's, closed below
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hal.cli.main",
                "agent",
                "--server",
                dead,
                "--server",
                live.url,
                "--name",
                "node1",
                "--cpus",
                "1",
                "--memory",
                "1G",
                "--state-dir",
                str(tmp_path / "agent"),
                "--unknown-users-as-agent",
            ],
            env={**env, "HAL_TOKEN": live.agent_token},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            with live.client() as c:
                wait_until(
                    lambda: any(n.name == "node1" and n.state == "UP" for n in c.nodes()),
                    message="the agent given a dead and a live server to register",
                )

            def hal(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [sys.executable, "-m", "hal.cli.main", *args],
                    env=env,
                    text=True,
                    capture_output=True,
                    timeout=120,
                    check=False,
                )

            submitted = hal("sbatch", "--parsable", "--wrap", "true")
            assert submitted.returncode == 0, submitted.stderr
            job = submitted.stdout.strip()
            with live.client() as c:
                wait_until(
                    lambda: c.job(job).state == "COMPLETED",
                    message=f"job {job} to run on node1 and complete",
                )
            listed = hal("squeue", "--states=all", "-h", "-o", "%i %T")
            assert listed.returncode == 0, listed.stderr
            assert f"{job} COMPLETED" in listed.stdout.splitlines()
            events = hal("events", "--no-follow")
            assert events.returncode == 0, events.stderr
            assert f'"job_id":{job}' in events.stdout.replace(" ", "")
            remembered = (tmp_path / "cache" / "hal" / "leader.json").read_text()
            assert f'"{both}":"{live.url}"' in remembered.replace(" ", "")
        finally:
            stop_process(agent)
            log.close()


def test_no_live_address_names_each_and_what_it_answered(tmp_path: Path) -> None:
    """Both servers are down: the command says so for each, after HAL_FAILOVER_TIMEOUT."""
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    env = {
        **os.environ,
        "HAL_URL": ",".join(dead),
        "HAL_TOKEN": "t",
        "HAL_FAILOVER_TIMEOUT": "0",
        "XDG_CACHE_HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", "squeue"],
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "no HAL server answered as the leader" in done.stderr
    for url in dead:
        assert f"{url}: " in done.stderr
