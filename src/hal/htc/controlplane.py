"""The broker's one seam to the control plane: start, cancel and watch worker jobs.

Workers are ordinary HAL jobs, so they go through the control plane's job path (admission,
scheduling, accounting against their session's user). The broker is a separate process
and asks over HTTP, at ``POST /v1/htc/internal/workers`` with the key the control plane
gave it when it started the broker. Tests pass a fake ``ControlPlane``.
"""

from __future__ import annotations

from typing import Protocol

import httpx

from hal.htc.rest import WorkerSync, WorkerSyncReply

KEY_HEADER = "X-Hal-Htc-Key"
TIMEOUT_S = 10.0


class ControlPlane(Protocol):
    async def sync(self, request: WorkerSync) -> WorkerSyncReply:
        """Launch ``request.launch``, cancel ``request.cancel``, report the states of
        ``request.watch`` (``GONE`` for jobs it no longer knows) and the CPU capacity."""
        ...

    async def close(self) -> None: ...


class HttpControlPlane:
    def __init__(self, url: str, key: str) -> None:
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={KEY_HEADER: key, "Content-Type": "application/json"},
            timeout=TIMEOUT_S,
        )

    async def sync(self, request: WorkerSync) -> WorkerSyncReply:
        r = await self._http.post("/v1/htc/internal/workers", content=request.model_dump_json())
        r.raise_for_status()
        return WorkerSyncReply.model_validate_json(r.content)

    async def close(self) -> None:
        await self._http.aclose()
