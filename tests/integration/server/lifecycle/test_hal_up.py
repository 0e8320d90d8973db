"""`hal up` as a user runs it: a local cluster that stops with it, whatever stopped it,
its running jobs with it (or, with --keep-jobs, adopted at the next start), and local
agents that split the host rather than each offering all of it."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import httpx
import psutil
import pytest

from hal.cli.local_stop import STOPPED_BY
from hal.client import HalClient
from hal.testing.live import free_port, stop_process, wait_until
from hal.wire.jobs import JobSubmit

pytestmark = pytest.mark.live  # `hal up` and its agents, in subprocesses


def agents_of(data: Path) -> list[psutil.Process]:
    """The running `hal agent` processes whose state directory is under ``data``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "agent" not in cmd:
            continue
        if any(arg.startswith(str(data)) for arg in cmd) and "hal.cli.main" in cmd:
            found.append(proc)
    return found


ONE_AGENT = ("--agents", "1", "--cpus-per-agent", "1")


def start_up(
    data: Path,
    port: int,
    home: Path,
    host: str = "127.0.0.1",
    log: Path | None = None,
    agents: Sequence[str] = ONE_AGENT,
    out: Path | None = None,
) -> tuple[subprocess.Popen[bytes], HalClient]:
    """`hal up` with ``agents``' options (and any other), stderr to ``log`` and stdout
    (its banner) to ``out``; returned once node1 is up."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env.pop("HAL_TOKEN", None)
    args = ["--data-dir", str(data), "--port", str(port), *agents, "--host", host]
    up = subprocess.Popen(
        [sys.executable, "-m", "hal.cli.main", "up", *args],
        env=env,
        stdout=subprocess.DEVNULL if out is None else out.open("wb"),
        stderr=subprocess.DEVNULL if log is None else log.open("wb"),
    )
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    credentials = home / ".config" / "hal" / "credentials.json"

    def up_with_node() -> bool:
        assert up.poll() is None, "hal up stopped"
        try:
            token = json.loads(credentials.read_text())[url]["token"]
            with HalClient(url, token) as c:
                return any(n.name == "node1" and n.state == "UP" for n in c.nodes())
        except Exception:
            return False

    wait_until(up_with_node, 60, 0.2, message="hal up and its agent")
    return up, HalClient(url, json.loads(credentials.read_text())[url]["token"])


def stop_up(up: subprocess.Popen[bytes], client: HalClient, data: Path) -> None:
    """End what ``start_up`` started: the client, `hal up`, and any agent left."""
    client.close()
    stop_process(up)
    for agent in agents_of(data):
        agent.kill()


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


class _AnswersEverything(http.server.BaseHTTPRequestHandler):
    """Another program on the port: it answers 200 to any GET, /healthz included."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize("command", ["up", "server"])
def test_a_port_in_use_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    """A port another program holds (a forgotten `hal up`, a web server): `hal up` said
    "HAL is up" from that program's answer, sent its agents there and stored a token for
    its URL; `hal server` ended with uvicorn's log and exit 3. Now both refuse before
    anything starts, naming the port."""
    home, data = tmp_path / "home", tmp_path / "data"
    other = http.server.HTTPServer(("127.0.0.1", 0), _AnswersEverything)
    port = other.server_address[1]
    threading.Thread(target=other.serve_forever, daemon=True).start()
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    args = [command, "--data-dir", str(data), "--port", str(port)]
    if command == "up":
        args += ["--agents", "1", "--cpus-per-agent", "1"]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hal.cli.main", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        other.shutdown()
        other.server_close()
        for agent in agents_of(data):
            agent.kill()
    assert done.returncode == 5, done.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "Traceback" not in done.stderr
    assert "HAL is up" not in done.stdout
    assert not (home / ".config" / "hal" / "credentials.json").exists()


def test_a_second_hal_up_on_the_same_state_is_refused(tmp_path: Path) -> None:
    """`hal up` in a second terminal (the first forgotten) on the same state directory:
    it ran a second control plane on the same SQLite database, two schedulers over the
    same jobs, and its agents died on the first's locked state directories. Now it stops
    at once, naming the running one; the first goes on serving."""
    data, home, port = tmp_path / "data", tmp_path / "home", free_port()
    up, client = start_up(data, port, home)
    try:
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
        args = ["--data-dir", str(data), "--port", str(free_port()), "--agents", "1"]
        second = subprocess.run(
            [sys.executable, "-m", "hal.cli.main", "up", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 5, second.stderr
        assert f"another HAL server (pid {up.pid} on " in second.stderr
        assert "HAL is up" not in second.stdout
        assert len(agents_of(data)) == 1
        assert [n.name for n in client.nodes()] == ["node1"]
    finally:
        stop_up(up, client, data)


def test_a_read_only_database_is_named_before_anything_starts(tmp_path: Path) -> None:
    """The state's database file read-only (a root-owned file after `sudo hal up`, a
    read-only mount): `hal up` ended in SQLAlchemy's traceback. Now one line says which
    file and what to do, with the exit code of a service unavailable."""
    from hal.server.control_plane import sqlite_url
    from hal.state.store import SqlStateStore

    if subprocess.run(["unshare", "-m", "true"], check=False).returncode != 0:
        pytest.skip("mounting a file read-only needs `unshare -m` (root)")
    data, home = tmp_path / "data", tmp_path / "home"
    store = SqlStateStore(sqlite_url(data))
    store.migrate()
    store.close()
    db = data / "hal.db"
    up = f"{sys.executable} -m hal.cli.main up --data-dir {data} --port {free_port()} --agents 0"
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount --bind {db} {db} && mount -o remount,ro,bind {db} && exec {up}",
        ],
        env={**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 6, done.stderr
    assert done.stderr.startswith(f"hal: error: the database sqlite:///{db} is unavailable: ")
    assert "the database file is read-only" in done.stderr and "Traceback" not in done.stderr


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


def test_an_ipv6_host_gives_a_url_clients_and_agents_can_use(tmp_path: Path) -> None:
    """`hal up --host ::1` built the URL http://::1:8470, which httpx cannot parse: a
    traceback before any agent started. IPv6 addresses go in brackets."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    data, home = tmp_path / "data", tmp_path / "home"
    up, client = start_up(data, free_port(), home, host="::1")  # waits for node1 UP
    try:
        assert [n.name for n in client.nodes()] == ["node1"]
    finally:
        stop_up(up, client, data)


def test_hal_up_gives_its_agents_an_agent_token_not_the_admins(tmp_path: Path) -> None:
    """`hal up` started its agents with the local administrator's token in HAL_TOKEN:
    whatever read an agent's environment (a job of the same Unix user) administered the
    cluster. Now they hold an agent token (user local-agents, new at each start), which
    the agent channel accepts and every other route refuses."""
    data, home, port = tmp_path / "data", tmp_path / "home", free_port()
    up, client = start_up(data, port, home)  # waits for node1 UP: its token works
    try:
        (agent,) = agents_of(data)
        token = agent.environ()["HAL_TOKEN"]
        url = f"http://127.0.0.1:{port}"
        credentials = json.loads((home / ".config" / "hal" / "credentials.json").read_text())
        assert token != credentials[url]["token"]
        r = httpx.get(url + "/v1/users", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 403
        assert "local-agents's token is an agent token" in r.json()["detail"]
        (local,) = [u for u in client.users() if u.name == "local-agents"]
        assert (local.agent, local.admin, local.nodes) == (True, False, "")
    finally:
        stop_up(up, client, data)


def wait_for_descendant(up: subprocess.Popen[bytes], text: str) -> list[psutil.Process]:
    """Every process below `hal up` (agents, their fork servers, the jobs' step
    supervisors and processes), once one whose command line holds ``text`` runs."""

    def below() -> list[psutil.Process]:
        return psutil.Process(up.pid).children(recursive=True)

    def found() -> bool:
        with contextlib.suppress(psutil.Error):
            return any(text in " ".join(p.cmdline()) for p in below())
        return False

    wait_until(found, 30, 0.1, message=f"a process running {text}")
    return below()


def _job(script: str, workdir: Path, **fields: object) -> JobSubmit:
    return JobSubmit(script=f"#!/bin/sh\n{script}\n", workdir=str(workdir), **fields)  # type: ignore[arg-type]


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
        running = client.submit(_job("sleep 3131", tmp_path)).job_id
        wait_until(lambda: client.job(running).state == "RUNNING", 30, message="the job to run")
        queued = client.submit(_job("true", tmp_path)).job_id  # the node's one CPU is taken
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
        job = client.submit(_job(f"while [ ! -e {go} ]; do sleep 0.2; done", tmp_path)).job_id
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
        job = client.submit(_job(f"nproc > {seen}", tmp_path, cpus_per_task=1)).job_id
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
