"""Helpers shared by the observability integration tests (importable by name)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from hal.testing.live import LiveServer


def query(prom: str, expr: str) -> dict[str, Any]:
    r = httpx.get(prom + "/api/v1/query", params={"query": expr, "time": time.time()}, timeout=5)
    body: dict[str, Any] = r.json()
    return body


def finished(live: LiveServer, job_id: int) -> bool:
    with live.client() as c:
        return c.job(str(job_id)).state in ("COMPLETED", "FAILED", "CANCELLED")
