"""The control plane's HTTP surface: a small ASGI app that routes on the *raw* path.

Why not framework routing: keys arrive percent-encoded (``a%2Fb``) and the contract says to
split the path first and decode each segment after, so an encoded ``/`` stays inside a key.
Frameworks route on the already-decoded path, where that ``/`` would split the key. The
routing table is therefore a list of segment patterns matched against ``scope["raw_path"]``.

Every answer except 204 and the contract itself carries ``Content-Type: application/json``;
errors are ``{code, message, details?}``. ``GET /openapi.yaml`` serves the contract this app
implements (``spec/cache-control-plane.openapi.yaml``, shipped with the package) as it is.

    plane = CacheControlPlane("sqlite:////var/lib/hal/cache.db")
    app = plane.app                 # serve it, or mount it in the main server and call
    await plane.start() ... await plane.stop()   # from that server's lifespan
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from hal import __version__
from hal.cache import wire
from hal.cache.auth import token_refusal
from hal.cache.committer import GroupCommitter
from hal.cache.directory import CacheDirectory, DirectorySettings
from hal.cache.errors import AlreadyExists, CacheBadRequest, CacheNotFound
from hal.cache.store import SqlCacheStore
from hal.core.clock import Clock
from hal.core.errors import HalError, Unauthenticated

log = logging.getLogger("hal.cache.app")
MAX_BODY = 64 * 1024 * 1024
JSON_HEADERS = [(b"content-type", b"application/json")]
STALE_PER_HEARTBEAT = 1000  # stale keys named per heartbeat answer (the rest follow)
CONTRACT = Path(__file__).resolve().parent / "spec" / "cache-control-plane.openapi.yaml"

Params = dict[str, str]
Query = dict[str, str]
Handler = Callable[["CacheControlPlane", Params, Query, bytes], Awaitable[tuple[int, Any]]]
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class CacheControlPlane:
    """Directory + durable store + the ASGI app serving them."""

    def __init__(
        self,
        db_url: str,
        settings: DirectorySettings | None = None,
        clock: Clock | None = None,
        *,
        token: str | None = None,
    ) -> None:
        self.token = token  # the data plane's token (``hal.cache.auth``); None: none asked
        self.directory = CacheDirectory(settings, clock)
        self.store = SqlCacheStore(db_url)
        self.committer = GroupCommitter(self.directory, self.store)
        self.started = False

    async def start(self) -> None:
        """Create tables if needed and load the registry and content map into memory."""
        if not self.started:
            await self.committer.load()
            self.started = True

    async def stop(self) -> None:
        if self.started:
            await self.committer.commit()
            self.committer.close()
            self.store.close()
            self.started = False

    # -- ASGI ----------------------------------------------------------------------------

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = list(JSON_HEADERS)
        refused = token_refusal(self.token, _header(scope, b"authorization"))
        try:
            if refused is not None:
                raise Unauthenticated(refused)
            status, payload = await self._dispatch(scope, receive)
        except MethodNotAllowed as err:
            status, payload = 405, {"code": "method_not_allowed", "message": str(err)}
            headers.append((b"allow", ", ".join(err.allowed).encode()))
        except HalError as err:
            status, payload = err.http_status, _error(err)
        except Exception:
            log.exception("cache control plane request failed")
            status, payload = (
                500,
                {
                    "code": "internal_error",
                    "message": "the control plane failed to handle this request; see its log",
                },
            )
        if isinstance(payload, Document):
            await _send_document(send, status, payload)
            return
        if status == 204:
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        body = json.dumps(payload, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as err:
                    log.exception("cache control plane failed to start")
                    await send({"type": "lifespan.startup.failed", "message": str(err)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _dispatch(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        raw = scope.get("raw_path") or scope["path"].encode()
        root = scope.get("root_path", "").encode()
        if root and raw.startswith(root):
            raw = raw[len(root) :]
        segments = raw.decode("latin-1").split("/")[1:]
        method = scope["method"]
        allowed: list[str] = []
        for route_method, pattern, handler in ROUTES:
            params = _match(pattern, segments)
            if params is None:
                continue
            if route_method != method:
                allowed.append(route_method)
                continue
            query = _query(scope.get("query_string", b""))
            body = await _read_body(receive) if method == "POST" else b""
            return await handler(self, params, query, body)
        if allowed:
            raise MethodNotAllowed(
                allowed, f"{method} is not allowed here; use " + ", ".join(allowed)
            )
        raise CacheNotFound(
            f"no such resource: {scope['path']} (the API lives under /v1, "
            "its contract at /openapi.yaml)"
        )


@dataclass(frozen=True)
class Document:
    """An answer sent as it is, not as JSON: the contract."""

    body: bytes
    content_type: bytes


async def _send_document(send: Send, status: int, document: Document) -> None:
    headers = [
        (b"content-type", document.content_type),
        (b"content-length", str(len(document.body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": document.body})


@functools.cache
def contract() -> bytes:
    """The OpenAPI contract, byte for byte as the package ships it."""
    return CONTRACT.read_bytes()


class MethodNotAllowed(Exception):
    def __init__(self, allowed: list[str], message: str) -> None:
        super().__init__(message)
        self.allowed = allowed


def _error(err: HalError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": err.code, "message": err.message}
    details = dict(getattr(err, "details", None) or {})
    if err.field:
        details.setdefault("field", err.field)
    if details:
        out["details"] = details
    return out


def _match(pattern: tuple[str, ...], segments: list[str]) -> Params | None:
    if len(pattern) != len(segments):
        return None
    params: Params = {}
    for want, got in zip(pattern, segments, strict=True):
        if want.startswith("{"):
            if not got:
                return None
            # decode per segment, after splitting: an encoded "/" stays inside the value.
            # Bytes that are not UTF-8 decode as nodes report them in bodies (surrogateescape,
            # Redis keys are bytes), so a node's %FF finds the key it reported as "\udcff"
            params[want[1:-1]] = unquote(got, encoding="utf-8", errors="surrogateescape")
        elif want != got:
            return None
    return params


def _query(raw: bytes) -> Query:
    parsed = parse_qs(
        raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="replace"
    )
    return {k: v[0] for k, v in parsed.items()}


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise CacheBadRequest(f"the body is larger than {MAX_BODY} bytes; send smaller batches")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


# -- handlers ------------------------------------------------------------------------------


async def openapi_document(
    _cp: CacheControlPlane, _p: Params, _q: Query, _b: bytes
) -> tuple[int, Any]:
    return 200, Document(contract(), b"application/yaml")


async def list_instances(cp: CacheControlPlane, _p: Params, q: Query, _b: bytes) -> tuple[int, Any]:
    status = q.get("status")
    if status is not None and status not in ("active", "inactive", "unverified"):
        raise CacheBadRequest(
            f"status {status!r} must be active, inactive or unverified", field="status"
        )
    d = cp.directory
    found = d.find(status, q.get("region"))
    return 200, {
        "instances": [wire.instance_json(i, d.status_of(i)) for i in found],
        "total": len(found),
    }


async def get_instance(cp: CacheControlPlane, p: Params, _q: Query, _b: bytes) -> tuple[int, Any]:
    d = cp.directory
    inst = d.get(wire.check_id(p["id"]))
    out = wire.instance_json(inst, d.status_of(inst))
    out.update(
        {
            "keyCount": d.content.key_count(inst.id),
            "totalSize": d.content.total_bytes(inst.id),
            "children": d.registry.children(inst.id),
            "registeredAt": wire.iso(inst.registered_at),
        }
    )
    if inst.max_size is not None:
        out["maxSize"] = inst.max_size
    if inst.hit_rate is not None:
        out["hitRate"] = inst.hit_rate
    return 200, out


async def register(cp: CacheControlPlane, p: Params, _q: Query, body: bytes) -> tuple[int, Any]:
    instance_id = wire.check_id(p["id"])
    d = cp.directory
    if d.exists(instance_id):
        # the contract checks the conflict before it looks at the body
        raise AlreadyExists(
            f"cache instance {instance_id!r} is already registered; deregister it first"
        )
    inst = wire.register_request(instance_id, wire.parse_body(body))
    d.register(inst)
    await cp.committer.commit()
    return 201, {"id": instance_id, "registered": True, "controlPlaneVersion": __version__}


async def heartbeat(cp: CacheControlPlane, p: Params, _q: Query, body: bytes) -> tuple[int, Any]:
    instance_id = wire.check_id(p["id"])
    hit_rate, healthy, hal_stats = wire.heartbeat_request(wire.parse_body(body))
    next_ms = cp.directory.heartbeat(instance_id, hit_rate, healthy, hal_stats)
    await cp.committer.commit()
    out: dict[str, Any] = {"acknowledged": True, "nextHeartbeatMs": next_ms}
    # HAL's extension (the contract's body leaves its properties open): the node's copies
    # that an origin write elsewhere made stale, so it stops serving them from local hits
    stale = cp.directory.content.stale_keys(instance_id, STALE_PER_HEARTBEAT)
    if stale:
        out["halStale"] = stale
    return 200, out


async def deregister(cp: CacheControlPlane, p: Params, _q: Query, _b: bytes) -> tuple[int, Any]:
    cp.directory.deregister(wire.check_id(p["id"]))
    await cp.committer.commit()
    return 204, None


async def locate(cp: CacheControlPlane, p: Params, q: Query, _b: bytes) -> tuple[int, Any]:
    key = p["key"]
    holders = cp.directory.locate(key, q.get("sourceInstanceId") or None)
    out: dict[str, Any] = {"key": key, "instances": [wire.holder_json(h) for h in holders]}
    # HAL's extension: the instances whose copies are stale (never offered in
    # ``instances``), so a node not listed can tell "stale here" from "the map lags"
    stale = cp.directory.content.stale_holders(key)
    if stale:
        out["halStale"] = stale
    return 200, out


async def nearest(cp: CacheControlPlane, p: Params, q: Query, _b: bytes) -> tuple[int, Any]:
    key = p["key"]
    source = q.get("sourceInstanceId")
    if not source:
        raise CacheBadRequest("sourceInstanceId is required", field="sourceInstanceId")
    h = cp.directory.nearest(key, source)
    if h is None:
        raise CacheNotFound(f"no eligible cache instance holds key {key!r}")
    return 200, {
        "key": key,
        "instanceId": h.instance.id,
        "address": h.instance.address,
        "size": h.entry.size,
        "proximity": wire.proximity(h.proximity),
    }


async def list_keys(cp: CacheControlPlane, p: Params, q: Query, _b: bytes) -> tuple[int, Any]:
    instance_id = wire.check_id(p["id"])
    limit = wire.limit_param(q.get("limit"))
    after = _decode_cursor(q.get("cursor") or None)
    page, more, total = cp.directory.keys(instance_id, after, limit)
    cursor = _encode_cursor(page[-1][0]) if more and page else None
    if limit == 0:
        # nothing was read, so the next page starts where this one would have
        cursor = q.get("cursor") or None
    return 200, {
        "instanceId": instance_id,
        "keys": [wire.key_json(k, e) for k, e in page],
        "cursor": cursor,
        "total": total,
    }


async def update_keys(cp: CacheControlPlane, p: Params, _q: Query, body: bytes) -> tuple[int, Any]:
    instance_id = wire.check_id(p["id"])
    full, keys, part = wire.inventory_request(wire.parse_body(body))
    updated, added, removed = cp.directory.inventory(instance_id, keys, full, part)
    await cp.committer.commit()
    return 200, {"updated": updated, "added": added, "removed": removed}


async def topology(cp: CacheControlPlane, _p: Params, _q: Query, _b: bytes) -> tuple[int, Any]:
    d = cp.directory
    reg = d.registry
    nodes = []
    edges = []
    for iid, inst in sorted(reg.instances.items()):
        node: dict[str, Any] = {
            "id": iid,
            "tier": inst.tier,
            "status": d.status_of(inst),
            "keyCount": d.content.key_count(iid),
        }
        if inst.region is not None:
            node["region"] = inst.region
        nodes.append(node)
        parent = inst.parent_id
        if parent is not None and parent in reg.instances and parent != iid:
            edges.append(
                {
                    "from": parent,
                    "to": iid,
                    "relationship": "parent-child",
                    "proximity": wire.proximity(inst.link(reg.default_link)),
                }
            )
    out: dict[str, Any] = {"nodes": nodes, "edges": edges}
    roots = d.roots()
    if roots:
        # several trees may coexist; the contract has room for one id: prefer a "root" tier
        tiered = [r for r in roots if reg.instances[r].tier == "root"]
        out["rootId"] = (tiered or roots)[0]
    return 200, out


async def proximity_matrix(
    cp: CacheControlPlane, _p: Params, q: Query, _b: bytes
) -> tuple[int, Any]:
    reg = cp.directory.registry
    wanted = q.get("instanceIds")
    if wanted is None:
        ids = sorted(reg.instances)
    else:
        # unknown ids are dropped silently, duplicates once
        ids = list(dict.fromkeys(i for i in wanted.split(",") if i in reg.instances))
    matrix = [[wire.proximity(reg.proximity(a, b)) for b in ids] for a in ids]
    return 200, {"instances": ids, "matrix": matrix}


async def route(cp: CacheControlPlane, p: Params, _q: Query, _b: bytes) -> tuple[int, Any]:
    hops, metrics = cp.directory.route(p["from"], p["to"])
    return 200, {
        "from": p["from"],
        "to": p["to"],
        "hops": hops,
        "totalLatencyMs": wire.finite(metrics.latency_ms),
        "totalCost": wire.finite(metrics.cost),
    }


async def submit_event(
    cp: CacheControlPlane, _p: Params, _q: Query, body: bytes
) -> tuple[int, Any]:
    instance_id, item = wire.event_request(wire.parse_body(body))
    if not cp.directory.exists(instance_id):
        # Late events of a deregistered instance (or one that never registered) would bring
        # its copies back when that id registers again, and its origin writes would mark
        # other instances' copies stale. The contract lists no error for this: the answer is
        # its own "accepted: false", nothing applied (HAL nodes register again and resend).
        return 202, {"accepted": False, "eventId": cp.directory.new_event_id()}
    [event_id] = cp.directory.apply_events(instance_id, [item])
    await cp.committer.commit()
    return 202, {"accepted": True, "eventId": event_id}


async def submit_batch(
    cp: CacheControlPlane, _p: Params, _q: Query, body: bytes
) -> tuple[int, Any]:
    instance_id, items = wire.batch_request(wire.parse_body(body))
    if not cp.directory.exists(instance_id):  # see submit_event
        return 202, {"accepted": False, "count": 0, "batchId": cp.directory.new_batch_id()}
    cp.directory.apply_events(instance_id, items)
    await cp.committer.commit()
    return 202, {"accepted": True, "count": len(items), "batchId": cp.directory.new_batch_id()}


def _encode_cursor(key: str) -> str:
    # opaque to clients; hex of the last key keeps it URL-safe for any key
    return "k" + key.encode("utf-8", "surrogatepass").hex()


def _decode_cursor(cursor: str | None) -> str | None:
    """The key to continue after. A cursor we did not issue is read as a key itself, so
    any string the contract allows is a valid position (never an error)."""
    if cursor is None:
        return None
    if cursor.startswith("k"):
        try:
            return bytes.fromhex(cursor[1:]).decode("utf-8", "surrogatepass")
        except ValueError:
            pass
    return cursor


def _route(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("/")[1:])


ROUTES: list[tuple[str, tuple[str, ...], Handler]] = [
    ("GET", _route("/openapi.yaml"), openapi_document),
    ("GET", _route("/v1/instances"), list_instances),
    ("GET", _route("/v1/instances/{id}"), get_instance),
    ("POST", _route("/v1/instances/{id}/register"), register),
    ("POST", _route("/v1/instances/{id}/heartbeat"), heartbeat),
    ("DELETE", _route("/v1/instances/{id}/deregister"), deregister),
    ("GET", _route("/v1/content/locate/{key}"), locate),
    ("GET", _route("/v1/content/nearest/{key}"), nearest),
    ("GET", _route("/v1/content/instances/{id}/keys"), list_keys),
    ("POST", _route("/v1/content/instances/{id}/keys"), update_keys),
    ("GET", _route("/v1/topology"), topology),
    ("GET", _route("/v1/topology/proximity"), proximity_matrix),
    ("GET", _route("/v1/topology/routes/{from}/{to}"), route),
    ("POST", _route("/v1/events"), submit_event),
    ("POST", _route("/v1/events/batch"), submit_batch),
]


def create_app(db_url: str, settings: DirectorySettings | None = None) -> CacheControlPlane:
    """The app factory the CLI and the main server use (``.app`` is the ASGI callable)."""
    return CacheControlPlane(db_url, settings)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None
