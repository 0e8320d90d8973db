"""A spot interruption, live: from the notice to the job running again on another node,
and the work lost with and without ``--signal``.

    python bench/cloud_interrupt.py [--rounds N] [--interval SECONDS] [--json]

A live server (SQLite) with one static agent (1 CPU) and a local spot group
(``market = "spot"``, 2-CPU nodes): each node is a real ``hal agent`` reading its own EC2
metadata stand-in (``hal.cloud.imds``) every ``--interval`` seconds (default 5, the
agent's default and AWS's advice). Each round runs two jobs of 2 CPUs, one after the
other, each counting 0.25 s steps (one line per step in a file) and interrupted once,
8 s plus a random part of the poll interval into its run (so the notice lands anywhere in
the agent's poll), by a notice injected into its node's stand-in
(``POST /hal/interrupt``, the machine to go 120 s later):

- ``signal``: ``--signal=B:USR1@30``; it writes a checkpoint between two steps at the
  signal and exits, and its next run goes on from it;
- ``plain``: no ``--signal`` and no checkpoint; it is ended at once and starts over.

Per job: ``notice_to_server_s`` (the notice injected → the control plane had it: the
agent's poll), ``notice_to_requeued_s`` (→ back in the queue), ``notice_to_running_s``
(→ its script started again on a new node, by the script's own clock; includes the new
node's boot), ``lost_work_s`` (the steps it did twice × 0.25 s, as the job itself counts
them) and ``sacct_lost_work_s`` (sacct's LostWork of the interrupted run). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from hal.testing import http
from hal.testing.live import LiveServer
from hal.wire.submit import JobSubmit

STEP_S = 0.25
STEPS = 80
NOTICE_AFTER_S = 8.0
CONFIG = """
kill_wait_seconds = 2

[cloud]
interval_seconds = 0.5
pending_seconds = 0

[[cloud.groups]]
name = "spot"
provider = "local"
market = "spot"
nodes = "spot[1-8]"
cpus = 2
memory = "1G"
idle_seconds = 300
boot_timeout_seconds = 60
[cloud.groups.local]
agent_args = "--unknown-users-as-agent --interruption-interval {interval}"
"""
# counts STEPS steps; with checkpoints, at SIGUSR1 it saves its count and exits
SCRIPT = """#!/bin/sh
cd {work}
ck=ck.$SLURM_JOB_ID
i=0
[ {checkpoint} = 1 ] && i=$(cat $ck 2>/dev/null || echo 0)
echo "start $SLURM_RESTART_COUNT $(date +%s.%N)" >> log.$SLURM_JOB_ID
stop=0
trap 'stop=1' USR1
while [ $i -lt {steps} ]; do
  if [ $stop = 1 ]; then echo $i > $ck; exit 0; fi
  sleep {step}; i=$((i+1)); echo $i >> steps.$SLURM_JOB_ID
done
"""


def _until(check: Any, timeout: float = 120.0) -> float:
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise TimeoutError("the bench waited over two minutes")
        time.sleep(0.02)
    return time.time()


def _starts(work: Path, job: int) -> list[tuple[int, float]]:
    path = work / f"log.{job}"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            found.append((int(parts[1]), float(parts[2])))
    return found


def _event_time(live: LiveServer, kind: str, job: int) -> float:
    with live.client() as c:
        for e in c.events(0, follow=False):
            jobs = e.data.get("jobs")
            if e.kind == kind and (e.job_id == job or (isinstance(jobs, list) and job in jobs)):
                return e.time
    raise LookupError(f"no {kind} event for job {job}")


def _one(live: LiveServer, work: Path, checkpoint: bool, interval: float) -> dict[str, float]:
    client = live.client()
    script = SCRIPT.format(work=work, checkpoint=int(checkpoint), steps=STEPS, step=STEP_S)
    job = client.submit(
        JobSubmit(
            script=script,
            cpus_per_task=2,
            workdir=str(work),
            signal="B:USR1@30" if checkpoint else None,
        )
    ).job_id
    _until(lambda: any(r == 0 for r, _ in _starts(work, job)))
    first = dict(_starts(work, job))[0]
    # at a random point of the agent's poll: the notice waits 0 to one interval to be read
    after = NOTICE_AFTER_S + random.uniform(0, interval)
    _until(lambda: time.time() - first >= after)
    node = client.job(job).nodes[0]
    record = json.loads((live.data_dir / "cloud/spot/instances" / f"{node}.json").read_text())
    notice = time.time()
    http.post(f"{record['imds']}/hal/interrupt?in=120", timeout=10).raise_for_status()
    _until(lambda: any(r == 1 for r, _ in _starts(work, job)))
    again = dict(_starts(work, job))[1]
    _until(lambda: client.job(job).state == "COMPLETED", timeout=300)
    counted = (work / f"steps.{job}").read_text().split()
    done = live.cli("sacct", "-D", "-X", "-n", "-P", "-j", str(job), "-o", "LostWork")
    lost = done.stdout.split()[0]
    h, m, s = (int(x) for x in lost.split(":"))
    return {
        "notice_to_server_s": round(_event_time(live, "cloud.interrupted", job) - notice, 3),
        "notice_to_requeued_s": round(_event_time(live, "job.requeued", job) - notice, 3),
        "notice_to_running_s": round(again - notice, 3),
        "lost_work_s": round((len(counted) - STEPS) * STEP_S, 3),
        "sacct_lost_work_s": float(h * 3600 + m * 60 + s),
    }


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor()
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main(rounds: int, interval: float) -> dict[str, object]:
    runs: dict[str, list[dict[str, float]]] = {"signal": [], "plain": []}
    with tempfile.TemporaryDirectory() as tmp:
        toml = Path(tmp) / "hal.toml"
        toml.write_text(CONFIG.format(interval=interval))
        work = Path(tmp) / "work"
        work.mkdir()
        with LiveServer(Path(tmp) / "state", config_file=toml) as live:
            live.start_agent("n1", cpus=1)
            _until(lambda: any(n.name == "n1" for n in live.client().nodes()))
            try:
                for _ in range(rounds):
                    runs["signal"].append(_one(live, work, True, interval))
                    runs["plain"].append(_one(live, work, False, interval))
            finally:
                service = live.server.cloud  # type: ignore[attr-defined]
                service.stop_local_nodes()
    keys = list(runs["signal"][0])
    return {
        "benchmark": "cloud-interrupt",
        "rounds": rounds,
        "poll_interval_s": interval,
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "median": {
            label: {k: round(statistics.median(r[k] for r in rs), 3) for k in keys}
            for label, rs in runs.items()
        },
        "runs": runs,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--json", action="store_true", help="JSON (the only output)")
    ns = parser.parse_args()
    print(json.dumps(main(ns.rounds, ns.interval), indent=2))
