"""The step launcher's request handling, without forking."""

from __future__ import annotations

import os
from pathlib import Path

from hal.agent.forkserver import launch
from hal.agent.isolation import Isolation
from hal.agent.supervisor import StepPlan


def test_missing_plan_is_an_error_reply_not_a_crash(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        reply = launch({"job_id": 3, "attempt": 1, "job_dir": str(tmp_path)}, w, Isolation("none"))
    finally:
        os.close(r)
        os.close(w)
    assert reply["job_id"] == 3 and reply["attempt"] == 1
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
