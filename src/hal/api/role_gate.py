"""The HTTP edge of failover (docs/admin/failover.md): every response says the server's
role (``X-HAL-Role``), ``GET /v1/ha`` says who leads, and a server that does not lead
(a standby, or one still loading after taking the lead) serves nothing but its health,
``/v1/ha`` and ``/metrics``: every other request is sent to the leader (307, the same
method and body) or told to come back (503, ``Retry-After: 1``). A standby never applies
a write: its mirror is not loaded and its sessions may not write.

Every answer of a PostgreSQL server also carries ``X-HAL-Servers``: the advertised URLs
of the database's live servers, the leader first (``Leadership.servers_header``, made by
the server's heartbeat every few seconds, not per request), so a client given one address
learns the others (``hal.client.servers``).
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hal.server.standby import Leadership

ROLE_HEADER = "X-HAL-Role"
LEADER_HEADER = "X-HAL-Leader"
SERVERS_HEADER = "X-HAL-Servers"
_ROLE_KEY, _SERVERS_KEY = ROLE_HEADER.lower().encode(), SERVERS_HEADER.lower().encode()  # (ASGI)
# what a server that does not lead still answers itself
OPEN_PATHS = frozenset({"/healthz", "/v1/ha", "/metrics"})


def install(app: FastAPI, leadership: Leadership) -> None:
    """``GET /v1/ha`` (no token: clients find the leader with it) and the gate."""

    @app.get("/v1/ha", tags=["health"])
    async def ha() -> dict[str, object]:
        """This server's role, the leader's epoch, URL and start, this server's name, and
        the live servers of its database (``peers``: each one's name, URL and role)."""
        return leadership.status()

    app.add_middleware(RoleGate, leadership=leadership)


class RoleGate:
    """A plain ASGI middleware (as ``SizeGuard``): the role header on every response, and
    requests a non-leader may not serve answered with a 307 or a 503."""

    def __init__(self, app: ASGIApp, leadership: Leadership) -> None:
        self.app = app
        self.leadership = leadership

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        role = self.leadership.role
        added = [(_ROLE_KEY, role.encode())]
        servers = self.leadership.servers_header
        if servers:
            added.append((_SERVERS_KEY, servers.encode()))
        if role == "leader" or scope["path"] in OPEN_PATHS:

            async def send_with_role(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", ()), *added]
                await send(message)

            await self.app(scope, receive, send_with_role)
            return
        await self._refuse(role, scope)(scope, receive, send)

    def _refuse(self, role: str, scope: Scope) -> JSONResponse:
        leader = self.leadership.leader_url() if role == "standby" else None
        headers = {ROLE_HEADER: role}
        if self.leadership.servers_header:
            headers[SERVERS_HEADER] = self.leadership.servers_header
        if leader is None:
            detail = (
                "this HAL server is a standby and no leader is answering yet; retry in a second"
                if role == "standby"
                else "this HAL server is taking the lead and loading the cluster's state; "
                "retry in a second"
            )
            status = 503
            headers["Retry-After"] = "1"
        else:
            detail = f"this HAL server is a standby; the leader is at {leader}"
            status = 307
            query = scope.get("query_string", b"").decode("latin-1")
            # the path as it came, percent-encoded: a decoded one may hold characters a
            # header cannot carry
            raw = scope.get("raw_path")
            path = raw.decode("latin-1") if raw else quote(scope["path"], safe="/")
            path = scope.get("root_path", "") + path
            headers["Location"] = leader.rstrip("/") + path + (f"?{query}" if query else "")
            headers[LEADER_HEADER] = leader
        body = {
            "error": "standby",
            "code": "standby",
            "status": status,
            "title": "standby",
            "detail": detail,
        }
        return JSONResponse(body, status_code=status, headers=headers)
