"""Servers that know each other (``server_peers``, docs/admin/failover.md): each server of
a PostgreSQL database writes its row and reads the others' every few seconds, so a
client or an agent given ONE server's address learns the others (``X-HAL-Servers``,
``GET /v1/ha``'s ``peers``) and follows a takeover. Here two real ``hal server``
processes on the real PostgreSQL: ``hal`` commands and an agent are given the first
address only; the first is killed (kill -9); the next command reaches the second, and the
agent syncs with it and runs a job it submitted. The table's rules (a row not refreshed
is not live, the new leader removes its dead predecessor's row, a clean exit removes its
own) are checked on the database directly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import text

from hal.bench.failover import ServerProcess, leader_and_standby
from hal.bench.scale import make_tokens
from hal.state.peers import LIVE_S, beat, remove
from hal.state.store import SqlStateStore
from hal.testing import http
from hal.testing.live import stop_process, wait_until

pytestmark = pytest.mark.live  # starts `hal server` and `hal agent` processes

PY = sys.executable


def test_a_row_not_refreshed_is_not_live_and_a_leader_clears_its_predecessors(
    pg_url: str,
) -> None:
    store = SqlStateStore(pg_url)
    store.migrate()
    try:
        with store.engine.begin() as conn:
            assert beat(conn, "old:1", "http://old:8470", "leader") == ()
            seen = beat(conn, "b:2", "http://b:8470", "standby")
            assert [(p.server, p.url, p.role) for p in seen] == [
                ("old:1", "http://old:8470", "leader")
            ]
            beat(conn, "c:3", "http://c:8470", "standby")
            # c's heartbeat stops: once older than LIVE_S it is not listed
            conn.execute(
                text("UPDATE server_peers SET heartbeat = heartbeat - :s WHERE id = 'c:3'"),
                {"s": LIVE_S + 1},
            )
            assert [p.server for p in beat(conn, "b:2", "http://b:8470", "standby")] == ["old:1"]
        with store.engine.begin() as conn:
            # b takes the lead: the old leader's row goes (it never leads again by that name)
            assert beat(conn, "b:2", "http://b:8470", "leader") == ()
            rows = conn.execute(text("SELECT id, role FROM server_peers ORDER BY id")).all()
            assert [tuple(r) for r in rows] == [("b:2", "leader"), ("c:3", "standby")]
            remove(conn, "b:2")
            left = conn.execute(text("SELECT id FROM server_peers")).scalars().all()
            assert left == ["c:3"]
    finally:
        store.close()


@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Iterator[tuple[list[ServerProcess], str, str]]:
    """Two servers on ``pg_url``, the leader first; the admin's and the agents' tokens."""
    admin, agent = make_tokens(pg_url, "alice", "agents")
    with leader_and_standby(
        lambda: ServerProcess(pg_url, tmp_path / "s0"),
        lambda: ServerProcess(pg_url, tmp_path / "s1"),
    ) as servers:
        yield servers, admin, agent


def ha(url: str) -> dict[str, object]:
    try:
        return dict(http.get(url + "/v1/ha", timeout=2).json())
    except (httpx.HTTPError, ValueError):
        return {}


def peer_urls(url: str) -> list[str]:
    peers = ha(url).get("peers")
    return [str(p["url"]) for p in peers] if isinstance(peers, list) else []


def test_a_command_and_an_agent_given_one_address_follow_the_takeover(
    pair: tuple[list[ServerProcess], str, str], tmp_path: Path, pg_url: str
) -> None:
    servers, admin, agent_token = pair
    first, second = (s.url for s in servers)
    # each server lists both, the leader first, within a few heartbeats
    wait_until(
        lambda: peer_urls(first) == peer_urls(second) == [first, second],
        timeout=30,
        message="both servers' /v1/ha to list both, the leader first",
    )
    answer = http.get(first + "/v1/ha", timeout=5)
    assert answer.headers["x-hal-servers"] == f"{first},{second}"
    assert answer.json()["role"] == "leader" and answer.json()["leader_url"] == first

    env = {
        **os.environ,
        "HAL_URL": first,  # the one address every command and the agent is given
        "HAL_TOKEN": admin,
        "HAL_FAILOVER_TIMEOUT": "60",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }

    def hal(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "hal.cli.main", *args],
            env=env,
            cwd=tmp_path,  # (the jobs' output files)
            text=True,
            capture_output=True,
            timeout=120,
            check=False,
        )

    def state(job: str) -> str:
        done = hal("squeue", "--states=all", "-h", "-o", "%i %T")
        found = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return found.get(job, "") if done.returncode == 0 else ""

    with open(tmp_path / "agent.log", "ab") as log:
        agent = subprocess.Popen(
            [
                *(PY, "-m", "hal.cli.main", "agent", "--server", first),
                *("--name", "node1", "--cpus", "1", "--memory", "1G"),
                *("--state-dir", str(tmp_path / "agent"), "--unknown-users-as-agent"),
            ],
            env={**env, "HAL_TOKEN": agent_token},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        before = hal("sbatch", "--parsable", "--wrap", "true")
        assert before.returncode == 0, before.stderr
        # (the job ran: the agent synced with the first since it named both servers)
        wait_until(
            lambda: state(before.stdout.strip()) == "COMPLETED",
            timeout=90,
            interval=0.5,
            message="a job to run on the agent given the first address",
        )
        kept = json.loads((tmp_path / "cache" / "hal" / "leader.json").read_text())
        assert kept["learned"] == {first: [second]}

        killed = time.monotonic()
        os.kill(servers[0].proc.pid, signal.SIGKILL)
        servers[0].proc.wait(10)
        after = hal("sbatch", "--parsable", "--wrap", "true")
        reached = time.monotonic() - killed
        assert after.returncode == 0, after.stderr
        print(f"from kill -9 to the next command's answer, given the dead address: {reached:.2f} s")
        assert ha(second)["role"] == "leader"
        wait_until(
            lambda: state(after.stdout.strip()) == "COMPLETED",
            timeout=90,
            interval=0.5,
            message="the agent to sync with the new leader and run the job",
        )
        # the new leader dropped its dead predecessor's row: it lists itself alone
        wait_until(
            lambda: peer_urls(second) == [second],
            timeout=20,
            message="the new leader to forget the killed one",
        )
    finally:
        stop_process(agent)
    stop_process(servers[1].proc)  # a clean exit: its row removed
    with psycopg.connect(pg_url) as conn:
        left = conn.execute("SELECT id FROM server_peers").fetchall()
    assert left == [], left
