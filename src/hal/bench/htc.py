"""``hal bench htc``: HTC sessions against Ray, Dask, Celery and a bare process pool.

Same machine, same run. HAL runs as a real control plane (``LiveServer``) with 2 agents
of 2 CPUs; sessions get 2 warm workers (HAL jobs). Measured:
- no-op throughput (``map`` of no-op tasks) and single-task round trip (p50/p99);
- 1,000 tasks of 10 ms on 2 workers against the ideal 5 s makespan;
- 1,000,000 no-op tasks in one session with RSS of broker, client and workers over time;
- a batch job and a session running at once (both must finish).
Peers (``htc_peers``) do the same no-op throughput and round trip with 2 workers.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from hal.htc import HtcClient, Session
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

CACHE = Path.home() / ".cache" / "hal-bench"


def _ready(hc: HtcClient, session: Session, workers: int) -> None:
    wait_until(
        lambda: sum(w.state == "ready" for w in hc.session(session.id).workers) >= workers,
        timeout=60,
        message=f"{workers} ready workers",
    )


def _open(hc: HtcClient, service: str, workdir: str) -> Session:
    s = hc.open_session(service, min_workers=2, max_workers=2, workdir=workdir)
    _ready(hc, s, 2)
    return s


def throughput(s: Session, n: int) -> float:
    t = time.perf_counter()
    count = sum(1 for _ in s.map(((),) * n, star=True))
    assert count == n
    return n / (time.perf_counter() - t)


def round_trips(s: Session, n: int) -> dict[str, float]:
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        s.submit().result(10)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return {
        "p50_ms": round(lat[len(lat) // 2] * 1e3, 3),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 3),
        "mean_ms": round(statistics.fmean(lat) * 1e3, 3),
    }


class RssSampler:
    """Samples resident memory of the broker, the client and the workers every second."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.samples: list[dict[str, float]] = []
        self._procs = {k: psutil.Process(v) for k, v in pids.items()}
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            row = {"t_s": round(time.perf_counter() - self._t0, 1)}
            for name, proc in self._procs.items():
                try:
                    row[name + "_mib"] = round(proc.memory_info().rss / 2**20, 1)
                except psutil.Error:
                    row[name + "_mib"] = -1
            self.samples.append(row)

    def stop(self) -> list[dict[str, float]]:
        self._stop.set()
        self._thread.join(5)
        return self.samples


def million(hc: HtcClient, s: Session, n: int) -> dict[str, Any]:
    broker = next(
        (
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if "hal.htc.brokerd" in " ".join(p.info["cmdline"] or [])
            and p.ppid() == psutil.Process().pid
        ),
        0,
    )
    pids = {"client": psutil.Process().pid, "broker": broker}
    for i, w in enumerate(hc.session(s.id).workers):
        pids[f"worker{i}"] = w.pid
    sampler = RssSampler(pids)
    t = time.perf_counter()
    count = sum(1 for _ in s.map(((),) * n, star=True, ordered=False))
    elapsed = time.perf_counter() - t
    samples = sampler.stop()
    growth = {}
    if len(samples) >= 4:
        first, last = samples[1], samples[-1]  # skip the very first (warm-up) sample
        growth = {k: round(last[k] - first[k], 1) for k in first if k.endswith("_mib")}
    return {
        "tasks": count,
        "seconds": round(elapsed, 1),
        "throughput_per_s": round(count / elapsed),
        "rss_growth_mib": growth,
        "rss_samples": samples[:: max(1, len(samples) // 20)],
    }


def makespan(hc: HtcClient, workdir: str, tasks: int = 1000, ms: float = 10) -> dict[str, Any]:
    with _open(hc, "hal.htc.examples:sleep_ms", workdir) as s:
        t = time.perf_counter()
        list(s.map([ms] * tasks))
        elapsed = time.perf_counter() - t
    ideal = tasks * ms / 1000 / 2
    return {
        "seconds": round(elapsed, 3),
        "ideal_s": ideal,
        "over_ideal_pct": round((elapsed / ideal - 1) * 100, 1),
    }


def mixed(server: LiveServer, hc: HtcClient, workdir: str) -> dict[str, Any]:
    """Two 1-CPU batch jobs of 3 s and a session of 2 workers x 2,000 tasks of 5 ms on a
    4-CPU cluster: both must finish, neither waits for the other."""
    with server.client() as c, _open(hc, "hal.htc.examples:sleep_ms", workdir) as s:
        t = time.perf_counter()
        job = JobSubmit(script="#!/bin/sh\nsleep 3\n", workdir=workdir, stdout="/dev/null")
        ids = [r.job_id for r in c.submit_many([job, job])]
        done = sum(1 for _ in s.map([5] * 2000))
        htc_s = time.perf_counter() - t
        wait_until(
            lambda: all(c.job(i).state == "COMPLETED" for i in ids), timeout=60, message="batch"
        )
        batch_s = time.perf_counter() - t
    return {
        "htc_tasks": done,
        "htc_seconds": round(htc_s, 2),
        "batch_jobs_seconds": round(batch_s, 2),
    }


def run_htc_bench(
    tasks: int = 200_000,
    latency_runs: int = 2_000,
    million_tasks: int = 1_000_000,
    with_peers: bool = True,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machine": {"cpus": psutil.cpu_count(), "python": sys.version.split()[0]}
    }
    with (
        tempfile.TemporaryDirectory(prefix="hal-htc-bench-") as tmp,
        LiveServer(Path(tmp)) as server,
        server.agents(2, cpus=2),
        HtcClient(server.url, server.token) as hc,
    ):
        with _open(hc, "hal.htc.examples:noop", tmp) as s:
            throughput(s, 20_000)  # warm-up: windows adapt, caches fill
            # Median of 3 (the machine is shared); each peer runs once, after a warm-up.
            runs = sorted(round(throughput(s, tasks)) for _ in range(3))
            hal: dict[str, Any] = {
                "throughput_per_s": runs[1],
                "throughput_runs": runs,
                **round_trips(s, latency_runs),
            }
            if million_tasks:
                hal["million"] = million(hc, s, million_tasks)
        hal["sleep_10ms_x1000"] = makespan(hc, tmp)
        hal["batch_and_htc"] = mixed(server, hc, tmp)
    result["hal"] = hal
    if with_peers:
        peers = __import__("hal.bench.htc_peers", fromlist=["run_peers"])
        result["peers"] = peers.run_peers(CACHE, latency_runs=min(latency_runs, 1000))
        ray = result["peers"].get("ray", {}).get("throughput_per_s")
        pool = result["peers"].get("process_pool", {}).get("throughput_per_s")
        result["vs"] = {
            "x_ray": round(hal["throughput_per_s"] / ray, 1) if ray else None,
            "x_process_pool": round(hal["throughput_per_s"] / pool, 1) if pool else None,
        }
    return result


def add_bench_command(bsub: Any) -> None:
    p = bsub.add_parser("htc", help="HTC sessions vs Ray, Dask, Celery and a process pool")
    p.add_argument("--tasks", type=int, default=200_000)
    p.add_argument("--latency-runs", type=int, default=2_000)
    p.add_argument("--million", type=int, default=1_000_000, help="0 to skip the 1M run")
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    import json

    result = run_htc_bench(ns.tasks, ns.latency_runs, ns.million, not ns.skip_peers)
    print(json.dumps(result, indent=2) if ns.json else result)
    return 0
