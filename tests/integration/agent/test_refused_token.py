"""A real ``hal agent`` whose token the control plane refuses (a token it does not know:
401; a token bound to other nodes, or a user's that is no agent's: 403) says once what is
wrong and what to do, and exits with status 3: no retry can fix a refused credential. It
retried for ever, logging the refusal every few seconds. A server it cannot reach is
still waited for, as an outage would be."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, free_port, stop_process, wait_until

REFUSED_EXIT = 3  # src/hal/agent/README.md, "Exit status"


def agent_token(live: LiveServer, nodes: str) -> str:
    added = live.cli("user", "add", "rack9", "--agent", "--nodes", nodes)
    assert added.returncode == 0, added.stderr
    return added.stdout.splitlines()[1].rsplit(": ", 1)[1]


TOKENS: dict[str, Callable[[LiveServer], str]] = {
    "unknown token": lambda live: "hal_not_a_token",
    "bound to other nodes": lambda live: agent_token(live, "node9"),
    "a user's token": lambda live: live.add_users("alice")["alice"],
}


@pytest.mark.parametrize(
    ("status", "case"),
    [(401, "unknown token"), (403, "bound to other nodes"), (403, "a user's token")],
)
def test_an_agent_whose_token_is_refused_says_why_and_exits(
    tmp_path: Path, status: int, case: str
) -> None:
    with LiveServer(tmp_path / "srv") as live:
        agent = live.start_agent("node1", token=TOKENS[case](live))
        try:
            code = agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stop_process(agent)
            raise AssertionError("the agent kept retrying a refused token") from None
        log = (live.data_dir / "agent-node1.log").read_text()
        assert code == REFUSED_EXIT, log
        said = [line for line in log.splitlines() if "refused this agent's token" in line]
        assert len(said) == 1, log
        assert f"for node node1 (HTTP {status}: " in said[0]
        assert "hal user add NAME --agent --nodes node1" in said[0]
        with live.client() as c:
            assert "node1" not in {n.name for n in c.nodes()}


def test_an_agent_that_cannot_reach_its_server_keeps_trying(tmp_path: Path) -> None:
    """Its only server address answers nothing: the agent logs it and tries again."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    log_path = tmp_path / "agent-node1.log"
    with open(log_path, "ab") as log:
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hal.cli.main",
                "agent",
                "--server",
                nowhere,
                "--name",
                "node1",
                "--state-dir",
                str(tmp_path / "agent"),
            ],
            env={**os.environ, "HAL_TOKEN": "hal_not_reached"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: log_path.read_text().count("server unavailable") >= 2,
            30,
            message="the agent to retry",
        )
        assert nowhere in log_path.read_text()
        assert agent.poll() is None
    finally:
        stop_process(agent)
