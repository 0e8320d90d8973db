"""The step launcher's request handling, without forking."""

from __future__ import annotations

import os
from pathlib import Path

from hal.agent.forkserver import launch
from hal.agent.isolation import Isolation
from hal.agent.supervisor import PLAN_FILE, StepPlan, read_supervisor
from hal.host.process import start_ticks


def test_missing_plan_is_an_error_reply_not_a_crash(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        reply = launch({"job_id": 3, "key": 1, "job_dir": str(tmp_path)}, w, Isolation("none"))
    finally:
        os.close(r)
        os.close(w)
    assert reply["job_id"] == 3 and reply["key"] == 1
    assert "plan.json" in str(reply["error"])
    assert not (tmp_path / "supervisor").exists()


def test_plan_round_trips_through_json() -> None:
    plan = StepPlan(
        job_id=1,
        attempt=0,
        job_dir="/s/1.0",
        argv=("/bin/sh", "/s/1.0/script"),
        env={"A": "1"},
        workdir="/w",
        stdout_path="/w/o",
        stderr_path=None,
        append=False,
        memory_bytes=5,
        gpus=False,
        uid=7,
        gid=8,
        groups=(8, 9),
    )
    assert StepPlan.from_json(plan.to_json()) == plan


def test_launch_records_the_supervisor_pid_and_start_ticks(tmp_path: Path) -> None:
    plan = StepPlan(
        5,
        0,
        str(tmp_path),
        ("/bin/true",),
        {"PATH": "/usr/bin:/bin"},
        str(tmp_path),
        str(tmp_path / "out"),
        None,
        False,
        0,
        False,
    )
    (tmp_path / PLAN_FILE).write_text(plan.to_json())
    r, w = os.pipe()
    try:
        reply = launch({"job_id": 5, "key": 0, "job_dir": str(tmp_path)}, w, Isolation("none"))
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as started:
        assert started.read().startswith(b"S ")  # the supervisor got GO and ran the job
    assert "error" not in reply and isinstance(reply["pid"], int) and reply["pid"] > 0
    assert read_supervisor(str(tmp_path)) == (reply["pid"], reply["ticks"])
    assert isinstance(reply["ticks"], int) and reply["ticks"] > 0
    os.waitpid(reply["pid"], 0)
    assert start_ticks(reply["pid"]) is None  # reaped: no /proc entry, no crash
