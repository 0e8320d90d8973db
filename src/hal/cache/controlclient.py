"""``ControlPlaneClient``: what a cache node says to the control plane, over HTTP only.

Every call has a short timeout: a node must keep serving its clients while the control plane
is slow or gone, so a failure here is an answer (``ControlPlaneDown``), never a hang.
"""

from __future__ import annotations

from json import dumps
from typing import Any
from urllib.parse import quote

import httpx


class ControlPlaneDown(Exception):
    """Unreachable, timed out, or answered 5xx: try again later."""


class ControlPlaneRejected(Exception):
    """A 4xx answer: the request itself is wrong (or the instance is unknown, 404)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"control plane answered {status}: {body}")
        self.status = status
        self.body = body


def base_url_from_events_url(events_url: str) -> str:
    """The control-plane base is the events URL without ``/events`` (behaviour sheet)."""
    url = events_url.rstrip("/")
    return url[: -len("/events")] if url.endswith("/events") else url


class ControlPlaneClient:
    def __init__(self, base_url: str, instance_id: str, timeout_s: float = 2.0) -> None:
        self.base = base_url.rstrip("/")
        self.instance_id = instance_id
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(0.5, timeout_s)),
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        limit_s: float | None = None,
    ) -> Any:
        kwargs: dict[str, Any] = {"params": params}
        if json is not None:
            # Encoded here, ASCII-escaped: a key byte that is not UTF-8 travels as a lone
            # surrogate ("\udcff", see reporter), which httpx's own encoder writes raw and
            # then fails to encode, killing the sender with every later event behind it
            kwargs["content"] = dumps(json, separators=(",", ":"), allow_nan=False).encode()
            kwargs["headers"] = {"content-type": "application/json"}
        if limit_s is not None:
            kwargs["timeout"] = httpx.Timeout(limit_s, connect=min(0.5, limit_s))
        try:
            resp = await self._http.request(method, self.base + path, **kwargs)
        except httpx.HTTPError as err:
            raise ControlPlaneDown(f"{method} {path}: {err.__class__.__name__}") from err
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

    async def heartbeat(self, body: dict[str, Any]) -> int:
        answer = await self._call("POST", f"/instances/{self.instance_id}/heartbeat", json=body)
        return int(answer.get("nextHeartbeatMs") or 2000)

    async def post_batch(self, events: list[dict[str, Any]]) -> bool:
        """False: the control plane does not know this instance and applied nothing."""
        answer = await self._call(
            "POST",
            "/events/batch",
            json={"instanceId": self.instance_id, "events": events},
            limit_s=10.0,
        )
        return not (isinstance(answer, dict) and answer.get("accepted") is False)

    async def post_inventory(self, keys: list[dict[str, Any]]) -> None:
        await self._call(
            "POST",
            f"/content/instances/{self.instance_id}/keys",
            json={"mode": "full", "keys": keys},
            limit_s=30.0,
        )

    async def locate(self, key: bytes, limit_s: float) -> list[dict[str, Any]]:
        path = "/content/locate/" + quote(key, safe="")
        body = await self._call(
            "GET", path, params={"sourceInstanceId": self.instance_id}, limit_s=limit_s
        )
        instances: list[dict[str, Any]] = body.get("instances", [])
        return instances
