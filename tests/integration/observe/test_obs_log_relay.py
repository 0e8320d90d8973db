"""``hal logs JOB [--follow]`` when the control plane cannot see the job's files.

The agent runs in its own mount namespace with a private tmpfs over the job's working
directory: the job writes its output there, and the server (this test process) sees only
the empty directory underneath — as on a cluster whose nodes have local scratch. The
output must come through the agent (ADR 0007). Skipped where mount namespaces are not
allowed (``unshare --mount``, or an unprivileged user namespace with ``--user``).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing import http
from hal.testing.live import LiveServer, stop_process, wait_until
from hal.wire.jobs import JobSubmit

NODE = "scratchnode"


def unshare_prefix() -> list[str]:
    prefix = ["unshare", "--mount", "--propagation", "private"]
    return prefix if os.geteuid() == 0 else ["unshare", "--user", "--map-current-user", *prefix[1:]]


def private_mount_works(probe: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe.mkdir(exist_ok=True)
    done = subprocess.run(
        [*unshare_prefix(), "sh", "-c", 'mount -t tmpfs tmpfs "$0" && touch "$0/x"', str(probe)],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return done.returncode == 0 and not (probe / "x").exists()


class Scratch:
    """A server plus one agent whose ``work`` directory is private to its namespace."""

    def __init__(self, live: LiveServer, work: Path, flags: Path) -> None:
        self.live = live
        self.work = work  # the jobs' workdir: a private tmpfs inside the agent's namespace
        self.flags = flags  # shared by both sides: how the test tells a job to go on
        self.agent: subprocess.Popen[bytes] | None = None

    def start_agent(self) -> None:
        live = self.live
        cmd = [
            *unshare_prefix(), "sh", "-c", 'mount -t tmpfs -o mode=1777 tmpfs "$0" && exec "$@"',
            str(self.work), sys.executable, "-m", "hal.cli.main", "agent", "--server", live.url,
            "--name", NODE, "--cpus", "2", "--memory", "1G",
            "--state-dir", str(live.data_dir / "agents" / NODE), "--unknown-users-as-agent",
        ]  # fmt: skip
        log = open(live.data_dir / f"agent-{NODE}.log", "ab")  # noqa: SIM115 - owned by proc
        self.agent = subprocess.Popen(
            cmd, env=live.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        with live.client() as c:
            wait_until(lambda: any(n.name == NODE and n.state == "UP" for n in c.nodes()), 30,
                       message=f"agent {NODE} to register")  # fmt: skip

    def stop_agent(self) -> None:
        if self.agent is not None:
            stop_process(self.agent)
            self.agent = None

    def submit(self, script: str) -> int:
        with self.live.client() as c:
            return c.submit(JobSubmit(script=script, workdir=str(self.work))).job_id

    def state(self, job_id: int) -> str:
        with self.live.client() as c:
            return c.job(str(job_id)).state


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scratch]:
    base = tmp_path_factory.mktemp("log-relay")
    if not private_mount_works(base / "probe"):
        pytest.skip("mount namespaces are not allowed here (unshare --mount)")
    work, flags = base / "work", base / "flags"
    work.mkdir()
    flags.mkdir()
    mp = pytest.MonkeyPatch()
    mp.setenv("HAL_OUTPUT_RELAY_TIMEOUT_S", "5")  # read by the server when it is built
    fast = {"node_timeout_seconds": 3.0, "heartbeat_interval_seconds": 1.0}
    live = LiveServer(base / "server", config_overrides=fast)
    try:
        live.start()
        mp.undo()
        s = Scratch(live, work, flags)
        s.start_agent()
        yield s
        s.stop_agent()
    finally:
        mp.undo()
        live.stop()


def hal_logs(live: LiveServer, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "hal.cli.main", "logs", *args], env=live.env(),
                          capture_output=True, timeout=120, check=False)  # fmt: skip


EXPECTED = b"start\n" + b"".join(b"%d\n" % i for i in range(1, 300_001)) + b"on stderr\n"


def test_logs_of_a_finished_job_come_from_its_agent(scratch: Scratch) -> None:
    """A 2 MB output (three 1 MiB relay reads) on a node whose disk the server cannot
    see: `hal logs` prints all of it, `--tail` the end, and the REST API says the bytes
    came from the agent."""
    job_id = scratch.submit("#!/bin/sh\necho start\nseq 1 300000\necho on stderr >&2\n")
    wait_until(lambda: scratch.state(job_id) == "COMPLETED", 60, 0.2, "the job to complete")
    assert not (scratch.work / f"slurm-{job_id}.out").exists()  # not on the server's side
    out = hal_logs(scratch.live, str(job_id))
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == EXPECTED
    tail = hal_logs(scratch.live, str(job_id), "--tail", "17")
    assert tail.stdout == EXPECTED[-17:]
    follow = hal_logs(scratch.live, str(job_id), "--follow")  # a finished job: ends by itself
    assert follow.returncode == 0 and follow.stdout == EXPECTED
    live = scratch.live
    auth = {"Authorization": f"Bearer {live.token}"}
    url = f"{live.url}/v1/jobs/{job_id}/output"
    with http.stream("GET", url, params={"tail_bytes": 10}, headers=auth, timeout=30) as r:
        assert r.status_code == 200 and r.headers["Hal-Output-Source"] == "agent"
        assert r.read() == EXPECTED[-10:]


def test_follow_streams_a_running_job_through_its_agent(scratch: Scratch) -> None:
    """`hal logs -f` prints the first line while the job still runs (it waits for the
    test's go-ahead, so nothing here depends on timing) and ends after the job did."""
    go = scratch.flags / "go"
    job_id = scratch.submit(
        f"#!/bin/sh\necho first\nwhile [ ! -e {go} ]; do sleep 0.1; done\necho last\n"
    )
    wait_until(lambda: scratch.state(job_id) == "RUNNING", 60, 0.2, "the job to start")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hal.cli.main", "logs", str(job_id), "--follow"],
        env=scratch.live.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = read_line(proc.stdout.fileno(), 60)
        assert first == b"first\n"
        assert scratch.state(job_id) == "RUNNING"  # streamed, not read after the end
        go.touch()
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    assert first + rest == b"first\nlast\n"
    assert scratch.state(job_id) == "COMPLETED"


def read_line(fd: int, timeout: float) -> bytes:
    """One line from a pipe, waiting at most ``timeout`` (a bound, not a measurement)."""
    got = b""
    deadline = time.monotonic() + timeout
    while not got.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"no line within {timeout} s (got {got!r})")
        byte = os.read(fd, 1)
        if not byte:
            break
        got += byte
    return got


def test_unknown_jobs_and_a_stopped_agent_say_what_to_do(scratch: Scratch) -> None:
    """Runs last: it stops the module's agent."""
    unknown = hal_logs(scratch.live, "999999")
    assert unknown.returncode != 0
    assert b"no job 999999: check the id with `hal squeue`" in unknown.stderr
    job_id = scratch.submit("#!/bin/sh\necho bye\n")
    wait_until(lambda: scratch.state(job_id) == "COMPLETED", 60, 0.2, "the job to complete")
    assert hal_logs(scratch.live, str(job_id)).stdout == b"bye\n"
    scratch.stop_agent()
    with scratch.live.client() as c:
        wait_until(lambda: any(n.name == NODE and n.state == "DOWN" for n in c.nodes()), 30,
                   0.2, f"{NODE} to go DOWN")  # fmt: skip
    down = hal_logs(scratch.live, str(job_id))
    assert down.returncode != 0 and down.stdout == b""
    message = down.stderr.decode()
    assert f"is on node {NODE}" in message and f"slurm-{job_id}.out" in message
    assert "whose agent is DOWN: start the agent there (`hal agent`)" in message
