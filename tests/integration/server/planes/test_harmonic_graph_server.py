"""``hal harmonic graph`` against a real server: two agents (played by hand over the
agent channel, as in tests/integration/server/agents) each report their job's side of
one TCP connection over 127.0.0.1, as local agents on one machine do, and the edge
between the two jobs and their workloads shows with the bytes per second they sent, and
their bytes in ``hal_harmonic_bytes_total``. An unknown ``--job`` is refused, saying so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

PORT = 5432  # the service's
CLIENT_PORT = 40000  # the client's end of the connection


def post(live: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {live.agent_token}"}
    r = http.post(live.url + path, json=body, headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


def launched(live: LiveServer, node: str, job_id: int) -> int:
    """Wait for ``job_id``'s launch on ``node``; its attempt, once reported started."""
    found: list[dict[str, Any]] = []

    def launch() -> bool:
        reply = post(live, f"/v1/agent/{node}/sync", {"wait_seconds": 1})
        found.extend(i for i in reply["instructions"] if i["op"] == "launch")
        return any(i["job_id"] == job_id for i in found)

    wait_until(launch, 30, message=f"job {job_id}'s launch on {node}")
    attempt = int(next(i for i in found if i["job_id"] == job_id)["attempt"])
    report = {"seq": 1, "job_id": job_id, "attempt": attempt, "time": 1.0, "kind": "started"}
    post(live, f"/v1/agent/{node}/sync", {"reports": [report], "wait_seconds": 0})
    return attempt


def side(
    job_id: int, attempt: int, local: int, remote: int, sent: int, listen: bool
) -> dict[str, Any]:
    loopback = "127.0.0.1"
    return {
        "job_id": job_id,
        "attempt": attempt,
        "interval_seconds": 10.0,
        "listening": [{"address": loopback, "port": PORT}] if listen else [],
        "flows": [
            {
                "local": {"address": loopback, "port": local},
                "remote": {"address": loopback, "port": remote},
                "bytes_sent": sent,
                "bytes_received": 0,
            }
        ],
    }


def test_two_syncs_carrying_traffic_make_an_edge_in_hal_harmonic_graph(tmp_path: Path) -> None:
    with LiveServer(tmp_path) as live:
        for node in ("n1", "n2"):
            post(live, "/v1/agent/register", {"node": node, "cpus": 2, "memory_bytes": 2**31})
        with live.client() as admin:
            script = "#!/bin/sh\nsleep 600\n"
            db = admin.submit(JobSubmit(script=script, name="db", nodelist=["n1"])).job_id
            client = admin.submit(JobSubmit(script=script, name="client", nodelist=["n2"])).job_id
        db_attempt, client_attempt = launched(live, "n1", db), launched(live, "n2", client)

        # the service answers 300 kB, the client sends 100 kB, over the same 10 s
        service = side(db, db_attempt, PORT, CLIENT_PORT, 300_000, listen=True)
        post(live, "/v1/agent/n1/sync", {"wait_seconds": 0, "traffic": [service]})
        calling = side(client, client_attempt, CLIENT_PORT, PORT, 100_000, listen=False)
        post(live, "/v1/agent/n2/sync", {"wait_seconds": 0, "traffic": [calling]})

        done = live.cli("harmonic", "graph", "--json")
        assert done.returncode == 0, done.stderr
        graph = json.loads(done.stdout)
        (edge,) = graph["jobs"]
        assert {edge["job_id"], edge["peer_job_id"]} == {str(db), str(client)}
        # 400 kB in the 10 s measured, over the time watched since (the query came later)
        watched = 10.0 + graph["now"] - edge["updated"]
        assert edge["bytes_per_second"] == pytest.approx(400_000 / watched, rel=0.01)
        assert edge["since"] == pytest.approx(edge["updated"] - 10.0)
        (workloads,) = graph["identities"]
        assert {workloads["identity"], workloads["peer_identity"]} == {"admin/db", "admin/client"}

        # n1 and n2 have no topology: their bytes crossed a switch, as far as HAL knows
        metrics = http.get(live.url + "/metrics", timeout=10).text
        assert 'hal_harmonic_bytes_total{distance="switch"} 400000.0' in metrics
        assert 'hal_harmonic_bytes_total{distance="node"} 0.0' in metrics

        mine = json.loads(live.cli("harmonic", "graph", "--job", str(client), "--json").stdout)
        assert [(e["job_id"], e["peer_job_id"]) for e in mine["jobs"]] == [(str(client), str(db))]
        assert mine["identities"][0]["identity"] == "admin/client"

        table = live.cli("harmonic", "graph", "--user", "admin")
        assert table.returncode == 0, table.stderr
        assert "admin/db" in table.stdout and "kB/s" in table.stdout

        unknown = live.cli("harmonic", "graph", "--job", "999999")
        assert unknown.returncode != 0
        assert "job 999999 is unknown" in unknown.stderr
