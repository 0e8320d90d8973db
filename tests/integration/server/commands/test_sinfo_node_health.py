"""sinfo over a live server and a real agent: the agent's free memory and load show
(``-O FreeMem,CPUsLoad``); a SIGSTOPped agent shows ``idle*`` before the node timeout,
``down*`` after it, and ``idle`` again once it goes on; a node in a maintenance
reservation shows ``maint``."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest

from hal.compat.commands import run
from hal.core.errors import NotFound
from hal.testing.live import LiveServer, wait_until
from hal.wire.reservations import ReservationCreate

# heartbeats every 0.5 s: not responding after 1 s of silence, declared down after 6 s
TIMEOUTS: dict[str, object] = {"node_timeout_seconds": 6.0, "heartbeat_interval_seconds": 0.5}


def test_a_stopped_agent_shows_a_star_then_down_then_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def sinfo(*args: str) -> list[str]:
        capsys.readouterr()
        assert run("sinfo", list(args)) == 0
        return capsys.readouterr().out.splitlines()

    def state() -> str:
        return sinfo("-N", "-h", "-O", "StateCompact:0")[0]

    with LiveServer(tmp_path, config_overrides=TIMEOUTS) as live:
        monkeypatch.setenv("HAL_URL", live.url)
        monkeypatch.setenv("HAL_TOKEN", live.token)
        with live.agents(1, cpus=1) as (agent,):
            # what the agent measured comes with its heartbeats
            wait_until(
                lambda: "N/A" not in sinfo("-N", "-h", "-O", "FreeMem:0 ,CPUsLoad:0")[0],
                message="the agent's free memory and load",
            )
            free, load = sinfo("-N", "-h", "-O", "FreeMem:0 ,CPUsLoad:0")[0].split()
            assert int(free) > 0 and float(load) >= 0
            assert state() == "idle"

            agent.send_signal(signal.SIGSTOP)
            try:
                wait_until(lambda: state() == "idle*", timeout=5, message="idle*")
                # the suffix does not change the base state
                assert sinfo("-N", "-h", "-t", "idle", "-o", "%N %T") == ["node1 idle*"]
                assert sinfo("-N", "-h", "-t", "no_respond", "-o", "%N") == ["node1"]
                wait_until(lambda: state() == "down*", timeout=20, message="down*")
                assert sinfo("-N", "-h", "-o", "%E") == ["Not responding"]
            finally:
                agent.send_signal(signal.SIGCONT)
            wait_until(lambda: state() == "idle", timeout=20, message="the node back")

            with live.client() as c:
                c.create_reservation(
                    ReservationCreate(
                        name="fix",
                        duration_seconds=600,
                        nodes=["node1"],
                        users=["admin"],
                        flags=["MAINT"],
                    )
                )
                try:
                    assert state() == "maint"
                    assert sinfo("-N", "-h", "-t", "maint", "-o", "%N %T") == ["node1 maint"]
                finally:
                    with contextlib.suppress(NotFound):
                        c.delete_reservation("fix")
            assert state() == "idle"
