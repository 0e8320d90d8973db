"""Power saving live (``[power]``, docs/admin/power.md): a real control plane
(``LiveServer``) whose owned nodes are real ``hal agent`` processes, and shell-script
programs, as an administrator writes them, that start (resume) and stop (suspend) those
agents for the host list they are given.

Nothing is mocked: the programs are run by the server with the host list as argument
(and ``SLURM_RESUME_FILE``), the agents' processes are found by the pid files the
programs write, and the nodes, jobs and events are read back over the server's REST API
and ``hal sinfo`` / ``hal scontrol``. The times are short (a node idle for 2 s is powered
down, powering down takes 1 s) so that the file runs in well under a minute.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from hal.testing.live import LiveServer, free_port, wait_until
from hal.wire.jobs import JobEvent

DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")

RESUME = """#!/bin/sh
# ResumeProgram: start a `hal agent` for each node named, in the background
[ -n "$SLURM_RESUME_FILE" ] && cp "$SLURM_RESUME_FILE" "{dir}/resume-$(date +%s%N).json"
echo "$1" >> {dir}/resume.log
for node in $({hal} scontrol show hostnames "$1"); do
  HAL_TOKEN={token} setsid {hal} agent --server {url} --name "$node" --cpus 2 \\
    --memory 1G --state-dir {data}/agents/"$node" --unknown-users-as-agent \\
    >> {data}/agent-"$node".log 2>&1 < /dev/null &
  echo $! > {dir}/"$node".pid
done
"""
SUSPEND = """#!/bin/sh
# SuspendProgram: stop the agent of each node named
echo "$1" >> {dir}/suspend.log
for node in $({hal} scontrol show hostnames "$1"); do
  kill "$(cat {dir}/"$node".pid)" && rm {dir}/"$node".pid
done
"""
NOTHING = """#!/bin/sh
# a ResumeProgram that powers nothing up: the node never comes back
echo "$1" >> {dir}/resume.log
"""


@dataclass
class Power:
    server: LiveServer
    toml: Path
    dir: Path  # the programs, their logs and the agents' pid files

    def nodes(self) -> dict[str, tuple[str, list[str], str]]:
        """node → (state, flags, reason) from ``GET /v1/nodes``."""
        with self.server.client() as c:
            return {n.name: (n.state, n.state_flags, n.reason) for n in c.nodes()}

    def flags(self, node: str) -> list[str]:
        return self.nodes()[node][1]

    def agent(self, node: str) -> psutil.Process | None:
        """The node's agent process, as the programs' pid file names it."""
        path = self.dir / f"{node}.pid"
        try:
            proc = psutil.Process(int(path.read_text()))
            return None if proc.status() == psutil.STATUS_ZOMBIE else proc
        except (OSError, ValueError, psutil.Error):
            return None

    def events(self, kind: str) -> list[JobEvent]:
        with self.server.client() as c:
            return [e for e in c.events(0, follow=False) if e.kind == kind]

    def sbatch(self, *args: str) -> int:
        done = self.server.cli("sbatch", "--parsable", *args, cwd=self.dir)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> tuple[str, list[str], str]:
        with self.server.client() as c:
            info = c.job(job_id)
        return info.state, info.nodes, info.reason

    def sinfo(self, node: str) -> str:
        done = self.server.cli("sinfo", "-h", "-N", "-n", node, "-o", "%t")
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def resumed(self) -> list[str]:
        path = self.dir / "resume.log"
        return path.read_text().split() if path.exists() else []


def hal() -> str:
    return f"{shlex.quote(sys.executable)} -m hal.cli.main"


def program(path: Path, text: str, **names: str) -> Path:
    path.write_text(text.format(hal=hal(), **names))
    path.chmod(0o755)
    return path


def power_toml(dir: Path, resume: Path, **keys: object) -> str:
    lines = [
        "[power]",
        f'suspend_program = "{dir / "suspend.sh"}"',
        f'resume_program = "{resume}"',
        *(f"{k} = {json.dumps(v)}" for k, v in keys.items()),
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def start_power(tmp_path: Path) -> Iterator[Callable[..., Power]]:
    """``start_power(resume="resume.sh", **[power] keys)``: a control plane with
    ``[power]`` and two owned nodes n1, n2 (2 CPUs each) whose agents the resume
    program started. Afterwards: the server stopped and every agent of the test gone."""
    made: list[Power] = []

    def start(resume: str = "resume.sh", **keys: object) -> Power:
        dir = tmp_path / "power"
        dir.mkdir()
        toml = tmp_path / "hal.toml"
        toml.write_text("kill_wait_seconds = 2\n")
        server = LiveServer(tmp_path / "data", config_file=toml)
        server.start()
        power = Power(server, toml, dir)
        made.append(power)
        names = {"dir": str(dir), "url": server.url, "token": server.agent_token}
        names["data"] = str(server.data_dir)
        program(dir / "resume.sh", RESUME, **names)
        program(dir / "suspend.sh", SUSPEND, **names)
        program(dir / "nothing.sh", NOTHING, **names)
        # the owned nodes' agents, started as the resume program starts them
        subprocess.run([str(dir / "resume.sh"), "n[1-2]"], check=True)
        (dir / "resume.log").unlink()
        wait_until(
            lambda: {power.nodes().get(n, ("",))[0] for n in ("n1", "n2")} == {"UP"},
            message="n1 and n2 to register",
        )
        # [power] taken by a reconfigure, as an administrator adds it to a running server
        toml.write_text(toml.read_text() + power_toml(dir, dir / resume, **keys))
        done = server.cli("scontrol", "reconfigure")
        assert done.returncode == 0, done.stderr
        return power

    yield start
    for power in made:
        power.server.stop()
        for pidfile in power.dir.glob("*.pid"):
            with suppress(OSError, ValueError, psutil.Error):
                proc = psutil.Process(int(pidfile.read_text()))
                for member in [*proc.children(recursive=True), proc]:
                    member.kill()
        power.server.end_fork_servers()


def proc_gone(proc: psutil.Process) -> Callable[[], bool]:
    def gone() -> bool:
        try:
            return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    return gone


def asleep(power: Power, node: str) -> bool:
    return "POWERED_DOWN" in power.flags(node)


def test_idle_nodes_sleep_and_a_waiting_job_wakes_one(start_power: Callable[..., Power]) -> None:
    power = start_power(suspend_time=2, suspend_timeout=1, resume_timeout=30)
    agents = {n: power.agent(n) for n in ("n1", "n2")}
    assert all(agents.values())
    wait_until(lambda: asleep(power, "n1") and asleep(power, "n2"), 20, message="both asleep")
    # the suspend program stopped their agents; sinfo shows them as Slurm does
    for node, proc in agents.items():
        assert proc is not None
        wait_until(proc_gone(proc), 10, message=f"{node}'s agent to stop")
        assert power.sinfo(node) == "idle~"
        state, flags, reason = power.nodes()[node]
        assert (state, flags, reason) == ("DRAIN", ["POWERED_DOWN"], "power: powered down")
    downs = power.events("node.power_down")
    assert sorted(str(e.node) for e in downs) == ["n1", "n2"]
    assert all(e.data["why"] == "idle" for e in downs)
    assert all(float(str(e.data["idle_seconds"])) >= 2 for e in downs)
    done = power.server.cli("scontrol", "show", "node", "n1")
    assert "State=IDLE+POWERED_DOWN " in done.stdout  # as Slurm shows it
    with httpx_client(power) as http:
        text = http.get("/metrics").text
    assert 'hal_power_nodes{state="powered_down"} 2.0' in text

    # a job that needs one node wakes one: the resume program gets it, and the file
    # of jobs and nodes
    job = power.sbatch("-c", "2", "-o", "out.txt", "--wrap", "echo on $SLURMD_NODENAME")
    wait_until(lambda: power.resumed() != [], 15, message="the resume program to run")
    assert power.resumed() == ["n1"]
    woken = [json.loads(p.read_text()) for p in power.dir.glob("resume-*.json")]
    assert woken[0]["all_nodes_resume"] == "n1"
    assert [(j["job_id"], j["nodes_resume"]) for j in woken[0]["jobs"]] == [(job, "n1")]
    ups = power.events("node.power_up")
    assert [(e.node, e.data["jobs"]) for e in ups] == [("n1", [job])]
    wait_until(lambda: power.job(job)[0] in DONE, 40, message=f"job {job} to end")
    assert power.job(job)[:2] == ("COMPLETED", ["n1"])
    assert (power.dir / "out.txt").read_text() == "on n1\n"
    back = power.events("node.powered_up")
    assert [e.node for e in back] == ["n1"] and float(str(back[0].data["seconds"])) > 0
    assert asleep(power, "n2")  # not needed, not woken
    # idle again: powered down again
    wait_until(lambda: asleep(power, "n1"), 20, message="n1 asleep again")
    assert [e.node for e in power.events("node.power_down")].count("n1") == 2


def test_a_node_that_does_not_come_back_goes_down_and_its_job_waits_on(
    start_power: Callable[..., Power],
) -> None:
    # resume_timeout leaves `hal explain` (a new process on a loaded machine) time to ask
    # while the node is still waking
    power = start_power("nothing.sh", suspend_time=1, suspend_timeout=1, resume_timeout=8)
    wait_until(lambda: asleep(power, "n1") and asleep(power, "n2"), 20, message="both asleep")
    job = power.sbatch("-c", "2", "--wrap", "true")
    wait_until(lambda: power.resumed() != [], 15, message="the resume program to run")
    explained = power.server.cli("explain", str(job))
    assert explained.returncode == 0, explained.stderr
    assert "[power] waking node(s) for it: n1 (resumed" in explained.stdout
    wait_until(lambda: power.events("node.resume_failed") != [], 30, message="a failed resume")
    failed = power.events("node.resume_failed")[0]
    assert failed.data["jobs"] == [job] and failed.data["timeout"] == 8
    state, _, reason = power.nodes()[str(failed.node)]
    assert (state, reason) == ("DOWN", "power: not back within 8 s of its resume (resume_timeout)")
    # the job still waits, and wakes the other node (which does not come back either)
    assert power.job(job)[0] == "PENDING"
    wait_until(lambda: len(power.resumed()) == 2, 30, message="the other node to be woken")
    assert sorted(power.resumed()) == ["n1", "n2"]


def test_scontrol_powers_a_node_down_and_up(start_power: Callable[..., Power]) -> None:
    power = start_power(suspend_timeout=1)  # no suspend_time: nothing sleeps on its own
    first = power.agent("n2")
    assert first is not None
    done = power.server.cli("scontrol", "update", "NodeName=n2", "State=power_down")
    assert done.returncode == 0, done.stderr
    wait_until(lambda: asleep(power, "n2"), 15, message="n2 asleep")
    wait_until(proc_gone(first), 10, message="n2's agent to stop")
    assert power.flags("n1") == []  # (not named: stays up)
    assert power.events("node.power_down")[0].data["why"] == "requested"
    done = power.server.cli("scontrol", "update", "NodeName=n2", "State=power_up")
    assert done.returncode == 0, done.stderr
    wait_until(lambda: power.nodes()["n2"][0] == "UP", 30, message="n2 back")
    assert power.sinfo("n2") == "idle"
    assert power.agent("n2") is not None and power.agent("n2") != first


def test_a_program_that_cannot_run_is_refused_at_reconfigure_and_start(
    start_power: Callable[..., Power], tmp_path: Path
) -> None:
    power = start_power(suspend_time=600)
    (power.dir / "resume.sh").chmod(0o644)
    done = power.server.cli("scontrol", "reconfigure")
    assert done.returncode != 0
    assert "power.resume_program" in done.stderr
    assert f"chmod +x {power.dir / 'resume.sh'}" in done.stderr
    with power.server.client() as c:  # refused: the running [power] stays
        assert c.nodes()[0].state == "UP"
    where = ["--data-dir", str(tmp_path / "other"), "--port", str(free_port())]
    started = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", "server", "--config", str(power.toml), *where],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode != 0
    assert "power.resume_program" in started.stderr + started.stdout


def httpx_client(power: Power) -> httpx.Client:
    return httpx.Client(
        base_url=power.server.url, headers={"Authorization": f"Bearer {power.server.token}"}
    )
