"""A journaled HTC session outlives a takeover: two `hal server` processes on one
PostgreSQL with one journal directory (``HAL_HTC_JOURNAL_DIR``, shared storage at a
site), an agent given both. The leader, and with it its broker, is killed (kill -9)
while the session's tasks wait; a client given both addresses reattaches through the
new leader, whose broker reopens the session from its journal and runs what was left on
new worker jobs. Every task is counted once and every outcome reaches a client."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.bench.failover import ServerProcess, leader_and_standby
from hal.bench.scale import make_tokens
from hal.client import HalClient
from hal.htc import HtcClient
from hal.testing.live import stop_process, wait_until

pytestmark = pytest.mark.live  # starts `hal server` and `hal agent` processes

AFTER_FILE = "hal.htc.examples:after_file"


@pytest.fixture
def pair(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[list[ServerProcess], str, str]]:
    """Two servers on ``pg_url`` with one journal directory, the leader first; the
    admin's and the agents' tokens."""
    admin, agent = make_tokens(pg_url, "alice", "agents")
    monkeypatch.setenv("HAL_HTC_JOURNAL_DIR", str(tmp_path / "journals"))
    monkeypatch.setenv("HAL_FAILOVER_TIMEOUT", "60")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with leader_and_standby(
        lambda: ServerProcess(pg_url, tmp_path / "s0"),
        lambda: ServerProcess(pg_url, tmp_path / "s1"),
    ) as servers:
        yield servers, admin, agent


def start_agent(
    servers: list[ServerProcess], token: str, admin: str, tmp_path: Path
) -> subprocess.Popen[bytes]:
    """``hal agent`` given both servers, node1 with 2 CPUs, once it is UP."""
    both = ",".join(s.url for s in servers)
    with open(tmp_path / "agent.log", "ab") as log:
        agent = subprocess.Popen(
            [
                *(sys.executable, "-m", "hal.cli.main", "agent"),
                *(a for s in servers for a in ("--server", s.url)),
                *("--name", "node1", "--cpus", "2", "--memory", "2G"),
                *("--state-dir", str(tmp_path / "agent"), "--unknown-users-as-agent"),
            ],
            env={**os.environ, "HAL_URL": both, "HAL_TOKEN": token},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with HalClient(both, admin) as client:
            wait_until(
                lambda: any(n.name == "node1" and n.state == "UP" for n in client.nodes()),
                timeout=60,
                message="the agent to register",
            )
    except BaseException:
        stop_process(agent)
        raise
    return agent


def kill_leader_once_journaled(
    hc: HtcClient, session_id: str, tasks: int, leader: ServerProcess
) -> None:
    """Wait until the broker has accepted (and journaled) ``tasks`` tasks, then kill -9
    the leader, and with it its broker."""
    wait_until(
        lambda: hc.session(session_id).submitted == tasks,
        timeout=30,
        message="the broker to accept (and journal) every task",
    )
    os.kill(leader.proc.pid, signal.SIGKILL)
    leader.proc.wait(10)


@pytest.mark.timeout(600)  # worker jobs start slowly on a loaded machine
def test_a_journaled_session_is_reattached_through_the_new_leader(
    pair: tuple[list[ServerProcess], str, str], tmp_path: Path
) -> None:
    servers, admin, agent_token = pair
    both = ",".join(s.url for s in servers)
    agent = start_agent(servers, agent_token, admin, tmp_path)
    gate, open_gate = tmp_path / f"gate-{secrets.token_hex(4)}", tmp_path / "open"
    open_gate.touch()
    calls = [(str(open_gate), x) for x in range(20)] + [(str(gate), x) for x in range(20, 100)]
    try:
        with HtcClient(both, admin) as hc:
            s = hc.open_session(
                AFTER_FILE, max_workers=2, journal=True, worker_output=str(tmp_path / "w-%j.out")
            )
            # the gated tasks go in once the others are back: a worker runs its batch in
            # order, so an open task behind a gated one would wait for the gate too
            futures = s.submit_many(calls[:20])
            assert [f.result(180) for f in futures] == list(range(20))
            futures += s.submit_many(calls[20:])
            kill_leader_once_journaled(hc, s.id, 100, servers[0])
            wait_until(lambda: s.ended is not None, timeout=15, message="the broker to go")
            assert not any(f.done() and f.exception() is None for f in futures[20:])
            s.disconnect()
            wait_until(lambda: servers[1].role() == "leader", timeout=30, message="s1 to lead")
            gate.touch()

            again = hc.attach(s.id)  # through the new leader, which starts its broker
            after = {r.task_id: r.value for r in again.results(timeout=180)}
            assert set(after) >= {f.task_id for f in futures[20:]}
            by_id = {f.task_id: x for x, f in enumerate(futures)}
            assert all(after[t] == by_id[t] for t in after)
            assert again.close(30) == "DONE"
            info = hc.session(s.id)
            assert (info.submitted, info.completed, info.failed) == (100, 100, 0)
    finally:
        gate.touch()  # (a worker left waiting on it ends: agents leave their jobs running)
        stop_process(agent)


@pytest.mark.timeout(600)
def test_a_session_given_reattach_follows_the_new_leader_by_itself(
    pair: tuple[list[ServerProcess], str, str], tmp_path: Path
) -> None:
    """``reattach``: the leader is killed while the session's tasks wait; the same
    session object reattaches through the new leader and its futures all resolve, with
    no call from the user."""
    servers, admin, agent_token = pair
    both = ",".join(s.url for s in servers)
    agent = start_agent(servers, agent_token, admin, tmp_path)
    gate = tmp_path / f"gate-{secrets.token_hex(4)}"
    try:
        with HtcClient(both, admin) as hc:
            s = hc.open_session(
                AFTER_FILE,
                max_workers=2,
                journal=True,
                reattach=240,
                worker_output=str(tmp_path / "w-%j.out"),
            )
            futures = s.submit_many([(str(gate), x) for x in range(50)])
            kill_leader_once_journaled(hc, s.id, 50, servers[0])
            gate.touch()
            more = s.submit_many([(str(gate), x) for x in range(50, 60)])
            assert [f.result(240) for f in futures + more] == list(range(60))
            assert s.reattaches >= 1 and s.ended is None
            assert servers[1].role() == "leader"
            assert s.close(30) == "DONE"
            info = hc.session(s.id)
            assert (info.submitted, info.completed, info.failed) == (60, 60, 0)
    finally:
        gate.touch()
        stop_process(agent)
