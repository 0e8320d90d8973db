"""An agent played by hand over the REST API (register, sync) for the step server
tests: what a real agent would send, with no agent process."""

from __future__ import annotations

from typing import Any

from hal.testing import http
from hal.testing.live import LiveServer


def post(live: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {live.token}"}
    r = http.post(live.url + path, json=body, headers=auth, timeout=30)
    assert r.status_code in (200, 201), r.text
    reply: dict[str, Any] = r.json()
    return reply


def register(live: LiveServer, node: str, steps: list[tuple[int, int]]) -> list[list[int]]:
    body = {
        "node": node,
        "cpus": 2,
        "memory_bytes": 2**31,
        "steps": [{"job_id": j, "step_id": s} for j, s in steps],
    }
    kill = post(live, "/v1/agent/register", body)["kill_steps"]
    return [[k["job_id"], k["step_id"]] for k in kill]


def ops(live: LiveServer, node: str) -> list[str]:
    reply = post(live, f"/v1/agent/{node}/sync", {"wait_seconds": 0})
    return [i["op"] for i in reply["instructions"]]
