"""The server's requests counted by route and by user: sdiag's "Remote Procedure Call
statistics" sections and its ``Server thread count`` (``GET /v1/diag``).

``CountRequests`` is a plain ASGI middleware (no extra task per request, as
``hal.api.app.SizeGuard``): it times each HTTP request and adds it, once answered, to its
route (method and path template, so ``/v1/jobs/7`` and ``/v1/jobs/8`` are one row) and to
its caller, the user whose token the server already knows (``TokenCache.known``: a
dictionary look-up; a request with no valid token counts under its route only). Routes
with a Slurm equivalent carry that message type's name and number (``SLURM_TYPES``,
seen in the peer's sdiag: docs/slurm-checks.md); the others their route.
A long poll (the agents' sync) counts the time it was held. ``reset`` is sdiag -r.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from hal.state.cluster import Caller
from hal.wire.diag import RpcCount

# (method, route) → (Slurm's message type, its number), as Slurm 22.05.8's sdiag shows them
SLURM_TYPES: dict[tuple[str, str], tuple[str, int]] = {
    ("POST", "/v1/agent/register"): ("MESSAGE_NODE_REGISTRATION_STATUS", 1002),
    ("POST", "/v1/reconfigure"): ("REQUEST_RECONFIGURE", 1003),
    ("GET", "/v1/config"): ("REQUEST_BUILD_INFO", 2001),
    ("GET", "/v1/jobs"): ("REQUEST_JOB_INFO", 2003),
    ("GET", "/v1/nodes"): ("REQUEST_NODE_INFO", 2007),
    ("GET", "/v1/partitions"): ("REQUEST_PARTITION_INFO", 2009),
    ("GET", "/v1/jobs/{job_id}"): ("REQUEST_JOB_INFO_SINGLE", 2021),
    ("GET", "/v1/diag"): ("REQUEST_STATS_INFO", 2035),
    ("POST", "/v1/diag/reset"): ("REQUEST_STATS_INFO", 2035),  # sdiag -r: the same RPC
    ("GET", "/v1/nodes/{name}"): ("REQUEST_NODE_INFO_SINGLE", 2040),
    # scontrol hold and release are job updates in Slurm (Priority=0 and back)
    ("PATCH", "/v1/jobs/{job_id}"): ("REQUEST_UPDATE_JOB", 3001),
    ("POST", "/v1/jobs/{job_id}/hold"): ("REQUEST_UPDATE_JOB", 3001),
    ("POST", "/v1/jobs/{job_id}/release"): ("REQUEST_UPDATE_JOB", 3001),
    ("PATCH", "/v1/nodes/{name}"): ("REQUEST_UPDATE_NODE", 3002),
    ("POST", "/v1/jobs"): ("REQUEST_SUBMIT_BATCH_JOB", 4003),
    ("DELETE", "/v1/jobs/{job_id}"): ("REQUEST_KILL_JOB", 5032),
}


@dataclass(slots=True)
class Tally:
    count: int = 0
    total_s: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds


@dataclass(slots=True)
class RequestCounts:
    """What ``CountRequests`` counted; the event loop's alone (no lock)."""

    in_flight: int = 0
    by_type: dict[tuple[str, int], Tally] = field(default_factory=dict)
    by_user: dict[str, Tally] = field(default_factory=dict)

    def add(self, kind: tuple[str, int], user: str | None, seconds: float) -> None:
        self.by_type.setdefault(kind, Tally()).add(seconds)
        if user is not None:
            self.by_user.setdefault(user, Tally()).add(seconds)

    def reset(self) -> None:
        """sdiag -r: Slurm 22.05.8 empties both tables (the request in flight stays)."""
        self.by_type.clear()
        self.by_user.clear()

    def rows(self) -> tuple[list[RpcCount], list[RpcCount]]:
        """Both tables, most requests first (sdiag's default order), then by name."""

        def rows(items: list[tuple[str, int, Tally]]) -> list[RpcCount]:
            ordered = sorted(items, key=lambda i: (-i[2].count, i[0]))
            return [RpcCount(name=n, id=i, count=t.count, total_s=t.total_s) for n, i, t in ordered]

        kinds = [(name, number, t) for (name, number), t in self.by_type.items()]
        return rows(kinds), rows([(user, 0, t) for user, t in self.by_user.items()])


def request_kind(method: str, route: str) -> tuple[str, int]:
    """Slurm's message type for a route, else the route itself with number 0."""
    return SLURM_TYPES.get((method, route), (f"{method} {route}", 0))


class KnownTokens(Protocol):
    """``hal.server.auth.TokenCache`` as this module reads it (the plane imports no API)."""

    def known(self, authorization: str | None) -> Caller | None: ...


class CountRequests:
    """ASGI middleware adding every HTTP request to ``counts``."""

    def __init__(
        self,
        app: ASGIApp,
        counts: RequestCounts,
        tokens: Callable[[], KnownTokens],
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        self.counts = counts
        self.tokens = tokens
        # durations, not times of day: a monotonic timer, as the metrics' histograms use
        self.timer = timer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        counts = self.counts
        counts.in_flight += 1
        started = self.timer()
        try:
            await self.app(scope, receive, send)
        finally:
            counts.in_flight -= 1
            route = getattr(scope.get("route"), "path", None)
            if route is not None:  # (a path no route matched: a 404 of no interest)
                counts.add(
                    request_kind(scope["method"], route), self._user(scope), self.timer() - started
                )

    def _user(self, scope: Scope) -> str | None:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                caller = self.tokens().known(value.decode("latin-1"))
                return None if caller is None else caller.name
        return None
