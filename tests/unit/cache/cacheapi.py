"""``Api``: synchronous calls into one in-process control plane (httpx ASGI transport)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from hal.cache.app import CacheControlPlane
from hal.cache.directory import DirectorySettings
from hal.core.clock import VirtualClock

T0 = "2025-01-01T00:00:00Z"


class Api:
    """Synchronous calls into one control plane; ``restart`` reloads it from its database."""

    def __init__(self, db_url: str, settings: DirectorySettings, clock: VirtualClock) -> None:
        self.db_url = db_url
        self.settings = settings
        self.clock = clock
        self.loop = asyncio.new_event_loop()
        self._open()

    def _open(self) -> None:
        self.plane = CacheControlPlane(self.db_url, self.settings, self.clock)
        self.loop.run_until_complete(self.plane.start())
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.plane.app), base_url="http://cache"
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.run_until_complete(self.plane.stop())

    def restart(self) -> None:
        self.close()
        self._open()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        resp = self.loop.run_until_complete(self.client.request(method, path, **kwargs))
        if resp.status_code != 204:
            assert resp.headers["content-type"] == "application/json", resp.headers
        return resp

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.call("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.call("POST", path, **kw)

    def delete(self, path: str, **kw: Any) -> httpx.Response:
        return self.call("DELETE", path, **kw)

    # -- shorthands used by many tests --

    def register(
        self, iid: str, tier: str = "leaf", parent: str | None = None, **extra: Any
    ) -> httpx.Response:
        body: dict[str, Any] = {"address": f"10.0.0.1:{6000 + len(iid)}", "tier": tier, **extra}
        if parent:
            body["parentId"] = parent
        resp = self.post(f"/v1/instances/{iid}/register", json=body)
        return resp

    def tree(self) -> None:
        """root ─ b1 ─ (l1, l2); root ─ b2 ─ l3."""
        self.register("root", "root")
        self.register("b1", "branch", "root")
        self.register("b2", "branch", "root")
        self.register("l1", "leaf", "b1")
        self.register("l2", "leaf", "b1")
        self.register("l3", "leaf", "b2")

    def event(
        self,
        iid: str,
        key: str,
        etype: str = "key_added",
        size: int = 10,
        source: str | None = None,
        ts: str = T0,
    ) -> httpx.Response:
        body: dict[str, Any] = {
            "instanceId": iid,
            "eventType": etype,
            "timestamp": ts,
            "key": key,
            "size": size,
        }
        if source:
            body["sourceInstanceId"] = source
        return self.post("/v1/events", json=body)

    def holders(self, key: str, source: str | None = None) -> list[str]:
        params = {"sourceInstanceId": source} if source else {}
        resp = self.get(f"/v1/content/locate/{key}", params=params)
        assert resp.status_code == 200
        return [i["instanceId"] for i in resp.json()["instances"]]
