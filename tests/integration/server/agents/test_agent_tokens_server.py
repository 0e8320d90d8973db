"""Agent tokens (``hal user add NAME --agent``) against a real control plane: node agents
authenticated with an administrator's token, so whoever read a node's token administered
every user and job. An agent token opens the agent channel (/v1/agent) and nothing else,
and one bound to nodes (``--nodes``) serves those nodes only."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

NODE = {"cpus": 2, "memory_bytes": 2**31}


def post(live: LiveServer, path: str, token: str, body: dict[str, Any]) -> httpx.Response:
    auth = {"Authorization": f"Bearer {token}"}
    return http.post(live.url + path, json=body, headers=auth, timeout=30)


def agent_token(live: LiveServer, name: str, nodes: str = "") -> str:
    with live.client() as admin:
        return admin.add_user(name, agent=True, nodes=nodes).token


def next_launch(live: LiveServer, node: str, token: str) -> dict[str, Any]:
    """Sync as ``node``'s agent until the server sends it a launch."""
    found: list[dict[str, Any]] = []

    def launched() -> bool:
        r = post(live, f"/v1/agent/{node}/sync", token, {"wait_seconds": 1})
        assert r.status_code == 200, r.text
        found.extend(i for i in r.json()["instructions"] if i["op"] == "launch")
        return bool(found)

    wait_until(launched, 30, message=f"a launch for {node}")
    return found[0]


def ran(job_id: int, attempt: int, seq: int) -> list[dict[str, Any]]:
    """The reports of a job that started and completed."""
    started = {"seq": seq, "job_id": job_id, "attempt": attempt, "kind": "started", "time": 1.0}
    finished = {**started, "seq": seq + 1, "kind": "finished", "state": "COMPLETED"}
    return [started, finished]


def test_an_agent_token_registers_heartbeats_and_reports_a_job(each_store: LiveServer) -> None:
    token = agent_token(each_store, "rack1", nodes="n[1-2]")
    alice = each_store.add_users("alice")["alice"]
    assert post(each_store, "/v1/agent/register", token, {"node": "n1", **NODE}).status_code == 200
    with each_store.client(alice) as c:
        job = c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp")).job_id
        launch = next_launch(each_store, "n1", token)
        assert launch["job_id"] == job
        reports = {"reports": ran(job, launch["attempt"], 1), "wait_seconds": 0}
        r = post(each_store, "/v1/agent/n1/sync", token, reports)
        assert (r.status_code, r.json()["acked_seq"]) == (200, 2)
        assert c.job(job).state == "COMPLETED"
        assert c.node("n1").state == "UP"


def test_a_token_bound_to_nodes_serves_no_other_node(each_store: LiveServer) -> None:
    token = agent_token(each_store, "rack2", nodes="n1")
    for path, body in (
        ("/v1/agent/register", {"node": "n2", **NODE}),
        ("/v1/agent/n2/sync", {"wait_seconds": 0}),
        ("/v1/agent/n2/output", {"wait_seconds": 0}),
    ):
        r = post(each_store, path, token, body)
        assert r.status_code == 403, (path, r.text)
        assert "agent token rack2 may not serve node 'n2'" in r.json()["detail"]
        assert "hal user add NAME --agent --nodes n2" in r.json()["detail"]
    with each_store.client() as admin:
        assert "n2" not in {n.name for n in admin.nodes()}


def test_an_admin_token_still_serves_agents_with_a_warning_once(
    each_store: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Agents set up before agent tokens keep working; the log says once why to change."""
    caplog.set_level(logging.WARNING, logger="hal.api")
    for node in ("n1", "n2"):
        r = post(each_store, "/v1/agent/register", each_store.token, {"node": node, **NODE})
        assert r.status_code == 200
    warnings = [r.getMessage() for r in caplog.records if "administrator admin" in r.getMessage()]
    assert len(warnings) == 1 and "hal user add NAME --agent" in warnings[0]


def test_a_plain_users_token_is_refused_by_the_agent_channel(
    each_store_shared: LiveServer,
) -> None:
    bob = each_store_shared.add_users("bob")["bob"]
    r = post(each_store_shared, "/v1/agent/register", bob, {"node": "n1", **NODE})
    assert r.status_code == 403 and "user bob is no agent" in r.json()["detail"]


def _path(template: str) -> str:
    return "/".join("1" if p.startswith("{") else p for p in template.split("/"))


def test_an_agent_token_is_refused_everywhere_but_the_agent_channel(tmp_path: Any) -> None:
    """Every route of the OpenAPI document that wants a token (401 without one) but is
    not the agent channel answers an agent token with 403, naming it: users, jobs (its
    own or others'), nodes, reservations, events, the dashboard's data."""
    with LiveServer(tmp_path) as live:
        token = agent_token(live, "rack1")
        paths = http.get(live.url + "/openapi.json", timeout=60).json()["paths"]
        checked = []
        with httpx.Client(base_url=live.url, timeout=60) as session:
            for template, methods in sorted(paths.items()):
                if template.startswith("/v1/agent/"):
                    continue
                for method in methods:
                    if session.request(method, _path(template)).status_code != 401:
                        continue  # needs no token (/healthz, /metrics)
                    auth = {"Authorization": f"Bearer {token}"}
                    r = session.request(method, _path(template), headers=auth)
                    assert r.status_code == 403, (method, template, r.text)
                    assert "rack1's token is an agent token" in r.json()["detail"]
                    checked.append(f"{method.upper()} {template}")
    for route in (
        "GET /v1/users",
        "POST /v1/users",
        "GET /v1/users/me",
        "POST /v1/jobs",
        "GET /v1/jobs",
        "DELETE /v1/jobs/{job_id}",
        "PATCH /v1/nodes/{name}",
        "POST /v1/reservations",
        "GET /v1/events",
    ):
        assert route in checked


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"admin": True, "agent": True}, "agent", "an administrator or an agent, not both"),
        ({"nodes": "n1"}, "nodes", "--nodes binds an agent token to nodes: add --agent"),
        ({"agent": True, "nodes": "n[1-"}, "nodes", "write names like n1,n2 or n[1-4,7]"),
    ],
)
def test_an_agent_user_that_makes_no_sense_is_refused(
    each_store_shared: LiveServer, body: dict[str, Any], field: str, message: str
) -> None:
    r = post(each_store_shared, "/v1/users", each_store_shared.token, {"name": "x", **body})
    assert (r.status_code, r.json()["field"]) == (400, field)
    assert message in r.json()["detail"]


def test_users_list_and_a_new_token_keep_the_agent_and_its_nodes(each_store: LiveServer) -> None:
    agent_token(each_store, "rack3", nodes="n3,n1,n2")
    with each_store.client() as admin:
        (rack3,) = [u for u in admin.users() if u.name == "rack3"]
        assert (rack3.admin, rack3.agent, rack3.nodes) == (False, True, "n[1-3]")
        issued = admin.new_token("rack3")
    assert (issued.agent, issued.nodes) == (True, "n[1-3]")
    assert post(each_store, "/v1/agent/register", issued.token, {"node": "n3", **NODE}).is_success
    r = post(each_store, "/v1/agent/register", issued.token, {"node": "n4", **NODE})
    assert r.status_code == 403
