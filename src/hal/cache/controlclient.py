"""``ControlPlaneClient``: what a cache node says to the control plane, over HTTP only.

Every call has a short timeout: a node must keep serving its clients while the control plane
is slow or gone, so a failure here is an answer (``ControlPlaneDown``), never a hang.

A node may be given several control planes on one database (``--control-plane-events-url``
repeated, or a comma list): a call goes to the one that last answered, else in order, and
moves on where sending it again is certainly safe (the connection was never made, or a
standby answered as ``hal.client.servers`` describes), as HAL's own clients do.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from json import dumps
from typing import Any
from urllib.parse import quote

import httpx

from hal.cache.auth import auth_headers
from hal.client.servers import LeaderChoice, server_urls
from hal.host.tls import verify_for_servers

# An inventory goes in parts of at most this many keys (``--inventory-chunk-keys``) and
# this many bytes: one request holding every key of a big node (~700,000 keys) passed the
# control plane's 64 MiB body limit and was refused, so such a node never synced.
INVENTORY_PART_KEYS = 50_000
INVENTORY_PART_BYTES = 16 * 1024 * 1024


class ControlPlaneDown(Exception):
    """Unreachable, timed out, or answered 5xx: try again later."""


class ControlPlaneRejected(Exception):
    """A 4xx answer: the request itself is wrong (or the instance is unknown, 404)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"control plane answered {status}: {body}")
        self.status = status
        self.body = body


def base_url_from_events_url(events_url: str) -> str:
    """The control-plane base is the events URL without ``/events`` (behaviour sheet);
    of a comma list, each one's, comma-separated."""
    bases = []
    for url in server_urls(events_url) or (events_url.rstrip("/"),):
        bases.append(url[: -len("/events")] if url.endswith("/events") else url)
    return ",".join(bases)


class ControlPlaneClient:
    """``base_url``: one control plane, or several comma-separated."""

    def __init__(self, base_url: str, instance_id: str, timeout_s: float = 2.0) -> None:
        self.planes = LeaderChoice(server_urls(base_url) or (base_url,))
        self.base = ",".join(self.planes.urls)
        self.instance_id = instance_id
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(0.5, timeout_s)),
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
            # HAL_CA_FILE where any control plane is https
            verify=verify_for_servers(self.planes.urls),
            headers=auth_headers(),
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
        limit_s: float | None = None,
    ) -> Any:
        kwargs: dict[str, Any] = {"params": params}
        if json is not None:
            content = _encode(json)
        if content is not None:
            kwargs["content"] = content
            kwargs["headers"] = {"content-type": "application/json"}
        if limit_s is not None:
            kwargs["timeout"] = httpx.Timeout(limit_s, connect=min(0.5, limit_s))
        rnd = self.planes.round()
        while (base := rnd.next_url()) is not None:
            try:
                resp = await self._http.request(method, base + path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as err:  # nothing was sent
                rnd.failed(base, err.__class__.__name__)
                continue
            except httpx.HTTPError as err:
                self.planes.passed(base)
                raise ControlPlaneDown(f"{method} {path}: {err.__class__.__name__}") from err
            if rnd.answered(base, resp.status_code, resp.headers):
                break
        else:
            raise ControlPlaneDown(f"{method} {path}: {rnd.summary()}")
        if resp.status_code >= 500:
            raise ControlPlaneDown(f"{method} {path}: HTTP {resp.status_code}")
        try:
            body = resp.json() if resp.content else None
        except ValueError:
            body = resp.text
        if resp.status_code >= 400:
            raise ControlPlaneRejected(resp.status_code, body)
        return body

    async def get_instance(self, instance_id: str) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] = await self._call("GET", f"/instances/{instance_id}")
        except ControlPlaneRejected as err:
            if err.status == 404:
                return None
            raise
        return body

    async def register(self, body: dict[str, Any]) -> None:
        await self._call("POST", f"/instances/{self.instance_id}/register", json=body)

    async def deregister(self) -> None:
        await self._call("DELETE", f"/instances/{self.instance_id}/deregister", limit_s=1.0)

    async def heartbeat(self, body: dict[str, Any]) -> tuple[int, list[str]]:
        """The interval asked for, and the keys whose copies here are stale (``halStale``,
        HAL's extension; a control plane without it sends none)."""
        answer = await self._call("POST", f"/instances/{self.instance_id}/heartbeat", json=body)
        return int(answer.get("nextHeartbeatMs") or 2000), _strings(answer.get("halStale"))

    async def post_batch(self, events: list[dict[str, Any]]) -> bool:
        """False: the control plane does not know this instance and applied nothing."""
        answer = await self._call(
            "POST",
            "/events/batch",
            json={"instanceId": self.instance_id, "events": events},
            limit_s=10.0,
        )
        return not (isinstance(answer, dict) and answer.get("accepted") is False)

    async def post_inventory(
        self, keys: list[dict[str, Any]], part_keys: int = INVENTORY_PART_KEYS
    ) -> int:
        """A ``full`` inventory: one request when it fits in one part; else several
        ``partial`` ones tagged ``halInventory {syncId, part, last}`` (``hal.cache.directory
        .InventoryPart``), after the last of which the control plane drops the keys no part
        listed. A part refused because the control plane lost the earlier ones (it
        restarted meanwhile) starts the whole inventory over, once. Returns the number of
        requests."""
        part_keys = max(1, part_keys)
        try:
            return await self._post_parts(keys, part_keys)
        except ControlPlaneRejected as err:
            if not _out_of_step(err):
                raise
        return await self._post_parts(keys, part_keys)

    async def _post_parts(self, keys: list[dict[str, Any]], part_keys: int) -> int:
        path = f"/content/instances/{self.instance_id}/keys"
        parts = _parts(keys, part_keys, INVENTORY_PART_BYTES)
        part: bytes | None = next(parts)
        after = next(parts, None)
        if after is None:
            await self._call(
                "POST", path, content=b'{"mode":"full","keys":%s}' % part, limit_s=30.0
            )
            return 1
        sync = uuid.uuid4().hex.encode()
        index = 0
        while part is not None:
            tag = b'{"syncId":"%s","part":%d,"last":%s}' % (
                sync,
                index,
                b"true" if after is None else b"false",
            )
            body = b'{"mode":"partial","halInventory":%s,"keys":%s}' % (tag, part)
            await self._call("POST", path, content=body, limit_s=30.0)
            part, after = after, next(parts, None)
            index += 1
        return index

    async def locate(self, key: bytes, limit_s: float) -> list[dict[str, Any]]:
        return (await self.locate_all(key, limit_s))[0]

    async def locate_all(
        self, key: bytes, limit_s: float
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Fresh holders, nearest first, and the instances whose copies are stale
        (``halStale``, HAL's extension)."""
        path = "/content/locate/" + quote(key, safe="")
        body = await self._call(
            "GET", path, params={"sourceInstanceId": self.instance_id}, limit_s=limit_s
        )
        instances: list[dict[str, Any]] = body.get("instances", [])
        return instances, _strings(body.get("halStale"))

    async def post_keys(self, keys: list[dict[str, Any]]) -> None:
        """A ``partial`` inventory: adds or refreshes these keys, changes no stale mark."""
        path = f"/content/instances/{self.instance_id}/keys"
        await self._call("POST", path, json={"mode": "partial", "keys": keys}, limit_s=10.0)


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _encode(body: Any) -> bytes:
    # Encoded here, ASCII-escaped: a key byte that is not UTF-8 travels as a lone
    # surrogate ("\udcff", see reporter), which httpx's own encoder writes raw and
    # then fails to encode, killing the sender with every later event behind it
    return dumps(body, separators=(",", ":"), allow_nan=False).encode()


def _parts(keys: list[dict[str, Any]], max_keys: int, max_bytes: int) -> Iterator[bytes]:
    """``keys`` as encoded JSON arrays of at most ``max_keys`` entries and (unless a single
    entry is larger) ``max_bytes`` bytes; always at least one, maybe empty."""
    if not keys:
        yield b"[]"
        return
    for start in range(0, len(keys), max_keys):
        yield from _fitting(keys[start : start + max_keys], max_bytes)


def _fitting(chunk: list[dict[str, Any]], max_bytes: int) -> Iterator[bytes]:
    encoded = _encode(chunk)
    if len(encoded) <= max_bytes or len(chunk) == 1:
        yield encoded
        return
    half = len(chunk) // 2
    yield from _fitting(chunk[:half], max_bytes)
    yield from _fitting(chunk[half:], max_bytes)


def _out_of_step(err: ControlPlaneRejected) -> bool:
    """The control plane's answer to a part whose earlier parts it does not have."""
    details = err.body.get("details") if isinstance(err.body, dict) else None
    return (
        err.status == 400
        and isinstance(details, dict)
        and (details.get("field") == "halInventory.part")
    )
