"""An MPI-style step (``srun`` across an ``sbatch -N2`` job's nodes) outlives an agent
restart and a control-plane restart (ADR 0012), as Slurm's steps outlive slurmd and
slurmctld restarts: an agent upgrade or a server restart must not kill a user's job's
work. Real server, two real agents, real srun inside the batch script."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from hal.testing.live import LiveServer, stop_process, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"
TASK = (
    "echo $$ > pid.$SLURM_NODEID; echo started $SLURM_PROCID; "
    "while [ ! -e go ]; do sleep 0.1; done; echo done $SLURM_PROCID; "
    "exit $(( SLURM_PROCID * {code} ))"
)


def submit(server: LiveServer, tmp_path: Path, code: int) -> int:
    return sbatch_n2(server, tmp_path, TASK.format(code=code))


def sbatch_n2(server: LiveServer, tmp_path: Path, task: str, srun: str = "") -> int:
    """A two-node job whose script runs ``srun [srun] sh -c 'task'`` and says its exit."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{SRUN} {srun}sh -c '{task}'\necho srun exit=$?\n")
    done = server.cli("sbatch", "--parsable", "-N2", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def two_agents(server: LiveServer) -> list[subprocess.Popen[bytes]]:
    agents = [server.start_agent(f"node{i}", memory="1G") for i in (1, 2)]
    with server.client() as c:
        wait_until(lambda: sum(n.state == "UP" for n in c.nodes()) == 2, message="agents")
    return agents


def state(server: LiveServer, job_id: int) -> str:
    with server.client() as c:
        return c.job(job_id).state


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def second_task(tmp_path: Path) -> int:
    """The pid of the step's task on node2, once it runs."""
    pid_file = tmp_path / "pid.1"
    wait_until(
        lambda: pid_file.exists() and pid_file.read_text().strip() != "",
        60,
        message="the step's task on node2",
    )
    return int(pid_file.read_text())


def sacct_step(server: LiveServer, job_id: int) -> str:
    acct = server.cli("sacct", "-j", f"{job_id}.0", "-n", "-P", "-o", "JobID,State,ExitCode")
    return acct.stdout.strip() + acct.stderr


def test_a_step_outlives_the_restart_of_an_agent(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "srv", config_overrides={"kill_wait_seconds": 2}) as server:
        node1 = server.start_agent("node1", memory="1G")
        node2 = server.start_agent("node2", memory="1G")
        with server.client() as c:
            wait_until(lambda: sum(n.state == "UP" for n in c.nodes()) == 2, message="agents")
        job_id = submit(server, tmp_path, code=0)
        pid = second_task(tmp_path)
        stop_process(node2)  # SIGTERM, as an upgrade stops it
        assert alive(pid), "the agent's stop killed its step task"
        server.start_agent("node2", memory="1G")  # the new agent adopts the task
        time.sleep(1)  # (let it register: not a timing assertion)
        assert alive(pid)
        (tmp_path / "go").touch()
        wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job's end")
        out = (tmp_path / f"slurm-{job_id}.out").read_text()
        assert "started 1" in out and "done 1" in out and "done 0" in out, out
        assert "srun exit=0" in out, out
        assert sacct_step(server, job_id) == f"{job_id}.0|COMPLETED|0:0"
        stop_process(node1)


def test_a_steps_own_time_limit_outlives_the_restart_of_an_agent(tmp_path: Path) -> None:
    """``srun -t``: an agent restarted while the step runs still ends its tasks at the
    step's limit (counted from the step's start, not the new agent's), with slurmstepd's
    line once per node; without it node2's task would run its 100 s."""
    with LiveServer(tmp_path / "srv", config_overrides={"kill_wait_seconds": 2}) as server:
        node1, node2 = two_agents(server)
        task = "echo $$ > pid.$SLURM_NODEID; exec sleep 100"
        job_id = sbatch_n2(server, tmp_path, task, "-t 0:08 ")
        pid = second_task(tmp_path)
        stop_process(node2)
        assert alive(pid)
        server.start_agent("node2", memory="1G")
        wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job's end")
        out = (tmp_path / f"slurm-{job_id}.out").read_text()
        for node in ("node1", "node2"):
            line = f"STEP {job_id}.0 ON {node} CANCELLED AT "
            assert out.count(line) == 1 and "DUE TO TIME LIMIT" in out, out
        assert out.endswith("srun exit=143\n"), out
        assert not alive(pid)
        stop_process(node1)


def test_an_agent_restarted_after_a_steps_time_limit_only_kills_it(tmp_path: Path) -> None:
    """The step's limit came (SIGTERM, which its tasks ignore) and its agent restarts
    before KillWait is over: the new agent sends the SIGKILL when KillWait ends, and
    neither SIGTERMs again nor repeats slurmstepd's line."""
    overrides = {"kill_wait_seconds": 5}
    with LiveServer(tmp_path / "srv", config_overrides=overrides) as server:
        node1, node2 = two_agents(server)
        task = 'trap "" TERM; echo $$ > pid.$SLURM_NODEID; exec sleep 100'
        job_id = sbatch_n2(server, tmp_path, task, "-t 0:03 ")
        pid = second_task(tmp_path)
        out = tmp_path / f"slurm-{job_id}.out"
        line = f"STEP {job_id}.0 ON node2 CANCELLED AT "
        wait_until(lambda: out.exists() and line in out.read_text(), 30, message="the limit")
        stop_process(node2)
        assert alive(pid)  # it ignored the SIGTERM
        server.start_agent("node2", memory="1G")
        wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job's end")
        text = out.read_text()
        assert text.count(line) == 1, text
        assert "srun: error: node2: task 1: Killed" in text, text
        assert not alive(pid)
        stop_process(node1)


def test_a_step_outlives_the_restart_of_the_server(tmp_path: Path) -> None:
    data = tmp_path / "srv"
    first = LiveServer(data, config_overrides={"kill_wait_seconds": 2})
    first.start()
    agents = [first.start_agent(f"node{i}", memory="1G") for i in (1, 2)]
    second: LiveServer | None = None
    try:
        with first.client() as c:
            wait_until(lambda: sum(n.state == "UP" for n in c.nodes()) == 2, message="agents")
        job_id = submit(first, tmp_path, code=5)
        pid = second_task(tmp_path)
        first._agents.clear()  # the agents, the batch script, srun and the step run on
        first.stop()
        second = LiveServer(data, port=first.port, config_overrides={"kill_wait_seconds": 2})
        second.token = first.token
        second.start()
        assert alive(pid)
        (tmp_path / "go").touch()
        wait_until(lambda: state(second, job_id) == "COMPLETED", 60, message="the job's end")
        out = (tmp_path / f"slurm-{job_id}.out").read_text()
        assert "done 1" in out and "done 0" in out, out
        assert "srun exit=5" in out, out  # srun followed the step across the restart
        assert sacct_step(second, job_id) == f"{job_id}.0|FAILED|5:0"
    finally:
        for agent in agents:
            stop_process(agent)
        first.end_fork_servers()
        if second is not None:
            second.stop()
