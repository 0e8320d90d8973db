"""The broker's one seam to the control plane: start, cancel and watch worker jobs.

Workers are ordinary HAL jobs, so they go through the control plane's job path (admission,
scheduling, accounting against their session's user). The broker is a separate process
and asks over HTTP, at ``POST /v1/htc/internal/workers`` with the key the control plane
gave it when it started the broker (``url``: that server's address, or several
comma-separated, of which the leader is found as ``hal.client.servers`` says). Tests pass
a fake ``ControlPlane``.
"""

from __future__ import annotations

from typing import Protocol

import httpx

from hal.client.servers import LeaderChoice, server_urls
from hal.host.tls import verify_for_servers
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
        self._servers = LeaderChoice(server_urls(url) or (url,))
        self._http = httpx.AsyncClient(
            headers={KEY_HEADER: key, "Content-Type": "application/json"},
            timeout=TIMEOUT_S,
            # HAL_CA_FILE where any server is https; the CA store read only then
            verify=verify_for_servers(self._servers.urls),
        )

    async def sync(self, request: WorkerSync) -> WorkerSyncReply:
        """One round over the servers. It moves on only where nothing was sent (a
        refused connection) or a standby answered: a sync sent twice would launch its
        worker jobs twice, so a lost answer is raised as before."""
        content = request.model_dump_json()
        rnd = self._servers.round()
        while (url := rnd.next_url()) is not None:
            try:
                r = await self._http.post(url + "/v1/htc/internal/workers", content=content)
            except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                rnd.failed(url, f"{err.__class__.__name__}: {err}")
                continue
            if rnd.answered(url, r.status_code, r.headers):
                r.raise_for_status()
                return WorkerSyncReply.model_validate_json(r.content)
        raise httpx.ConnectError(rnd.summary())

    async def close(self) -> None:
        await self._http.aclose()
