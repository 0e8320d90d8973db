"""Helpers shared by the observability integration tests (importable by name)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from hal.testing import http
from hal.testing.live import LiveServer

# the dashboard's tests: Debian's chromium, headless, driven by Playwright
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and shutil.which("chromium") is None,
        reason="chromium not installed (Debian package 'chromium')",
    ),
]


def query(prom: str, expr: str) -> dict[str, Any]:
    r = http.get(prom + "/api/v1/query", params={"query": expr, "time": time.time()}, timeout=5)
    body: dict[str, Any] = r.json()
    return body


def finished(live: LiveServer, job_id: int) -> bool:
    with live.client() as c:
        return c.job(str(job_id)).state in ("COMPLETED", "FAILED", "CANCELLED")
