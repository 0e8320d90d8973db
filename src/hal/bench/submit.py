"""``hal bench submit``: batch REST submission into SQLite, and ``sbatch`` latency.

Target (issue 2): ≥ 5,000 jobs/s accepted through the batch endpoint; ``hal sbatch`` p50
latency ≤ 150 ms. The server runs in this process's background thread on loopback with a
fresh SQLite database; agents are not needed (jobs stay pending).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from hal.testing.live import LiveServer
from hal.wire.jobs import JobBatchSubmit, JobSubmit


def _sbatch_latencies(srv: LiveServer, cwd: str, runs: int) -> list[float]:
    latencies = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "hal.cli.main", "sbatch", "--hold", "--wrap", "true"],
            env=srv.env(),
            capture_output=True,
            text=True,
            cwd=cwd,
            check=False,
        )
        latencies.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise RuntimeError(f"sbatch failed: {done.stderr}")
    return latencies


def run_submit_bench(
    jobs: int = 20_000, batch: int = 1_000, sbatch_runs: int = 20
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hal-bench-") as tmp, LiveServer(Path(tmp)) as srv:
        # sbatch against a fresh server first (as the Slurm peer measures it), again at the
        # end with the whole batch queued behind it
        fresh = _sbatch_latencies(srv, tmp, sbatch_runs)
        one = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True)
        body = JobBatchSubmit(jobs=[one] * batch).model_dump_json(exclude_defaults=True)
        headers = {"Authorization": f"Bearer {srv.token}", "Content-Type": "application/json"}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=120) as http:
            # each batch with its own Idempotency-Key, as ``HalClient.submit_many`` sends
            key = {"Idempotency-Key": "warm-up"}
            http.post("/v1/jobs/batch", content=body, headers=key).raise_for_status()
            batches = max(1, jobs // batch)
            per_batch: list[float] = []
            started = time.perf_counter()
            for _ in range(batches):
                t0 = time.perf_counter()
                key = {"Idempotency-Key": os.urandom(16).hex()}
                r = http.post("/v1/jobs/batch", content=body, headers=key)
                r.raise_for_status()
                per_batch.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - started
        submitted = batches * batch
        loaded = _sbatch_latencies(srv, tmp, sbatch_runs)
        return {
            "benchmark": "submit",
            "jobs": submitted,
            "batch_size": batch,
            "elapsed_s": round(elapsed, 3),
            "jobs_per_s": round(submitted / elapsed, 1),
            "batch_p50_s": round(statistics.median(per_batch), 4),
            "sbatch_runs": sbatch_runs,
            "sbatch_p50_s": round(statistics.median(fresh), 4),
            "sbatch_p95_s": round(sorted(fresh)[int(0.95 * (len(fresh) - 1))], 4),
            "sbatch_p50_with_queue_s": round(statistics.median(loaded), 4),
            "queued_jobs_at_end": submitted + batch + sbatch_runs,
            "targets": {"jobs_per_s": 5000, "sbatch_p50_s": 0.150},
            "met": submitted / elapsed >= 5000 and statistics.median(fresh) <= 0.150,
        }
