"""The server's CPU per agent sync and per node listed, in one process (so a loaded
machine's figures compare): ``hal server``'s whole ASGI app (its middleware, routing, auth,
body validation and answer) driven with ASGI messages built once, no socket and no HTTP
parser, over a SQLite store holding N registered nodes in ``hal bench scale``'s
partitions. Per request it reports the CPU of the whole app and of
``hal.state.agents.sync`` alone (the same body, validated beforehand), the difference
being the HTTP edge; ``GET /v1/nodes``'s CPU per node; and the nodes' registrations,
256 at once, a second (``--db``: on PostgreSQL, where each commit's round trips count).
The least of ``--repeat`` rounds is kept (another process's burst only adds). Prints one
JSON object::

    python bench/heartbeat_edge.py [--nodes 1000] [--syncs 5000] [--db URL|fresh] [--json]
    python bench/heartbeat_edge.py --nodes 10000 --syncs 0 --db fresh   # registrations only
    PYTHONPATH=/path/to/other/tree/src python bench/heartbeat_edge.py

A sync here answers at once (``wait_seconds`` 0): a long poll's wait costs a timer, and
its answer the same as this one's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hal.api.server import HalServer
from hal.bench.scale import PG_ADMIN, _database
from hal.config.model import load_config
from hal.server.users import ensure_user
from hal.state import agents
from hal.state.store import SqlStateStore
from hal.wire.agent import AgentSync

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
IN_FLIGHT = 256  # registrations at once (``hal bench scale``'s emulators together)


class Request:
    """One request's ASGI scope and body, replayed as often as asked."""

    def __init__(self, method: str, path: str, token: str, body: bytes = b"") -> None:
        headers = [
            (b"host", b"hal.example:8470"),
            (b"user-agent", b"hal-agent"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"accept", b"*/*"),
            (b"accept-encoding", b"gzip, deflate"),
        ]
        if body:
            headers += [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": ("127.0.0.1", 8470),
            "client": ("127.0.0.1", 40000),
            "scheme": "http",
            "method": method,
            "root_path": "",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": headers,
            "state": {},
        }
        self.body = body

    async def send_to(self, app: ASGIApp) -> tuple[int, bytes]:
        sent = False
        status = 0
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.sleep(3600)  # (a disconnect is never asked for here)
            sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await app(dict(self.scope, state={}), receive, send)
        return status, b"".join(chunks)


def _sync_body(i: int) -> bytes:
    """A heartbeat of a node running two jobs the server does not know (they are left
    alone: the lost-job check looks at the server's jobs on the node)."""
    return (
        AgentSync(
            wait_seconds=0,
            running=[],
            usage=[],
            free_memory_bytes=64 << 30,
            cpu_load=float(i % 16),
            applied=None,
        )
        .model_dump_json(exclude_defaults=True)
        .encode()
    )


async def _cpu_per_call(call: Callable[[int], Awaitable[None]], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for i in range(count):
            await call(i)
        best = min(best, (time.process_time() - started) / count)
    return best


async def _register(app: ASGIApp, token: str, nodes: int) -> dict[str, float]:
    """Every node registers, ``IN_FLIGHT`` at a time as ``hal bench scale``'s emulators
    do: registrations a second (wall: the commits' round trips count) and CPU each."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(n: int) -> None:
        body = {"node": f"e{n}", "cpus": 16, "memory_bytes": 64 << 30, "version": "0"}
        async with gate:
            status, _ = await Request(
                "POST", "/v1/agent/register", token, json.dumps(body).encode()
            ).send_to(app)
        assert status == 200, status

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(n) for n in range(nodes)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "registrations_per_s": round(nodes / wall, 1),
        "register_cpu_ms": round(cpu / nodes * 1000, 3),
    }


async def measure(nodes: int, syncs: int, repeat: int, db: str | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        db = db or f"sqlite:///{Path(folder) / 'hal.db'}"
        store = SqlStateStore(db)
        admin = ensure_user(store, "admin", admin=True, now=time.time())
        agent = ensure_user(store, "agents", admin=False, agent=True, now=time.time())
        store.close()
        assert admin is not None and agent is not None
        config = Path(folder) / "hal.toml"
        config.write_text(  # ``hal bench scale``'s two partitions
            f'[[partitions]]\nname = "bulk"\ndefault = true\nnodes = "e[0-{nodes - 1}]"\n'
            '[[partitions]]\nname = "probe"\nnodes = "probe[1-2]"\n'
        )
        server = HalServer(load_config(config), db, data_dir=folder, config_path=config)
        await server.begin()
        app: ASGIApp = server.app
        try:
            registered = await _register(app, agent, nodes)
            if syncs == 0:  # (the registrations alone)
                return {"benchmark": "heartbeat-edge", "nodes": nodes, **registered}
            requests = [
                Request("POST", f"/v1/agent/e{n}/sync", agent, _sync_body(n)) for n in range(nodes)
            ]
            bodies = [AgentSync.model_validate_json(r.body) for r in requests]
            cluster = server.ctx.cluster

            async def over_http(i: int) -> None:
                status, _ = await requests[i % nodes].send_to(app)
                assert status == 200, status

            async def sync_alone(i: int) -> None:
                await agents.sync(cluster, f"e{i % nodes}", bodies[i % nodes])

            await _cpu_per_call(over_http, nodes, 1)  # warm: every session's first sync
            edge = await _cpu_per_call(over_http, syncs, repeat)
            alone = await _cpu_per_call(sync_alone, syncs, repeat)
            listing = Request("GET", "/v1/nodes", admin)

            async def list_nodes(_: int) -> None:
                answer, _body = await listing.send_to(app)
                assert answer == 200, answer

            listed = await _cpu_per_call(list_nodes, 5, repeat)
        finally:
            await server.stop()
    return {
        "benchmark": "heartbeat-edge",
        "nodes": nodes,
        "syncs": syncs,
        "sync_cpu_ms": round(edge * 1000, 4),
        "sync_handler_cpu_ms": round(alone * 1000, 4),
        "sync_edge_cpu_ms": round((edge - alone) * 1000, 4),
        "node_list_cpu_us_per_node": round(listed / nodes * 1e6, 2),
        **registered,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--syncs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--db",
        help="an empty database (PostgreSQL's URL), or 'fresh': one made on 127.0.0.1:5432 "
        "and dropped at the end; default SQLite",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object (the default)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(_database(PG_ADMIN)) if args.db == "fresh" else args.db
        print(json.dumps(asyncio.run(measure(args.nodes, args.syncs, args.repeat, db))))


if __name__ == "__main__":
    main()
