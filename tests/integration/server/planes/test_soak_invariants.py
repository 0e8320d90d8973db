"""``hal.bench.soak_invariants`` finds each kind of damage a failover could leave: a
database with one job of each planted (rows written straight into HAL's tables), and
the count of each check must name exactly that job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hal.bench.soak_invariants import check, main
from hal.state import schema
from hal.state.store import SqlStateStore


def _job(job_id: int, name: str, state: str, **more: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": job_id,
        "user_name": "alice",
        "name": name,
        "partition": "main",
        "state": state,
        "reason": "None",
        "priority": 1,
        "submit_time": 100.0,
        "time_limit": 600,
        "spec": "{}",
        "script_id": 1,
        "restarts": 0,
        "start_time": None,
        "end_time": None,
        "allocation": None,
    }
    return {**row, **more}


def test_each_planted_fault_is_counted_once(pg_url: str, tmp_path: Path) -> None:
    store = SqlStateStore(pg_url)
    store.migrate()  # (HAL's tables, as a server makes them)
    ran = {"start_time": 110.0, "end_time": 120.0}
    jobs = [
        _job(1, "fine", "COMPLETED", **ran),
        _job(2, "twin", "PENDING"),
        _job(3, "twin", "PENDING"),  # a batch applied twice
        _job(4, "restarted-silently", "COMPLETED", restarts=1, **ran),
        _job(5, "started-twice", "COMPLETED", **ran),
        _job(6, "on-a-gone-node", "RUNNING", start_time=110.0, allocation=_on("gone1")),
        _job(7, "no-end", "COMPLETED", start_time=110.0),
        _job(8, "overlapping", "COMPLETED", restarts=1, **ran),
        _job(9, "requeued-properly", "RUNNING", restarts=1, start_time=130.0, allocation=_on("n1")),
    ]
    runs = [
        {"job_id": 8, "attempt": 0, "state": "NODE_FAIL", "start_time": 105.0, "end_time": 115.0},
        {"job_id": 9, "attempt": 0, "state": "NODE_FAIL", "start_time": 105.0, "end_time": 115.0},
    ]
    for run in runs:
        run.update(exit_code=0, exit_signal=0, partition="main", submit_time=100.0)
        run.update(max_rss=0, cpu_seconds=0.0)
    started = [
        {"time": 110.0, "kind": "job.started", "job_id": i, "state": "RUNNING"}
        for i in (1, 5, 5, 9, 9)
    ]
    node = {"name": "n1", "cpus": 1, "memory_bytes": 1 << 30, "gpus": 0, "state": "UP"}
    with store.engine.begin() as conn:
        conn.execute(schema.jobs.insert(), jobs)
        conn.execute(schema.job_runs.insert(), runs)
        conn.execute(schema.events.insert(), started)
        conn.execute(schema.nodes.insert(), [node])
    store.close()

    found = check(pg_url, [*range(1, 10), 42, 1])  # 42: acknowledged, never stored
    assert found["examples"] == {
        "lost": [42],
        "duplicated": [1, 3],  # 1: acknowledged twice; 3: a second "twin"
        "ran_twice": [4, 5, 8],
        "unaccounted": [7],
        "stranded": [6],
    }
    assert (found["lost"], found["duplicated"], found["ran_twice"]) == (1, 2, 3)
    assert found["requeued_runs"] == 2 and found["ok"] is False

    acked = tmp_path / "acked"
    acked.write_text("1\n9\n")
    assert main([pg_url, "--acked", str(acked)]) == 1  # the faults above, by hand


def _on(node: str) -> str:
    return json.dumps({"nodes": [node], "per_node": [[1, 0, 0]], "gpu_ids": [[]]})
