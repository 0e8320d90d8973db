"""The server's data view against the real cache control plane app (in process, through
httpx's ASGI transport, on a virtual clock): a cache instance that has gone silent
(``inactive``: its process died, or it reports itself unhealthy) holds nothing the
scheduler may count on.

    root ─┬─ n1
          └─ n2
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hal.cache.app import CacheControlPlane
from hal.cache.directory import DirectorySettings
from hal.config.model import DataConfig, HalConfig
from hal.core.clock import VirtualClock
from hal.server.data import DataService
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.testing.builders import make_node

GB = 1_000_000_000


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_700_000_000.0)


@pytest.fixture
def hal_cluster(tmp_path: Path, clock: VirtualClock) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    c = Cluster(store, HalConfig(cluster_name="test"), clock)
    c.nodes = {name: make_node(name).build() for name in ("n1", "n2")}
    yield c
    store.close()


async def _call(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> None:
    r = await http.request(method, path, **kw)
    assert r.status_code in (200, 201, 202, 204), r.text


def test_copies_on_an_inactive_cache_instance_are_not_counted(
    tmp_path: Path, clock: VirtualClock, hal_cluster: Cluster
) -> None:
    """n1's leaf holds the input, n2's does not; then n1's cache process dies (no more
    heartbeats): once the control plane calls it inactive, the view drops its copy, so
    a data job is no longer steered to n1 (or kept waiting for it) for a copy nobody can
    read there."""

    async def run() -> None:
        settings = DirectorySettings()
        plane = CacheControlPlane(f"sqlite:///{tmp_path / 'cache.db'}", settings, clock)
        await plane.start()
        transport = httpx.ASGITransport(app=plane.app)
        http = httpx.AsyncClient(transport=transport, base_url="http://cache")
        try:
            for iid, tier, parent in (("root", "root", None), ("n1", "leaf", "root"),
                                      ("n2", "leaf", "root")):  # fmt: skip
                body: dict[str, object] = {"address": f"127.0.0.1:{6400 + len(iid)}", "tier": tier}
                if parent:
                    body["parentId"] = parent
                await _call(http, "POST", f"/v1/instances/{iid}/register", json=body)
            await _call(http, "POST", "/v1/events", json={
                "instanceId": "n1", "eventType": "key_added", "key": "ds",
                "timestamp": "2025-01-01T00:00:00Z", "size": GB,
            })  # fmt: skip

            service = DataService(
                DataConfig(cache_url="http://cache"), hal_cluster, transport=transport
            )
            await service.start()
            try:
                await service.prime(["ds"])
                await service.refresh()
                assert service.view().holders["ds"] == {"n1": GB}  # alive: counted

                # n1 goes silent; root and n2 keep heartbeating
                clock.advance(settings.inactive_after_s + 1)
                for iid in ("root", "n2"):
                    await _call(http, "POST", f"/v1/instances/{iid}/heartbeat", json={})
                r = await http.get("/v1/instances/n1")
                assert r.json()["status"] == "inactive"
                await service.prime(["ds"])
                await service.refresh()
                view = service.view()
            finally:
                await service.stop()
        finally:
            await http.aclose()
            await plane.stop()

        assert "n1" not in view.holders.get("ds", {})
        # no locality left to prefer: both nodes read it from the origin alike
        assert view.transfer(["ds"], "n1") == view.transfer(["ds"], "n2")
        assert view.transfer(["ds"], "n1").local_bytes == 0

    asyncio.run(run())
