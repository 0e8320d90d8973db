"""1,000,000 tasks in one session with flat memory (issue 8): the broker keeps nothing
per finished task and the client's ``map`` window bounds what is in flight."""

from __future__ import annotations

import psutil
import pytest

from hal.htc import HtcClient


@pytest.mark.slow
def test_a_million_tasks_in_one_session_run_in_flat_memory(hc: HtcClient) -> None:
    me = psutil.Process()
    with hc.open_session("hal.htc.examples:noop", max_workers=2) as s:
        # The broker starts with the first session: find it once one is open.
        broker = next(p for p in me.children() if "hal.htc.brokerd" in " ".join(p.cmdline()))
        results = s.map(((),) * 1_000_000, star=True, ordered=False)
        rss = []
        for i, _ in enumerate(results, 1):
            if i % 100_000 == 0:
                rss.append((broker.memory_info().rss, me.memory_info().rss))
        assert i == 1_000_000
    # After the first 200k (windows and buffers at their size) memory stays flat.
    broker_growth = (rss[-1][0] - rss[1][0]) / 2**20
    client_growth = (rss[-1][1] - rss[1][1]) / 2**20
    assert broker_growth < 32 and client_growth < 32, rss
