"""The agent channel's lane past FastAPI's routing (``routes_agent.AgentLane``): every
answer it gives, a refusal included, is the one the FastAPI routes give to the same
request, byte for byte; other methods on its paths still reach FastAPI; and the role
gate and the server's request counts (sdiag) still see its requests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp

from hal.api.role_gate import ROLE_HEADER
from hal.api.routes_agent import AgentLane
from hal.api.server import HalServer
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.server.users import ensure_user
from hal.state.store import SqlStateStore

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
REGISTER = {"node": "n1", "cpus": 4, "memory_bytes": 1 << 30, "version": "0"}


async def _ask(
    app: ASGIApp, top: ASGIApp, method: str, path: str, token: str | None, body: bytes = b""
) -> Answer:
    headers = [(b"host", b"hal.example")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if body:
        headers.append((b"content-type", b"application/json"))
    scope: dict[str, Any] = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("hal.example", 80),
        "client": ("127.0.0.1", 4000),
        "app": top,  # (what Starlette puts there before its middleware runs)
        "state": {},
    }
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], list(start.get("headers", [])), content


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[HalServer, dict[str, str]]]:
    db = f"sqlite:///{tmp_path / 'hal.db'}"
    store = SqlStateStore(db)
    now = time.time()
    tokens = {
        "agent": ensure_user(store, "agents", admin=False, agent=True, now=now),
        "user": ensure_user(store, "alice", admin=False, now=now),
    }
    store.close()
    yield (
        HalServer(HalConfig(), db, VirtualClock(1_000.0), data_dir=tmp_path),
        {k: v for k, v in tokens.items() if v is not None},
    )


def _same(answer: Answer) -> Answer:
    """``answer`` less what each registration draws anew: the first number of its
    session's instructions (``hal.state.agents``), the rest compared byte for byte."""
    status, headers, body = answer
    if status == 200 and b'"instructions_from":' in body:
        fields = json.loads(body)
        fields.pop("instructions_from")
        body = json.dumps(fields).encode()
        headers = [(k, v) for k, v in headers if k != b"content-length"]
    return status, headers, body


def _lane(app: ASGIApp) -> AgentLane:
    """The lane in the built middleware stack (each middleware holds the next as ``app``)."""
    layer: Any = app
    while not isinstance(layer, AgentLane):
        layer = layer.app
    return layer


def test_the_lane_answers_every_request_as_fastapi_does(
    served: tuple[HalServer, dict[str, str]],
) -> None:
    """An agent's register and syncs, and the refusals a broken or foreign agent gets:
    a missing or unknown token, a user's token, a body that is not JSON or not valid, a
    node never registered (told to register again)."""
    server, tokens = served
    agent, user = tokens["agent"], tokens["user"]
    sync = json.dumps({"wait_seconds": 0}).encode()
    cases: list[tuple[str, str, str | None, bytes]] = [
        ("POST", "/v1/agent/n1/sync", agent, sync),  # not registered yet
        ("POST", "/v1/agent/register", agent, json.dumps(REGISTER).encode()),
        ("POST", "/v1/agent/n1/sync", agent, sync),
        ("POST", "/v1/agent/n1/sync", agent, json.dumps({"wait_seconds": 99}).encode()),
        ("POST", "/v1/agent/n1/sync", agent, b"{not json"),
        ("POST", "/v1/agent/register", agent, json.dumps({**REGISTER, "cpus": -1}).encode()),
        ("POST", "/v1/agent/n1/sync", None, sync),
        ("POST", "/v1/agent/n1/sync", "hal_unknown", sync),
        ("POST", "/v1/agent/n1/sync", user, sync),
        ("POST", "/v1/agent/register", user, json.dumps(REGISTER).encode()),
    ]

    async def scenario() -> None:
        await server.begin()
        try:
            top = server.app
            lane = _lane(top.build_middleware_stack())
            for method, path, token, body in cases:
                direct = await _ask(lane, top, method, path, token, body)
                fastapi = await _ask(lane.app, top, method, path, token, body)
                assert _same(direct) == _same(fastapi), (path, token, body)
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_other_methods_pass_to_fastapi_and_the_gate_and_sdiag_see_the_lane(
    served: tuple[HalServer, dict[str, str]],
) -> None:
    server, tokens = served
    agent = tokens["agent"]

    async def scenario() -> None:
        await server.begin()
        try:
            top = server.app
            stack = top.build_middleware_stack()
            status, _, _ = await _ask(stack, top, "GET", "/v1/agent/n1/sync", agent)
            assert status == 405
            status, _, _ = await _ask(stack, top, "POST", "/v1/agent//sync", agent, b"{}")
            assert status == 404  # (no node: no route, as FastAPI's ``{node}``)
            body = json.dumps(REGISTER).encode()
            status, _, _ = await _ask(stack, top, "POST", "/v1/agent/register", agent, body)
            assert status == 200
            sync = json.dumps({"wait_seconds": 0}).encode()
            status, headers, _ = await _ask(stack, top, "POST", "/v1/agent/n1/sync", agent, sync)
            assert status == 200
            assert (ROLE_HEADER.lower().encode(), b"leader") in headers  # (the role gate's)
            by_type, by_user = server.observe.requests.rows()
            names = {row.name: row.count for row in by_type}
            assert names["MESSAGE_NODE_REGISTRATION_STATUS"] == 1
            assert names["POST /v1/agent/{node}/sync"] == 1
            assert {row.name for row in by_user} == {"agents"}
        finally:
            await server.stop()

    asyncio.run(scenario())
