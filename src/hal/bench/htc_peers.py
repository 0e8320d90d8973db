"""Peers for ``hal bench htc``: ProcessPoolExecutor, Dask distributed, Ray and Celery on
the same machine, in the same run, each in its own subprocess.

Ray and Celery are not HAL dependencies: they are installed here with pip into a
throwaway folder under the benchmark's cache (``--target``) and put on the peer
subprocess's ``PYTHONPATH``; their versions are recorded. A peer that cannot be installed
or run is reported with the reason instead of a number.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from hal.testing.live import free_port

PEER_PACKAGES = ["ray>=2.40", "celery[redis]>=5.4"]
PEER_TIMEOUT_S = 240

# Each peer script prints one JSON line: {"version", "throughput_per_s", "p50_ms", "p99_ms"}.
COMMON = """
import json, statistics, sys, time
def report(version, n, elapsed, lat):
    lat.sort()
    print(json.dumps({"version": version, "tasks": n,
        "throughput_per_s": round(n / elapsed), "p50_ms": round(lat[len(lat)//2] * 1e3, 3),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 3)}), flush=True)
"""

PROCESS_POOL = """
import concurrent.futures, platform
def noop(_=None): return None
if __name__ == "__main__":
    n, m = int(sys.argv[1]), int(sys.argv[2])
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        list(ex.map(noop, range(1000)))
        t = time.perf_counter(); list(ex.map(noop, range(n))); elapsed = time.perf_counter() - t
        lat = []
        for _ in range(m):
            a = time.perf_counter(); ex.submit(noop).result(); lat.append(time.perf_counter() - a)
    report("python " + platform.python_version(), n, elapsed, lat)
"""

DASK = """
from dask.distributed import Client, LocalCluster
import distributed
def noop(_=None): return None
if __name__ == "__main__":
    n, m = int(sys.argv[1]), int(sys.argv[2])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        c.gather(c.map(noop, range(200), pure=False))
        t = time.perf_counter(); c.gather(c.map(noop, range(n), pure=False))
        elapsed = time.perf_counter() - t
        lat = []
        for i in range(m):
            a = time.perf_counter(); c.submit(noop, i, pure=False).result()
            lat.append(time.perf_counter() - a)
    report(distributed.__version__, n, elapsed, lat)
"""

RAY = """
import ray
@ray.remote
def noop(_=None): return None
if __name__ == "__main__":
    n, m = int(sys.argv[1]), int(sys.argv[2])
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    ray.get([noop.remote() for _ in range(1000)])
    t = time.perf_counter(); ray.get([noop.remote() for _ in range(n)])
    elapsed = time.perf_counter() - t
    lat = []
    for _ in range(m):
        a = time.perf_counter(); ray.get(noop.remote()); lat.append(time.perf_counter() - a)
    ray.shutdown()
    report(ray.__version__, n, elapsed, lat)
"""

CELERY_APP = """
import os
from celery import Celery
url = os.environ["PEER_REDIS_URL"]
app = Celery("peer", broker=url, backend=url)
app.conf.update(worker_prefetch_multiplier=64, task_acks_late=False, result_expires=600)
@app.task
def noop(_=None): return None
"""

CELERY = """
import celery, subprocess, os
from peer_app import app, noop
if __name__ == "__main__":
    n, m = int(sys.argv[1]), int(sys.argv[2])
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "peer_app", "worker",
        "-c", "2", "-P", "prefork", "--loglevel", "ERROR", "--without-heartbeat",
        "--without-mingle", "--without-gossip"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        noop.delay().get(timeout=60)
        t = time.perf_counter()
        results = [noop.delay() for _ in range(n)]
        for r in results: r.get(timeout=120)
        elapsed = time.perf_counter() - t
        lat = []
        for _ in range(m):
            a = time.perf_counter(); noop.delay().get(timeout=30)
            lat.append(time.perf_counter() - a)
    finally:
        worker.terminate(); worker.wait(30)
    report(celery.__version__, n, elapsed, lat)
"""


def install_peers(cache: Path) -> tuple[Path | None, str]:
    """pip-install Ray and Celery into ``cache`` once; returns (folder, error)."""
    target = cache / f"peers-py{sys.version_info.major}{sys.version_info.minor}"
    marker = target / ".hal-installed"
    if marker.exists():
        return target, ""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *PEER_PACKAGES]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"pip install failed: {err}"
    if done.returncode != 0:
        return None, f"pip install failed: {done.stderr.strip()[-500:]}"
    marker.write_text(" ".join(PEER_PACKAGES))
    return target, ""


def run_peer(
    name: str, body: str, env: dict[str, str], workdir: Path, n: int, m: int
) -> dict[str, Any]:
    script = workdir / f"peer_{name}.py"
    script.write_text(COMMON + textwrap.dedent(body))
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(n), str(m)],
            capture_output=True,
            text=True,
            timeout=PEER_TIMEOUT_S,
            check=False,
            env=env,
            cwd=workdir,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {PEER_TIMEOUT_S} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-600:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def run_peers(cache: Path, *, tasks: int = 20_000, latency_runs: int = 1000) -> dict[str, Any]:
    results: dict[str, Any] = {}
    target, error = install_peers(cache)
    with tempfile.TemporaryDirectory(prefix="hal-htc-peers-") as tmp:
        work = Path(tmp)
        base = {**os.environ, "PYTHONPATH": str(work)}
        with_peers = dict(base)
        if target is not None:
            with_peers["PYTHONPATH"] = f"{work}{os.pathsep}{target}"
            with_peers["PATH"] = f"{target / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        results["process_pool"] = run_peer("pool", PROCESS_POOL, base, work, tasks, latency_runs)
        results["dask"] = run_peer("dask", DASK, base, work, tasks, latency_runs)
        if target is None:
            results["ray"] = results["celery"] = {"error": error}
            return results
        results["ray"] = run_peer("ray", RAY, with_peers, work, tasks, latency_runs)
        results["celery"] = run_celery(with_peers, work, tasks, latency_runs)
    return results


def run_celery(env: dict[str, str], work: Path, n: int, m: int) -> dict[str, Any]:
    """Celery with Redis as broker and backend: a redis-server of our own on a free port
    (the shared one on 6379 may hold other people's data)."""
    server = shutil.which("redis-server")
    if server is None:
        return {"error": "redis-server is not installed (apt-get install redis-server)"}
    port = free_port()
    redis = subprocess.Popen(
        [server, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        (work / "peer_app.py").write_text(CELERY_APP)
        env = {**env, "PEER_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
        return run_peer("celery", CELERY, env, work, n, m)
    finally:
        redis.terminate()
        redis.wait(10)
