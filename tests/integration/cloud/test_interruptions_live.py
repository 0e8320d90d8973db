"""Spot interruptions live: a control plane (``LiveServer``) with a local spot group
(``market = "spot"``), whose nodes are real ``hal agent`` processes, each reading its
own EC2 metadata stand-in (``hal.cloud.imds``) with ``--interruption-notice``. The test
injects notices over the stand-in's HTTP control (``POST /hal/interrupt``, its URL in the
local provider's record), as EC2 would mark a spot instance; the agent reads it, the
control plane signals the job, requeues it and the autoscaler makes it a new node.

One static node of 1 CPU, so the 2-CPU jobs run only on the group's nodes. The jobs are
submitted with ``hal sbatch`` as the Unix user's HAL user (the group's agents run a job
only as its own account), and read back over REST and ``hal sacct``.

Also here: a local spot instance stopped at its notice's time by the provider alone, and
an EC2 spot group's default user data (against moto) starting the agent with
``--interruption-notice``.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

import httpx
import psutil
import pytest

from hal.cli.parser import build_parser
from hal.cloud.ec2 import Ec2Provider
from hal.cloud.local import LocalProvider
from hal.cloud.provider import Launch
from hal.core.node_groups import SPOT, NodeGroup
from hal.core.resources import ResourceVector
from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until
from hal.wire.jobs import JobInfo

STEPS = 40  # the job's steps of 0.25 s
# counts STEPS steps of 0.25 s, one line each in `steps`; at SIGUSR1 (to the batch shell
# only: B:) it writes its checkpoint between two steps and exits; a new run goes on from it
CHECKPOINTING = f"""#!/bin/sh
ck=ck.$SLURM_JOB_ID
i=$(cat $ck 2>/dev/null || echo 0)
echo "start $SLURM_RESTART_COUNT $SLURMD_NODENAME $i" >> log
stop=0
trap 'stop=1' USR1
while [ $i -lt {STEPS} ]; do
  if [ $stop = 1 ]; then echo $i > $ck; echo "checkpoint $i" >> log; exit 0; fi
  sleep 0.25; i=$((i+1)); echo "step $i" >> steps
done
echo done >> log
"""


def toml(node_timeout: float = 10.0) -> str:
    return f"""
kill_wait_seconds = 2
node_timeout_seconds = {node_timeout}
heartbeat_interval_seconds = 1

[cloud]
interval_seconds = 0.5
pending_seconds = 0

[[cloud.groups]]
name = "spot"
provider = "local"
market = "spot"
nodes = "spot[1-4]"
cpus = 2
memory = "1G"
idle_seconds = 300
boot_timeout_seconds = 60
[cloud.groups.local]
agent_args = "--interruption-interval 0.2"
"""


class Spot:
    def __init__(self, server: LiveServer, workdir: Path, token: str) -> None:
        self.server, self.workdir, self.token = server, workdir, token

    def sbatch(self, *args: str) -> int:
        done = self.server.cli("sbatch", "--parsable", *args, token=self.token, cwd=self.workdir)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> JobInfo:
        with self.server.client() as c:
            return c.job(job_id)

    def record(self, node: str) -> dict[str, object]:
        path = self.server.data_dir / "cloud" / "spot" / "instances" / f"{node}.json"
        data = json.loads(path.read_text())
        assert isinstance(data, dict)
        return data

    def interrupt(self, node: str, ahead: float = 120) -> float:
        """Mark ``node``'s instance as EC2 marks a spot instance it takes back."""
        url = f"{self.record(node)['imds']}/hal/interrupt?in={ahead}"
        answer = http.post(url, timeout=10)
        assert answer.status_code == 200, answer.text
        return float(answer.json()["time"])

    def running_on(self, job_id: int, restarts: int) -> str:
        """The node the job's run ``restarts`` runs on, once its script started there."""

        def started() -> bool:
            info = self.job(job_id)
            return (
                info.state == "RUNNING"
                and info.restarts == restarts
                and (self.workdir / "log").exists()
                and f"start {restarts} " in (self.workdir / "log").read_text()
            )

        wait_until(started, 60, message=f"run {restarts} of job {job_id} to start")
        return self.job(job_id).nodes[0]

    def worked(self, steps: int) -> None:
        """Wait until the job has done ``steps`` steps in all its runs."""
        path = self.workdir / "steps"
        wait_until(
            lambda: path.exists() and len(path.read_text().splitlines()) >= steps,
            30,
            message=f"{steps} steps done",
        )

    def sacct(self, job_id: int, fields: str) -> list[list[str]]:
        done = self.server.cli("sacct", "-D", "-X", "-n", "-P", "-j", str(job_id), "-o", fields)
        assert done.returncode == 0, done.stderr
        return [line.split("|") for line in done.stdout.strip().splitlines()]


def seconds(clock: str) -> int:
    """sacct's ``HH:MM:SS``."""
    h, m, sec = (int(x) for x in clock.split(":"))
    return h * 3600 + m * 60 + sec


@pytest.fixture
def start_spot(tmp_path: Path) -> Iterator[Callable[..., Spot]]:
    made: list[LiveServer] = []

    def start(**kwargs: float) -> Spot:
        config = tmp_path / "hal.toml"
        config.write_text(toml(**kwargs))
        workdir = tmp_path / "work"
        workdir.mkdir()
        server = LiveServer(tmp_path / "data", config_file=config)
        made.append(server)
        server.start()
        server.start_agent("node1", cpus=1, memory="1G")
        with server.client() as c:
            wait_until(lambda: any(n.name == "node1" for n in c.nodes()), message="node1")
        user = getpass.getuser()
        return Spot(server, workdir, server.add_users(user)[user])

    yield start
    for server in made:
        server.stop()
        for path in (server.data_dir / "cloud").glob("*/instances/*.json"):
            with suppress(ValueError, OSError, ProcessLookupError, KeyError):
                os.killpg(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)


def test_a_job_interrupted_twice_runs_once_to_completion(
    start_spot: Callable[..., Spot],
) -> None:
    spot = start_spot()
    script = spot.workdir / "job.sh"
    script.write_text(CHECKPOINTING)
    job = spot.sbatch("-c", "2", "--signal=B:USR1@10", "-o", "out.txt", str(script))
    first = spot.running_on(job, 0)
    assert first.startswith("spot")
    spot.worked(12)  # 3 s into its run: a run's loss has something to be told from
    spot.interrupt(first)
    second = spot.running_on(job, 1)
    spot.worked(24)
    spot.interrupt(second)
    spot.running_on(job, 2)
    wait_until(lambda: spot.job(job).state == "COMPLETED", 60, message="the job to complete")

    log = (spot.workdir / "log").read_text().splitlines()
    assert [line.split()[0] for line in log] == [
        "start", "checkpoint", "start", "checkpoint", "start", "done",
    ]  # fmt: skip
    # nothing lost, nothing done twice: each step once, in order, across the three runs
    steps = (spot.workdir / "steps").read_text().split("\n")[:-1]
    assert steps == [f"step {i}" for i in range(1, STEPS + 1)]
    runs = spot.sacct(job, "State,Interrupted,LostWork,Start,End,ElapsedRaw")
    assert [r[0] for r in runs] == ["PREEMPTED", "PREEMPTED", "COMPLETED"]
    assert all(r[1] for r in runs[:2]) and runs[2][1] == ""
    # each interrupted run ended on its own after its signal: only that moment is lost,
    # not its 3 s and more
    for run in runs[:2]:
        assert seconds(run[2]) <= 1 < int(run[5]), runs  # (whole seconds: 3 s may read 2)
    assert runs[0][4] <= runs[1][3] and runs[1][4] <= runs[2][3]  # never two at once
    with spot.server.client() as c:
        events = list(c.events(0, follow=False))
    interrupted = [e for e in events if e.kind == "cloud.interrupted"]
    assert [e.data["jobs"] for e in interrupted] == [[job], [job]]
    assert [e.data["group"] for e in interrupted] == ["spot", "spot"]
    # three instances were made for it: each run on a new machine
    made = set()
    for e in events:
        jobs = e.data.get("jobs")
        if e.kind == "cloud.node_created" and isinstance(jobs, list) and job in jobs:
            made.add(e.data["instance"])
    assert len(made) == 3
    # the interrupted nodes were removed once their job was gone
    removed = [e for e in events if e.kind == "cloud.node_removed" and e.data.get("interrupted")]
    assert len(removed) == 2


def test_an_instance_gone_without_notice_is_a_node_failure_and_its_job_runs_again(
    start_spot: Callable[..., Spot],
) -> None:
    """The machine goes with no notice (the agent and the job killed, as a terminated
    instance's are): once the agent is silent past the node timeout, the job is requeued
    (NODE_FAIL) and runs to completion on a new node."""
    spot = start_spot(node_timeout=3)
    script = spot.workdir / "job.sh"
    script.write_text(CHECKPOINTING)
    job = spot.sbatch("-c", "2", str(script))
    first = spot.running_on(job, 0)
    agent = psutil.Process(int(str(spot.record(first)["pid"])))
    for proc in [*agent.children(recursive=True), agent]:
        with suppress(psutil.Error):
            proc.kill()
    spot.running_on(job, 1)
    wait_until(lambda: spot.job(job).state == "COMPLETED", 60, message="the job to complete")
    runs = spot.sacct(job, "State,Interrupted,LostWork")
    assert [r[0] for r in runs] == ["NODE_FAIL", "COMPLETED"]
    assert runs[0][1] == "" and runs[0][2] not in ("", "00:00:00")  # the whole run was lost
    assert (spot.workdir / "log").read_text().count("done") == 1


def test_a_local_spot_instance_goes_at_its_notices_time(tmp_path: Path) -> None:
    """The local provider's spot instance: its agent is told its metadata stand-in, and at
    a notice's time the instance is stopped, as EC2 takes a spot instance back (its agent
    here joins a URL nothing listens on and keeps retrying, as in the conformance
    suite)."""
    group = NodeGroup(
        name="spot",
        provider="local",
        nodes=("spot1",),
        resources=ResourceVector(cpus=1, memory_bytes=1 << 30),
        market=SPOT,
    )
    provider = LocalProvider(group, "test", tmp_path / "spot")
    (inst,) = provider.create(["spot1"], Launch(f"http://127.0.0.1:{free_port()}", "token"))
    try:
        imds = json.loads((tmp_path / "spot/instances/spot1.json").read_text())["imds"]
        agent = psutil.Process(int(inst.id))
        # (just forked, it shows its parent's command line until it has exec'd)
        wait_until(lambda: "--interruption-notice" in agent.cmdline(), 20, message="exec")
        assert agent.cmdline()[agent.cmdline().index("--interruption-notice") + 1] == imds
        answer = http.post(f"{imds}/hal/interrupt?in=1", timeout=10).json()
        wait_until(lambda: provider.instances() == [], 20, message="the instance to go")
        assert not agent.is_running() or agent.status() == psutil.STATUS_ZOMBIE
        assert time.time() >= answer["time"]
        with pytest.raises(httpx.TransportError):  # its metadata service went with it
            http.get(f"{imds}/latest/meta-data/instance-id", timeout=2)
    finally:
        provider.remove(provider.instances())


def test_an_ec2_spot_groups_agents_read_their_notices(
    make_group: Callable[..., NodeGroup], settings: dict[str, str], cluster: str
) -> None:
    """A spot group's default user data starts the agent with the instance's metadata
    service; an on-demand group's does not (its instances get no notice)."""
    launch = Launch("http://head.example:8080", "token")
    for market, expected in ((SPOT, "http://169.254.169.254"), ("on_demand", "")):
        group = replace(make_group(**settings), market=market)
        script = Ec2Provider(group, cluster).render("burst1", launch)
        argv = shlex.split(script.splitlines()[-1])[2:]  # (after `exec hal`)
        assert build_parser(argv).parse_args(argv).interruption_notice == expected
