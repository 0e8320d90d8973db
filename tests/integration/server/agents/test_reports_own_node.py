"""An agent's reports speak for its own node: a report of a job that runs on node2, sent
through node1's sync, ended that job (COMPLETED while its process ran on), so a node's
token could end any job of the cluster. Now it is ignored; node2's own report ends it."""

from __future__ import annotations

from typing import Any

import httpx

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit


def post(live: LiveServer, path: str, body: dict[str, Any]) -> httpx.Response:
    auth = {"Authorization": f"Bearer {live.token}"}
    return http.post(live.url + path, json=body, headers=auth, timeout=30)


def test_a_report_through_another_nodes_channel_is_ignored(each_store: LiveServer) -> None:
    for node in ("n1", "n2"):
        registered = post(
            each_store, "/v1/agent/register", {"node": node, "cpus": 2, "memory_bytes": 2**31}
        )
        assert registered.status_code == 200
    launches: list[dict[str, Any]] = []

    def launched() -> bool:
        r = post(each_store, "/v1/agent/n2/sync", {"wait_seconds": 1})
        launches.extend(i for i in r.json()["instructions"] if i["op"] == "launch")
        return bool(launches)

    with each_store.client() as admin:
        job = admin.submit(JobSubmit(script="#!/bin/sh\ntrue\n", nodelist=["n2"])).job_id
        wait_until(launched, 30, message="the launch on n2")
        started = {"seq": 1, "job_id": job, "attempt": launches[0]["attempt"], "time": 1.0}
        reports = [
            {**started, "kind": "started"},
            {**started, "seq": 2, "kind": "finished", "state": "COMPLETED"},
        ]
        sync = {"reports": reports, "wait_seconds": 0}
        assert post(each_store, "/v1/agent/n1/sync", sync).status_code == 200
        assert admin.job(job).state == "RUNNING"
        assert post(each_store, "/v1/agent/n2/sync", sync).status_code == 200
        assert admin.job(job).state == "COMPLETED"
