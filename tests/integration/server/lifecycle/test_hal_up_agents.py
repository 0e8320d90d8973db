"""`hal up`'s local agents: started again when one dies, and splitting the host rather than
each offering all of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from up_process import agents_of, job_submit, start_up, stop_up

from hal.testing.live import free_port, stop_process, wait_until

pytestmark = pytest.mark.live  # `hal up` and its agents, in subprocesses


def test_a_local_agent_that_dies_is_started_again_and_said(tmp_path: Path) -> None:
    """kill -9 of `hal up`'s agent: `hal up` says so on stderr and starts it again, and
    node1 comes back UP (it stayed down, its agent a zombie, until `hal up` restarted)."""
    data, home, port, log = tmp_path / "data", tmp_path / "home", free_port(), tmp_path / "up.log"
    up, client = start_up(data, port, home, log=log)
    try:
        (first,) = agents_of(data)
        first.kill()
        wait_until(
            lambda: [a.pid for a in agents_of(data)] not in ([], [first.pid]), 20, 0.1,
            message="a new agent",
        )  # fmt: skip
        wait_until(
            lambda: any(n.name == "node1" and n.state == "UP" for n in client.nodes()), 30, 0.2,
            message="node1 back",
        )  # fmt: skip
        said = log.read_text()
        assert f"hal: local agent node1 (pid {first.pid}) exited with signal SIGKILL" in said
        assert "starting it again" in said
        assert first.pid not in [a.pid for a in agents_of(data)]
    finally:
        stop_up(up, client, data)


def test_two_agents_split_the_host_and_a_one_cpu_job_sees_one_cpu(tmp_path: Path) -> None:
    """Each default agent offered the whole machine: on a 2-core, 24 GB host the cluster
    showed 4 CPUs and 47 GiB, and a `-c1` job saw `nproc` = 2. Now the agents split the
    host's CPUs and memory, and each binds its jobs to its own CPUs."""
    host_cpus = len(os.sched_getaffinity(0))
    if host_cpus < 2:
        pytest.skip("two agents need two CPUs")
    data, home, port = tmp_path / "data", tmp_path / "home", free_port()
    up, client = start_up(data, port, home, agents=("--agents", "2"))
    try:
        wait_until(lambda: len([n for n in client.nodes() if n.state == "UP"]) == 2, 30,
                   message="both agents")  # fmt: skip
        nodes = client.nodes()
        assert sum(n.cpus for n in nodes) == host_cpus
        assert sum(n.memory_bytes for n in nodes) <= psutil.virtual_memory().total
        seen = tmp_path / "nproc"
        job = client.submit(job_submit(f"nproc > {seen}", tmp_path, cpus_per_task=1)).job_id
        wait_until(lambda: client.job(job).state == "COMPLETED", 60, message="the job")
        assert seen.read_text().strip() == "1"
    finally:
        stop_up(up, client, data)


def test_more_agents_than_cpus_is_refused_before_anything_starts(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    args = ["--data-dir", str(tmp_path / "data"), "--port", str(free_port())]
    done = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", "up", *args, "--agents", str(cpus + 1)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"write --agents {cpus} or fewer" in done.stderr
    assert "HAL is up" not in done.stdout and not agents_of(tmp_path / "data")


def test_on_a_host_with_one_cpu_the_default_is_one_agent(tmp_path: Path) -> None:
    """The default of two agents would be refused on a one-CPU host (`make up` on the
    smallest VM): it starts one there, offering that CPU."""
    data, home, out = tmp_path / "data", tmp_path / "home", tmp_path / "banner.txt"
    first = min(os.sched_getaffinity(0))
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    up = subprocess.Popen(
        [sys.executable, "-m", "hal.cli.main", "up", "--data-dir", str(data), "--port",
         str(free_port())],
        env=env, stdout=out.open("wb"), stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, {first}),  # noqa: PLW1509
    )  # fmt: skip
    try:
        wait_until(lambda: "stop:" in out.read_text() or up.poll() is not None, 60,
                   message="the banner")  # fmt: skip
        text = out.read_text()
        assert f"  agents:       node1: 1 CPU (host CPU {first})," in text, text
        assert "node2" not in text
    finally:
        stop_process(up)
        for agent in agents_of(data):
            agent.kill()
