"""ReturnToService over a live server and real agents (the admin's finding A8): a killed
agent's node shows ``idle*`` before the node timeout and ``down*`` after it; with
``return_to_service = 0`` (Slurm's default) the restarted agent's node stays ``down``
until an administrator resumes it, with 1 (HAL's default) it comes back by itself; an
operator's DOWN stays with 1 and goes with 2. As Slurm 22.05.8 did
(docs/slurm-checks.md)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.compat.commands import run
from hal.testing.live import LiveServer, stop_process, wait_until

# heartbeats every 0.5 s: not responding after 1 s of silence, declared down after 4 s
TIMEOUTS: dict[str, object] = {"node_timeout_seconds": 4.0, "heartbeat_interval_seconds": 0.5}


def _sinfo(capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert run("sinfo", ["-N", "-h", "-o", "%t|%E"]) == 0
    return capsys.readouterr().out.strip()


@contextlib.contextmanager
def _one_node(
    setting: int,
    where: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[LiveServer, subprocess.Popen[bytes]]]:
    """A live server with ``return_to_service = setting`` and node1's agent up."""
    overrides = {**TIMEOUTS, "return_to_service": setting}
    with LiveServer(where, config_overrides=overrides) as live:
        monkeypatch.setenv("HAL_URL", live.url)
        monkeypatch.setenv("HAL_TOKEN", live.token)
        agent = live.start_agent("node1", cpus=1)
        wait_until(lambda: _sinfo(capsys) == "idle|none", message="the agent up")
        try:
            yield live, agent
        finally:
            live.end_fork_servers()


def _kill_and_restart(
    live: LiveServer, agent: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> subprocess.Popen[bytes]:
    """SIGKILL the agent, see ``idle*`` then ``down*``, start it again and wait until
    the server holds its session (no ``*`` any more)."""
    agent.send_signal(signal.SIGKILL)
    agent.wait(10)
    wait_until(lambda: _sinfo(capsys) == "idle*|none", timeout=5, message="idle*")
    wait_until(lambda: _sinfo(capsys) == "down*|Not responding", timeout=10, message="down*")
    again = live.start_agent("node1", cpus=1)
    wait_until(lambda: "*" not in _sinfo(capsys).split("|")[0], timeout=20, message="re-register")
    return again


@pytest.mark.parametrize(("setting", "after"), [(0, "down|Not responding"), (1, "idle|none")])
def test_a_node_back_from_not_responding(
    setting: int,
    after: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with _one_node(setting, tmp_path, monkeypatch, capsys) as (live, agent):
        again = _kill_and_restart(live, agent, capsys)
        try:
            assert _sinfo(capsys) == after
            if setting == 0:  # an administrator brings it back
                assert run("scontrol", ["update", "nodename=node1", "state=resume"]) == 0
                wait_until(lambda: _sinfo(capsys) == "idle|none", timeout=5, message="resumed")
        finally:
            stop_process(again)


@pytest.mark.parametrize(
    ("setting", "drained", "after"),
    [
        (1, False, "down|bad disk"),
        (2, False, "idle|none"),
        (1, True, "drain|bad disk"),  # (DOWN+DRAIN: sinfo's drained)
        (2, True, "drain|bad disk"),  # back in service, still drained, as Slurm's
    ],
)
def test_an_operators_down_over_an_agent_restart(
    setting: int,
    drained: bool,
    after: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with _one_node(setting, tmp_path, monkeypatch, capsys) as (live, agent):
        if drained:
            drain = ["update", "nodename=node1", "state=drain", "reason=first"]
            assert run("scontrol", drain) == 0
        update = ["update", "nodename=node1", "state=down", "reason=bad disk"]
        assert run("scontrol", update) == 0
        stop_process(agent)
        again = live.start_agent("node1", cpus=1)
        try:
            wait_until(lambda: _sinfo(capsys) == after, timeout=20, message=after)
            if drained:  # sinfo's "drain" either way: DOWN+DRAIN stays, or comes back DRAIN
                state = "DRAIN" if setting == 2 else "DOWN"
                with live.client() as c:
                    wait_until(lambda: c.nodes()[0].state == state, timeout=20, message=state)
                assert _sinfo(capsys) == after
        finally:
            stop_process(again)
