"""A standby keeps the jobs read ahead (``JobRowMemo``, with each row's version on
PostgreSQL): when it takes the lead, the jobs it had read are taken as they were, and
only what the leader wrote since (a job cancelled, one submitted just before the kill)
is fetched again; the new leader serves those changes at once (docs/admin/failover.md)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.bench.failover import ServerProcess
from hal.server.standby import PRELOAD_S
from hal.server.users import ensure_user
from hal.state.store import SqlStateStore
from hal.testing import http
from hal.testing.live import stop_process, wait_until

pytestmark = pytest.mark.live  # starts `hal server` processes


@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    servers = [ServerProcess(pg_url, tmp_path / name) for name in ("a", "b")]
    try:
        wait_until(
            lambda: sorted(str(s.role()) for s in servers) == ["leader", "standby"],
            timeout=90,
            message="one leader and one standby",
        )
        yield sorted(servers, key=lambda s: s.role() != "leader")
    finally:
        for server in servers:
            stop_process(server.proc)


def test_the_new_leader_takes_the_jobs_read_ahead_and_serves_what_changed_since(
    pg_url: str, pair: list[ServerProcess]
) -> None:
    store = SqlStateStore(pg_url)
    token = ensure_user(store, "alice", admin=True, now=time.time())
    store.close()
    auth = {"Authorization": f"Bearer {token}"}
    leader, standby = pair
    body = {
        "jobs": [
            {"script": "#!/bin/sh\ntrue\n", "name": f"held-{i}", "hold": True} for i in range(200)
        ]
    }
    done = http.post(leader.url + "/v1/jobs/batch", json=body, headers=auth, timeout=60)
    assert done.status_code == 201, done.text
    ids = [int(r["job_id"]) for r in done.json()["results"]]
    time.sleep(3 * PRELOAD_S)  # the standby reads them ahead (every PRELOAD_S)

    # the leader's last writes, then its kill -9: the standby may not have read these
    gone = http.delete(f"{leader.url}/v1/jobs/{ids[0]}", headers=auth, timeout=30)
    assert gone.status_code in (200, 202, 204), gone.text
    late = {"script": "#!/bin/sh\ntrue\n", "name": "late", "hold": True}
    added = http.post(leader.url + "/v1/jobs", json=late, headers=auth, timeout=30)
    assert added.status_code == 201, added.text
    late_id = int(added.json()["job_id"])
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)

    wait_until(lambda: standby.role() == "leader", timeout=60, message="the standby to lead")
    wait_until(lambda: standby.steps() is not None, timeout=10, message="its takeover line")
    steps = standby.steps()
    assert steps is not None
    assert steps["jobs"] == 201
    # the 199 unchanged jobs as read ahead (all 201 if a read ahead came after the writes)
    assert 199 <= steps["jobs_read_ahead"] <= 201
    assert steps["load_jobs"] >= 0

    listed = http.get(standby.url + "/v1/jobs?state=all", headers=auth, timeout=30)
    assert listed.status_code == 200, listed.text
    states = {j["id"]: j["state"] for j in listed.json()["jobs"]}
    assert set(states) == {*ids, late_id}
    assert states[ids[0]] == "CANCELLED"
    assert states[late_id] == "PENDING"
    assert states[ids[1]] == "PENDING"
