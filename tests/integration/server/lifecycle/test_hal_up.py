"""`hal up` as a user starts it: refusals before anything starts, the URL and the agents' token."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import HTTPServer
from pathlib import Path

import pytest
from up_process import AnswersEverything, agents_of, start_up, stop_up

from hal.testing import http
from hal.testing.live import free_port

pytestmark = pytest.mark.live  # `hal up` and its agents, in subprocesses


@pytest.mark.parametrize("command", ["up", "server"])
def test_a_port_in_use_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    """A port another program holds (a forgotten `hal up`, a web server): `hal up` said
    "HAL is up" from that program's answer, sent its agents there and stored a token for
    its URL; `hal server` ended with uvicorn's log and exit 3. Now both refuse before
    anything starts, naming the port."""
    home, data = tmp_path / "home", tmp_path / "data"
    other = HTTPServer(("127.0.0.1", 0), AnswersEverything)
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
        r = http.get(url + "/v1/users", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 403
        assert "local-agents's token is an agent token" in r.json()["detail"]
        (local,) = [u for u in client.users() if u.name == "local-agents"]
        assert (local.agent, local.admin, local.nodes) == (True, False, "")
    finally:
        stop_up(up, client, data)
