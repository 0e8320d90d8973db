"""Crashed agents, silent nodes and restarted servers lose no job and run none twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from hal.agent.procfs import processes_of
from hal.client.sync import HalClient
from hal.testing.live import LiveServer, stop_process, wait_until
from hal.wire.jobs import JobSubmit
from hal.wire.submit import SubmitResult


def script(body: str) -> str:
    return "#!/bin/sh\n" + body + "\n"


def state(server: LiveServer, job_id: int) -> str:
    with server.client() as c:
        return c.job(job_id).state


def test_agent_restart_neither_orphans_nor_duplicates(tmp_path: Path) -> None:
    """SIGKILL the agent while its job runs; a new agent on the same state directory
    re-adopts the job, which finishes once with its real exit code."""
    out = tmp_path / "out.txt"
    with LiveServer(tmp_path / "srv") as server:
        agent = server.start_agent("node1", cpus=2)
        with server.client() as c:
            wait_until(lambda: any(n.state == "UP" for n in c.nodes()), message="agent up")
            jid = c.submit(
                JobSubmit(
                    script=script(f"echo run >> {out}; sleep 4; exit 3"), workdir=str(tmp_path)
                )
            ).job_id
            wait_until(out.exists, message="the job to start")
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        again = server.start_agent("node1", cpus=2)
        try:
            wait_until(
                lambda: state(server, jid) not in ("RUNNING", "PENDING"),
                timeout=60,
                message="the job to end",
            )
            with server.client() as c:
                info = c.job(jid)
            assert (info.state, info.exit_code, info.restarts) == ("FAILED", 3, 0)
            assert out.read_text() == "run\n", "the job ran twice"
        finally:
            stop_process(again)


# a node silent for 3 s is declared down
QUICK_TIMEOUT: dict[str, object] = {"node_timeout_seconds": 3.0, "heartbeat_interval_seconds": 0.5}


def _two_running_jobs(
    server: LiveServer, c: HalClient, tmp_path: Path
) -> tuple[SubmitResult, SubmitResult]:
    """Once node1 is up: a requeueable and a --no-requeue job, both running there."""
    wait_until(lambda: any(n.state == "UP" for n in c.nodes()), message="agent up")
    keep = c.submit(JobSubmit(script=script("sleep 30"), workdir=str(tmp_path)))
    lose = c.submit(JobSubmit(script=script("sleep 30"), workdir=str(tmp_path), requeue=False))
    wait_until(
        lambda: {state(server, keep.job_id), state(server, lose.job_id)} == {"RUNNING"},
        message="both jobs to run",
    )
    return keep, lose


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _lost(server: LiveServer, c: HalClient, keep: SubmitResult, lose: SubmitResult) -> None:
    """The node's jobs were lost: the --no-requeue one NODE_FAIL, the other requeued."""
    wait_until(lambda: state(server, lose.job_id) == "NODE_FAIL", timeout=20, message="NODE_FAIL")
    requeued = c.job(keep.job_id)
    assert requeued.state == "PENDING" and requeued.restarts == 1


def test_jobs_whose_supervisor_is_killed_end_as_node_fail(tmp_path: Path) -> None:
    """SIGKILL the step supervisors (slurmstepd's part) of two running jobs: the agent
    reports NODE_FAIL, so the requeueable job goes back to the queue and the --no-requeue
    one ends NODE_FAIL, as slurmctld treats a batch job whose slurmstepd is gone; the
    node stays UP."""
    with LiveServer(tmp_path / "srv") as server:
        agent = server.start_agent("node1", cpus=2)
        try:
            with server.client() as c:
                keep, lose = _two_running_jobs(server, c, tmp_path)
                jobs = server.data_dir / "agents" / "node1" / "jobs"
                for job in (keep, lose):
                    # RUNNING on the server is sent to the node: wait for the job's start
                    started = jobs / f"{job.job_id}.0" / "started"
                    wait_until(started.exists, message="the job to start on the node")
                    supervisor = (jobs / f"{job.job_id}.0" / "supervisor").read_text()
                    os.kill(int(supervisor.split()[0]), signal.SIGKILL)
                wait_until(lambda: state(server, lose.job_id) == "NODE_FAIL", message="NODE_FAIL")
                # (each job's end comes in its own report: the other's may come a sync later)
                wait_until(lambda: c.job(keep.job_id).restarts == 1, message="the requeue")
                requeued = c.job(keep.job_id)
                assert (requeued.restarts, requeued.requeued_after) == (1, "NODE_FAIL")
                assert requeued.state in ("PENDING", "RUNNING")  # and may run again at once
                assert c.node("node1").state != "DOWN"
                c.cancel(keep.job_id)
        finally:
            stop_process(agent)


def test_a_supervisor_killed_before_it_starts_the_job_ends_it_as_node_fail(
    tmp_path: Path,
) -> None:
    """The supervisor is SIGKILLed while its job is still opening its output file (a FIFO
    nobody reads, so the open blocks): the job did not fail to launch, its node lost it —
    NODE_FAIL, as when the supervisor is killed later (it was FAILED, "the step supervisor
    ended before starting the job"), and the process left blocked in the open is ended."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with LiveServer(tmp_path / "srv") as server:
        agent = server.start_agent("node1", cpus=2)
        try:
            with server.client() as c:
                wait_until(lambda: any(n.state == "UP" for n in c.nodes()), message="agent up")
                job = c.submit(
                    JobSubmit(
                        script=script("sleep 30"),
                        workdir=str(tmp_path),
                        stdout=str(fifo),
                        requeue=False,
                    )
                )
                recorded = server.data_dir / "agents" / "node1" / "jobs" / f"{job.job_id}.0"
                wait_until((recorded / "supervisor").exists, message="the supervisor")
                supervisor = int((recorded / "supervisor").read_text().split()[0])
                assert not (recorded / "started").exists()
                os.kill(supervisor, signal.SIGKILL)
                wait_until(lambda: state(server, job.job_id) != "RUNNING", message="its end")
                assert c.job(job.job_id).state == "NODE_FAIL"
                # the job's process, blocked in open(2), was in the supervisor's session
                assert processes_of(supervisor, "HAL_NO_SUCH=1") == [], "left running"
        finally:
            stop_process(agent)


def test_silent_node_goes_down_and_its_job_is_requeued(tmp_path: Path) -> None:
    """An agent that stops heartbeating: node DOWN, its requeueable job back in the queue,
    its --no-requeue job NODE_FAIL."""
    with LiveServer(tmp_path / "srv", config_overrides=QUICK_TIMEOUT) as server:
        agent = server.start_agent("node1", cpus=2)
        with server.client() as c:
            keep, lose = _two_running_jobs(server, c, tmp_path)
            agent.send_signal(signal.SIGSTOP)  # alive but silent, like a hung node
            try:
                wait_until(
                    lambda: c.node("node1").state == "DOWN",
                    timeout=30,
                    message="the node to be declared down",
                )
                _lost(server, c, keep, lose)
                assert c.node("node1").reason == "Not responding"
            finally:
                agent.send_signal(signal.SIGCONT)
            # the agent comes back: it re-registers, is told to kill the stale processes,
            # and the requeued job runs again (attempt 1)
            wait_until(
                lambda: c.node("node1").state == "UP", timeout=30, message="the node to come back"
            )
            wait_until(
                lambda: state(server, keep.job_id) == "RUNNING",
                timeout=30,
                message="the requeued job to run again",
            )
            c.cancel(keep.job_id)
        stop_process(agent)


def test_a_job_that_loses_one_of_its_nodes_is_stopped_on_its_batch_node(
    tmp_path: Path,
) -> None:
    """A two-node job whose second node falls silent ends NODE_FAIL, and its batch
    script on the first node, alive, is stopped there, as Slurm ends a job on all its
    nodes. Before, it ran on to its end, untracked, on CPUs given to other jobs."""
    with LiveServer(tmp_path / "srv", config_overrides=QUICK_TIMEOUT) as server:
        first = server.start_agent("node1", cpus=2)
        second = server.start_agent("node2", cpus=2)
        ticks = tmp_path / "ticks"
        body = f"while :; do echo tick >> {ticks}; sleep 0.2; done"
        try:
            with server.client() as c:
                wait_until(lambda: len(c.nodes()) == 2, message="both agents up")
                job = c.submit(
                    JobSubmit(
                        script=script(body),
                        workdir=str(tmp_path),
                        nodes_min=2,
                        requeue=False,
                        nodelist=["node1", "node2"],
                    )
                )
                wait_until(ticks.exists, message="the script to run on node1")
                second.send_signal(signal.SIGSTOP)
                try:
                    wait_until(
                        lambda: state(server, job.job_id) == "NODE_FAIL",
                        timeout=30,
                        message="NODE_FAIL",
                    )

                    def stopped() -> bool:
                        before = ticks.read_text()
                        threading.Event().wait(1.0)
                        return ticks.read_text() == before

                    wait_until(stopped, timeout=20, message="the script on node1 to stop")
                finally:
                    second.send_signal(signal.SIGCONT)
        finally:
            stop_process(first)
            stop_process(second)


def test_a_node_set_down_loses_its_jobs_at_once_and_stays_down_over_a_restart(
    tmp_path: Path,
) -> None:
    """An operator sets node1 DOWN while two jobs run there: as Slurm's, they are lost at
    once (the requeueable one back in the queue, the --no-requeue one NODE_FAIL) and their
    processes end. The reason is as typed (`sinfo -R`), and the node stays DOWN with it
    when its agent dies and comes back. (Before, the jobs ran on, on a DOWN node.)"""
    with LiveServer(tmp_path / "srv", config_overrides=QUICK_TIMEOUT) as server:
        agent = server.start_agent("node1", cpus=2)
        with server.client() as c:
            keep, lose = _two_running_jobs(server, c, tmp_path)
            jobs = server.data_dir / "agents" / "node1" / "jobs"
            for job in (keep, lose):
                wait_until((jobs / f"{job.job_id}.0" / "started").exists, message="started")
            pids = [
                int((jobs / f"{j.job_id}.0" / "supervisor").read_text().split()[0])
                for j in (keep, lose)
            ]
            c.update_node("node1", "DOWN", "bad DIMM")
            _lost(server, c, keep, lose)
            wait_until(lambda: not any(_alive(p) for p in pids), 15, message="their ends")
            node = c.node("node1")
            assert (node.state, node.reason, node.cpus_alloc) == ("DOWN", "bad DIMM", 0)
            assert state(server, keep.job_id) == "PENDING"  # (not on a DOWN node)
            reasons = server.cli("sinfo", "-R", "-h", "-o", "%E|%u").stdout.strip()
            assert reasons.startswith("bad DIMM|")
            agent.send_signal(signal.SIGKILL)
            agent.wait(10)
            server.start_agent("node1", cpus=2)
            wait_until(lambda: "node1" in server.cli("sinfo", "-N", "-h").stdout, message="back")
            time.sleep(1)
            node = c.node("node1")
            assert (node.state, node.reason) == ("DOWN", "bad DIMM")


def test_server_restart_resumes_queue_and_running_jobs(tmp_path: Path) -> None:
    """Stop the control plane while a job runs and others wait; a new server on the same
    database picks up where it left off and every job finishes exactly once."""
    marks = tmp_path / "marks"
    marks.mkdir()
    data = tmp_path / "srv"
    first = LiveServer(data)
    first.start()
    agent = first.start_agent("node1", cpus=1)
    with first.client() as c:
        wait_until(lambda: any(n.state == "UP" for n in c.nodes()), message="agent up")
        ids = [
            c.submit(
                JobSubmit(
                    script=script(f"touch {marks}/$SLURM_JOB_ID; sleep 1"), workdir=str(tmp_path)
                )
            ).job_id
            for _ in range(3)
        ]
        wait_until(lambda: state(first, ids[0]) == "RUNNING", message="the first job")
    first._agents.remove(agent)  # keep the agent running across the server restart
    first.stop()
    second = LiveServer(data, port=first.port)
    second.token = first.token
    second.start()
    try:
        wait_until(
            lambda: all(state(second, j) == "COMPLETED" for j in ids),
            timeout=60,
            message="every job to complete after the restart",
        )
        assert sorted(p.name for p in marks.iterdir()) == sorted(str(j) for j in ids)
        with second.client() as c:
            assert all(c.job(j).restarts == 0 for j in ids)
    finally:
        stop_process(agent)
        second.stop()


@pytest.mark.slow
def test_agents_come_back_within_the_node_timeout_after_a_long_server_outage(
    tmp_path: Path,
) -> None:
    """The control plane is away for 30 s; its agents back off meanwhile, but never
    longer than a third of the node timeout it gave them, so after its restart they
    register within its one timeout of grace: the node stays UP and its job runs on.
    Before, an agent waiting up to 30 s between tries behind a 6 s timeout was declared
    dead, and its job lost."""
    data = tmp_path / "srv"
    timeout = {"node_timeout_seconds": 6.0}
    first = LiveServer(data, config_overrides=timeout)
    first.start()
    agent = first.start_agent("node1", cpus=1)
    with first.client() as c:
        wait_until(lambda: any(n.state == "UP" for n in c.nodes()), message="agent up")
        job = c.submit(JobSubmit(script=script("sleep 120"), workdir=str(tmp_path))).job_id
        wait_until(lambda: state(first, job) == "RUNNING", message="the job")
    first._agents.remove(agent)
    first.stop()
    # the agent's tries meanwhile: 0.5, 1, 2, 2, 2... s apart (before: 0.4, 1.4, 3.4, 5.4,
    # 10.3, 23.3, 49.5 s after the stop, so the first after the restart came too late)
    threading.Event().wait(30.0)
    second = LiveServer(data, port=first.port, config_overrides=timeout)
    second.token = first.token
    second.start()
    try:
        with second.client() as c:
            wait_until(
                lambda: c.node("node1").state == "UP" and c.node("node1").reason == "",
                message="the agent to register",
            )
            threading.Event().wait(8.0)  # past the timeout of grace
            assert c.node("node1").state == "UP"
            assert (c.job(job).state, c.job(job).restarts) == ("RUNNING", 0)
            c.cancel(job)
    finally:
        stop_process(agent)
        second.stop()


def test_sbatch_wait_outlasts_a_server_restart(tmp_path: Path) -> None:
    """`sbatch --wait` keeps waiting while the control plane restarts (Slurm's sbatch
    retries "Currently unable to load job state information") and exits with the job's
    code, instead of failing a pipeline whose job ran on."""
    go = tmp_path / "go"
    data = tmp_path / "srv"
    first = LiveServer(data)
    first.start()
    agent = first.start_agent("node1", cpus=1)
    with first.client() as c:
        wait_until(lambda: any(n.state == "UP" for n in c.nodes()), message="agent up")
    body = f"while [ ! -e {go} ]; do sleep 0.1; done; exit 3"
    waiting = subprocess.Popen(
        [sys.executable, "-m", "hal.cli.main", "sbatch", "--wait", "--wrap", body],
        env={**first.env(), "HAL_RETRY_SECONDS": "0"},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running: LiveServer | None = first
    try:
        assert waiting.stdout is not None and waiting.stderr is not None
        job_id = int(waiting.stdout.readline().split()[-1])
        wait_until(lambda: state(first, job_id) == "RUNNING", message="the job to run")
        first._agents.remove(agent)  # the agent and its job run on across the restart
        first.stop()
        running = None
        # the waiting sbatch polls the stopped server at least once
        said = waiting.stderr.readline()
        assert "retrying" in said, (said, waiting.wait(10), waiting.stderr.read())
        second = running = LiveServer(data, port=first.port)
        second.token = first.token
        second.start()
        go.touch()
        assert waiting.wait(60) == 3, waiting.stderr.read()
        assert state(second, job_id) == "FAILED"
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait(5)
        stop_process(agent)
        first.end_fork_servers()  # the job, if the test failed before it ended
        if running is not None:
            running.stop()


def test_followed_events_go_on_across_a_server_restart(tmp_path: Path) -> None:
    """`hal events` follows the stream across a restart of the control plane: it takes it
    up again after the last event it printed, instead of ending (exit 0) as if there were
    nothing more, every later event lost to it."""
    data = tmp_path / "srv"
    first = LiveServer(data)
    first.start()
    follower = subprocess.Popen(
        [sys.executable, "-m", "hal.cli.main", "events"],
        env=first.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None and follower.stderr is not None
    out = follower.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(out.readline, "")))
    reader.start()
    running: LiveServer | None = first
    try:

        def submitted(server: LiveServer, name: str) -> int:
            with server.client() as c:
                job = JobSubmit(script=script("true"), workdir=str(tmp_path), name=name, hold=True)
                return c.submit(job).job_id

        def printed(job_id: int) -> bool:
            return any(json.loads(line)["job_id"] == job_id for line in list(lines))

        before = submitted(first, "before")
        wait_until(lambda: printed(before), message="the first event")
        first.stop()
        running = None
        second = running = LiveServer(data, port=first.port)
        second.token = first.token
        second.start()
        after = submitted(second, "after")
        wait_until(
            lambda: printed(after) or follower.poll() is not None,
            timeout=30,
            message="the event after the restart",
        )
        assert follower.poll() is None, ("the follower ended", lines, follower.stderr.read())
        ids = [json.loads(line)["id"] for line in lines]
        assert ids == sorted(set(ids)), "an event was printed twice or out of order"
    finally:
        follower.kill()
        follower.wait(5)
        reader.join(5)
        if running is not None:
            running.stop()
