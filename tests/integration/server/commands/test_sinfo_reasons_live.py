"""sinfo -R over a live server and real agents: an administrator drains a node with
``scontrol update``; ``sinfo -R`` lists it with the reason, the administrator's name and
the time, ``scontrol show node`` shows ``Reason=... [admin@time]``, and the resumed node
leaves the list."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from hal.compat.commands import run
from hal.compat.job_fields import user_field
from hal.state.node_reasons import server_user
from hal.testing.live import LiveServer


def test_an_administrators_drain_is_listed_by_sinfo_r(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def command(name: str, *args: str) -> list[str]:
        capsys.readouterr()
        assert run(name, list(args)) == 0
        return capsys.readouterr().out.splitlines()

    with LiveServer(tmp_path) as live:
        monkeypatch.setenv("HAL_URL", live.url)
        monkeypatch.setenv("HAL_TOKEN", live.token)  # the administrator "admin"
        with live.agents(2, cpus=1):
            assert command("sinfo", "-R") == [
                "REASON               USER      TIMESTAMP           NODELIST"
            ]
            before = time.time()
            command("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=maint window")
            (line,) = command("sinfo", "-R", "-h")
            match = re.fullmatch(r"maint window {9}admin {5}(\S{19}) node1", line)
            assert match, line
            when = time.mktime(time.strptime(match[1], "%Y-%m-%dT%H:%M:%S"))
            assert before - 1 <= when <= time.time()
            reason = command("scontrol", "show", "node", "node1")[-2]
            assert reason == f"   Reason=maint window [admin@{match[1]}]"
            long = command("sinfo", "-R", "-h", "-o", "%U|%t|%N")
            assert long == [f"{user_field('admin')}|drain|node1"]
            config = command("scontrol", "show", "config")
            assert f"SlurmUser               = {server_user()}({os.geteuid()})" in config

            command("scontrol", "update", "NodeName=node1", "State=RESUME")
            assert command("sinfo", "-R", "-h") == []
