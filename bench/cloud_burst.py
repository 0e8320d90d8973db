"""How long a job waits for a node the autoscaler makes, against one on a node that is
already there; and how soon an idle made node goes.

    python bench/cloud_burst.py [ROUNDS]

A live server (SQLite) with one static agent (1 CPU) and a `[cloud]` group of the local
provider (8 CPUs, `idle_seconds = 1`, `interval_seconds = 0.5`, `pending_seconds = 0`).
Each round submits a 1-CPU job (runs on the static node: the peer) and a 4-CPU job
(needs a new node), times each from submission to RUNNING, then times the made node's
removal from its job's end. Prints JSON: medians and every round's figures.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hal.testing.live import LiveServer
from hal.wire.submit import JobSubmit

CONFIG = """
[cloud]
interval_seconds = 0.5
pending_seconds = 0

[[cloud.groups]]
name = "burst"
provider = "local"
nodes = "burst[1-4]"
cpus = 8
memory = "2G"
idle_seconds = 1
[cloud.groups.local]
agent_args = "--unknown-users-as-agent"
"""


def _until(check, timeout: float = 60.0) -> float:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise TimeoutError("the bench waited over a minute")
        time.sleep(0.02)
    return time.monotonic()


def _round(live: LiveServer, workdir: str) -> dict[str, float]:
    client = live.client()
    times: dict[str, float] = {}
    for label, cpus in (("static_start_s", 1), ("new_node_start_s", 4)):
        began = time.monotonic()
        job = client.submit(
            JobSubmit(script="#!/bin/sh\nsleep 1\n", cpus_per_task=cpus, workdir=workdir)
        ).job_id
        started = _until(lambda job=job: client.job(job).state != "PENDING")  # type: ignore[misc]
        times[label] = started - began
    ended = _until(lambda job=job: client.job(job).state not in ("PENDING", "RUNNING"))  # type: ignore[misc]
    gone = _until(lambda: not any(n.name.startswith("burst") for n in client.nodes()))
    times["removed_after_end_s"] = gone - ended
    return times


def main(rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        toml = Path(tmp) / "hal.toml"
        toml.write_text(CONFIG)
        with LiveServer(Path(tmp) / "state", config_file=toml) as live:
            live.start_agent("n1", cpus=1)
            _until(lambda: len(live.client().nodes()) == 1)
            runs = [_round(live, tmp) for _ in range(rounds)]
    keys = runs[0].keys()
    return {
        "benchmark": "cloud-burst",
        "rounds": rounds,
        "median": {k: round(statistics.median(r[k] for r in runs), 3) for k in keys},
        "runs": runs,
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=2))
