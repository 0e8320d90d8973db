"""An agent that registers again keeps its step tasks (ADR 0012): the server asked no
agent which steps it still ran, and ended every part on a node that registered again —
right after an agent restart, wrong after a server restart or a forgotten node, where the
tasks ran on unseen (srun was told they had ended, and nothing would end them with their
job). Now a part the agent lists keeps running, and one the server does not know is
ended by the agent."""

from __future__ import annotations

import base64
from typing import Any

from agent_by_hand import ops, post, register

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit


def stderr_of(live: LiveServer, job: int) -> str:
    auth = {"Authorization": f"Bearer {live.token}"}
    r = http.get(f"{live.url}/v1/jobs/{job}/steps/0/output", headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    page: dict[str, Any] = r.json()
    return "".join(base64.b64decode(c["data_b64"]).decode() for c in page["chunks"])


def test_a_registration_keeps_the_steps_the_agent_lists_and_ends_those_it_does_not(
    each_store: LiveServer,
) -> None:
    live = each_store
    for node in ("n1", "n2"):
        register(live, node, [])
    with live.client() as admin:
        job = admin.submit(JobSubmit(script="#!/bin/sh\nsleep 600\n", nodes_min=2)).job_id
        wait_until(lambda: "launch" in ops(live, "n1"), message="the launch on n1")
        started = {"seq": 1, "job_id": job, "attempt": 0, "kind": "started", "time": 1.0}
        post(live, "/v1/agent/n1/sync", {"wait_seconds": 0, "reports": [started]})
        post(live, f"/v1/jobs/{job}/steps", {"argv": ["sleep", "600"]})
        assert "step_launch" in ops(live, "n2")
        # n2 registers again (its server forgot it) with the step still running there
        assert register(live, "n2", [(job, 0), (job, 7)]) == [[job, 7]]
        assert "agent restarted" not in stderr_of(live, job)
        # ... and again without it (the node rebooted): the part there is gone
        assert register(live, "n2", []) == []
        assert "n2: the node's agent registered without its tasks" in stderr_of(live, job)
        assert admin.job(job).state == "RUNNING"
