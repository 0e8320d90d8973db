"""`hal up` as a user stops it: a local cluster that stops with it, whatever stopped it,
its running jobs with it (or, with --keep-jobs, adopted at the next start)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from up_process import ONE_AGENT, agents_of, job_submit, start_up, stop_up, wait_for_descendant

from hal.cli.local_stop import STOPPED_BY
from hal.testing.live import free_port, stop_process, wait_until
from hal.wire.jobs import JobSubmit

pytestmark = pytest.mark.live  # `hal up` and its agents, in subprocesses


def test_a_killed_hal_up_leaves_no_agent_running(tmp_path: Path) -> None:
    """SIGKILL `hal up` (or a crash): its agents stop too, and the next `hal up` runs its
    own instead of finding the state directories locked by the orphans."""
    data, home, port = tmp_path / "data", tmp_path / "home", free_port()
    up, client = start_up(data, port, home)
    client.close()
    try:
        assert len(agents_of(data)) == 1
        up.send_signal(signal.SIGKILL)
        up.wait(10)
        wait_until(lambda: not agents_of(data), 20, 0.1, message="the orphaned agent to stop")
        up, client = start_up(data, port, home)
        client.close()
        up.send_signal(signal.SIGINT)  # Ctrl-C
        assert up.wait(30) == 0
        assert not agents_of(data)
    finally:
        if up.poll() is None:
            stop_process(up)
        for agent in agents_of(data):
            agent.kill()


def test_ctrl_c_during_start_up_stops_cleanly_and_keeps_the_state(tmp_path: Path) -> None:
    """Ctrl-C while `hal up` is still starting (its control plane up, not yet answering)
    ended in "RuntimeError: the control plane stopped during start-up" and its traceback
    (when the signal beats the first answer: test_local_up pins that moment). Now it
    stops like a Ctrl-C later on: exit 0, no agent left, and the next `hal up` resumes
    the same state (a held job is still there). SIGINT as from a terminal: a child of
    a non-interactive shell or of pytest may inherit it ignored."""
    data, home, port = tmp_path / "data", tmp_path / "home", free_port()
    up, client = start_up(data, port, home)
    try:
        job = client.submit(JobSubmit(script="#!/bin/sh\ntrue\n", hold=True)).job_id
    finally:
        client.close()
        stop_process(up)
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    args = ["--data-dir", str(data), "--port", str(port), "--agents", "1", "--log-format"]
    starting = subprocess.Popen(
        [sys.executable, "-m", "hal.cli.main", "up", *args, "console"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    assert starting.stdout is not None
    lines = []
    for line in starting.stdout:
        lines.append(line)
        if "control plane started" in line:  # its lifespan done, /healthz not yet polled
            starting.send_signal(signal.SIGINT)
            break
    output = "".join(lines) + starting.communicate(timeout=30)[0]
    assert starting.returncode == 0, output
    assert "Traceback" not in output
    wait_until(lambda: not agents_of(data), 20, 0.1, message="no agent of the stopped hal up")
    up, client = start_up(data, port, home)
    try:
        assert client.job(job).state == "PENDING"
    finally:
        stop_up(up, client, data)


def test_ctrl_c_stops_the_running_jobs_with_the_cluster_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    """Ctrl-C on `hal up` left its running jobs, and the step supervisors ("fork
    servers") above them, running on, re-parented to init, without a word. Now it
    cancels them, waits for their ends, says so, and no process of theirs survives; a
    pending job stays queued (the stop starts no other job) and says so too."""
    data, home, port, log = tmp_path / "data", tmp_path / "home", free_port(), tmp_path / "up.log"
    up, client = start_up(data, port, home, log=log)
    try:
        running = client.submit(job_submit("sleep 3131", tmp_path)).job_id
        wait_until(lambda: client.job(running).state == "RUNNING", 30, message="the job to run")
        queued = client.submit(job_submit("true", tmp_path)).job_id  # the node's one CPU is taken
        processes = wait_for_descendant(up, "sleep 3131")
        up.send_signal(signal.SIGINT)
        assert up.wait(90) == 0
        left = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, [p.cmdline() for p in left]
        said = log.read_text()
        assert (
            f"hal: stopped 1 running job(s) with the cluster ({running}): CANCELLED by "
            f"{STOPPED_BY}\n"
        ) in said
        assert "hal: 1 pending job(s) stay queued; the next `hal up` runs them\n" in said
    finally:
        stop_up(up, client, data)
    up, client = start_up(data, port, home)
    try:
        ended = client.job(running)
        assert (ended.state, ended.cancelled_by) == ("CANCELLED", STOPPED_BY)
        assert client.job(queued).state in ("PENDING", "RUNNING", "COMPLETED")
    finally:
        stop_up(up, client, data)


def test_keep_jobs_leaves_them_running_and_the_next_hal_up_adopts_them(tmp_path: Path) -> None:
    """`hal up --keep-jobs`: at Ctrl-C the job runs on (said so), and the next `hal up`
    on the state directory names it on its banner and reports its end."""
    data, home, port, log = tmp_path / "data", tmp_path / "home", free_port(), tmp_path / "up.log"
    go, out = tmp_path / "go", tmp_path / "banner.txt"
    keep = (*ONE_AGENT, "--keep-jobs")
    up, client = start_up(data, port, home, log=log, agents=keep)
    job_processes: list[psutil.Process] = []
    try:
        job = client.submit(job_submit(f"while [ ! -e {go} ]; do sleep 0.2; done", tmp_path)).job_id
        wait_until(lambda: client.job(job).state == "RUNNING", 30, message="the job to run")
        shell = f"{data}/agents/node1/jobs/{job}.0/slurm_script"
        job_processes = [
            p for p in wait_for_descendant(up, shell) if shell in " ".join(p.cmdline())
        ]
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
        assert not agents_of(data)
        assert all(p.is_running() for p in job_processes)  # the job runs on
        assert (
            f"hal: 1 job(s) keep running ({job}); the next `hal up` on {data} adopts them\n"
        ) in log.read_text()
    finally:
        stop_up(up, client, data)
    up, client = start_up(data, port, home, agents=keep, out=out)
    try:
        wait_until(lambda: "adopted:" in out.read_text(), 30, message="the banner")
        assert f"1 job(s) kept running since the last stop ({job})" in out.read_text()
        go.touch()
        wait_until(lambda: client.job(job).state == "COMPLETED", 60, message="the adopted end")
    finally:
        stop_up(up, client, data)
        for p in job_processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
