"""``hal bench envs``: what ``--python-env`` costs a job (docs/user/environments.md).

A control plane (``LiveServer``) and one agent on this machine. Two figures:

- ``venv.cold_build_s``: the first job with a new lock, from the moment the server sends
  it to its node until its script runs: the node builds the environment (uv, else pip);
- ``venv.warm_overhead_ms``: then ``jobs`` jobs with that lock and ``jobs`` plain jobs,
  alternating, one at a time; for each, the time from the server sending it (its start
  time) to its script's first line; the overhead is the difference of the two medians
  (goal: at most 50 ms).

By default the lock names a wheel made on the spot (``hal.testing.wheels``) in a
find-links folder, with no index: the figure is the environment machinery's, not the
network's. ``--lock FILE`` builds a real requirements lock from the node's configured
index instead.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hal.bench import emit
from hal.bench.replay_cost import cpu_model
from hal.client import HalClient
from hal.testing.live import LiveServer, wait_until
from hal.testing.wheels import make_wheel
from hal.wire.submit import JobSubmit

GOAL_MS = 50.0
STAMP = "date +%s.%N > {out}\n"


def add_commands(bsub: Any) -> None:
    """Registers ``envs`` on the ``hal bench`` subparsers (``cli/bench.py``)."""
    p = bsub.add_parser("envs", help="--python-env: a cold build, and a cached one's overhead")
    p.add_argument("--jobs", type=int, default=15, help="jobs of each kind (median taken)")
    p.add_argument("--lock", help="a requirements lock to build from the configured index")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    return emit(run_envs_bench(ns.jobs, ns.lock), ns.json)


def run_envs_bench(jobs: int = 15, lock: str | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hal-bench-envs-") as tmp:
        work = Path(tmp)
        env: dict[str, str] = {}
        if lock is None:
            make_wheel(work / "wheels", "halbench", "1.0")
            env = {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(work / "wheels")}
            text = f"halbench==1.0  # {time.time_ns()}\n"  # a new lock: built cold
        else:
            text = Path(lock).read_text()
        with LiveServer(work / "hal") as live, live.client() as hal:
            live.start_agent("node1", cpus=2, memory="1G", env=env)
            wait_until(
                lambda: any(n.state == "UP" for n in hal.nodes()),
                timeout=90,
                message="the agent to register",
            )
            files = {"requirements.txt": text}
            cold = _start_delay(hal, work, "cold", files, 1800)
            plain: list[float] = []
            warm: list[float] = []
            for i in range(jobs):
                plain.append(_start_delay(hal, work, f"plain{i}", None))
                warm.append(_start_delay(hal, work, f"warm{i}", files))
    plain_ms, warm_ms = statistics.median(plain) * 1000, statistics.median(warm) * 1000
    overhead = warm_ms - plain_ms
    return {
        "benchmark": "envs",
        "cpu": cpu_model(),
        "python": sys.version.split()[0],
        "venv": {
            "lock": "a local wheel (find-links, no index)" if lock is None else lock,
            "jobs": jobs,
            "cold_build_s": round(cold, 3),
            "plain_start_ms_p50": round(plain_ms, 2),
            "warm_start_ms_p50": round(warm_ms, 2),
            "warm_overhead_ms": round(overhead, 2),
            "goal_ms": GOAL_MS,
            "met": overhead <= GOAL_MS,
        },
    }


def _start_delay(
    hal: HalClient, work: Path, name: str, files: dict[str, str] | None, limit_s: float = 120
) -> float:
    """Seconds from the server sending the job to its node to its script's first line."""
    out = work / f"{name}.t"
    job = JobSubmit(
        script="#!/bin/sh\n" + STAMP.format(out=out),
        name=name,
        workdir=str(work),
        stdout=str(work / f"{name}.out"),
        time_limit_seconds=600,
        python_env=files,
    )
    job_id = hal.submit(job).job_id
    wait_until(
        lambda: hal.job(job_id).state not in ("PENDING", "RUNNING"),
        timeout=limit_s,
        interval=0.02,
        message=f"job {name} to end",
    )
    info = hal.job(job_id)
    if info.state != "COMPLETED" or info.start_time is None:
        raise RuntimeError(f"job {name} ended {info.state}; see {work / (name + '.out')}")
    return float(out.read_text()) - info.start_time
