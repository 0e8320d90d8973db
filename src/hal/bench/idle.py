"""``hal bench idle``: CPU used by an idle control plane with two connected agents.

Target (issue 2): ≤ 2 % of one core. Measured as the server process's CPU seconds over a
window divided by the window, with agents long-polling as in production.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

from hal.bench.localup import local_cluster


def run_idle_bench(window_s: float = 30.0, agents: int = 2) -> dict[str, Any]:
    with local_cluster(agents=agents) as up:
        time.sleep(5)  # let agents settle into their long polls
        server = psutil.Process(up.pid)
        before = server.cpu_times()
        time.sleep(window_s)
        after = server.cpu_times()
    used = (after.user - before.user) + (after.system - before.system)
    return {
        "benchmark": "idle",
        "window_s": window_s,
        "agents": agents,
        "server_cpu_s": round(used, 4),
        "server_cpu_percent": round(100 * used / window_s, 3),
        "target_percent": 2.0,
        "met": 100 * used / window_s <= 2.0,
    }
