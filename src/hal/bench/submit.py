"""``hal bench submit``: batch REST submission into SQLite, and the Slurm commands' start-up.

Targets: ≥ 5,000 jobs/s accepted through the batch endpoint (issue 2); ``sbatch`` and
``squeue`` p50 ≤ 3× a bare ``python -c pass`` (issue 51). Workflow tools start one process
per ``sbatch`` and ``squeue``, so what a command costs is mostly the interpreter's start
and the modules it imports; an interpreter that imports nothing is the baseline, measured
side by side in the same run (the three commands alternate, so a machine that other work
loads slows all three alike). The commands run through the ``sbatch``/``squeue`` shims
(``hal compat install-shims``), as the tools call them, with this interpreter, or with
``python`` (``--python``): another install of HAL (a ``pip install .`` in a venv, where
the development checkout's is editable), run without this process's ``PYTHONPATH`` so
that it imports its own.

The server runs in this process's background thread on loopback with a fresh SQLite
database; agents are not needed (jobs stay pending).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from hal.compat.shims import install_shims
from hal.testing.live import LiveServer
from hal.wire.jobs import JobBatchSubmit, JobSubmit

BASELINE = "python -c pass"
RATIO_TARGET = 3.0


def _command_env(srv: LiveServer, *, own_install: bool = False) -> dict[str, str]:
    """The server's environment, bytecode caching on: a user's commands read their
    modules' cached bytecode, so a ``PYTHONDONTWRITEBYTECODE`` of the shell that started
    the bench must not make every run compile them again. ``own_install``: without
    ``PYTHONPATH``, for an interpreter that imports its own HAL."""
    env = srv.env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if own_install:
        env.pop("PYTHONPATH", None)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process: user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=cwd, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[round(fraction * (len(ordered) - 1))]


def _side_by_side(
    commands: dict[str, list[str]], env: dict[str, str], cwd: str, runs: int
) -> dict[str, Any]:
    """Each command once per round, in turn, after one round that is not counted (it
    writes the bytecode caches and warms the page cache)."""
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(runs + 1):
        for name, argv in commands.items():
            wall, cpu = _run(argv, env, cwd)
            if round_:
                walls[name].append(wall)
                cpus[name].append(cpu)
    out: dict[str, Any] = {}
    base_wall = statistics.median(walls[BASELINE])
    base_cpu = statistics.median(cpus[BASELINE])
    for name in commands:
        key = "python" if name == BASELINE else name
        out[f"{key}_p50_s"] = round(statistics.median(walls[name]), 4)
        out[f"{key}_p90_s"] = round(_percentile(walls[name], 0.9), 4)
        out[f"{key}_cpu_p50_s"] = round(statistics.median(cpus[name]), 4)
        if name != BASELINE:
            out[f"{key}_ratio"] = round(statistics.median(walls[name]) / base_wall, 2)
            out[f"{key}_cpu_ratio"] = round(statistics.median(cpus[name]) / base_cpu, 2)
    return out


def _machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), ""
            )
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)}


def run_submit_bench(
    jobs: int = 20_000, batch: int = 1_000, sbatch_runs: int = 20, python: str | None = None
) -> dict[str, Any]:
    interpreter = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="hal-bench-") as tmp, LiveServer(Path(tmp)) as srv:
        env = _command_env(srv, own_install=python is not None)
        bin_dir = Path(tmp, "bin")
        install_shims(bin_dir, force=True, python=interpreter)
        sbatch = [str(bin_dir / "sbatch"), "--hold", "--wrap", "true"]
        # against a fresh server first (as the Slurm peer measures it), sbatch again at
        # the end with the whole batch queued behind it
        commands = {
            BASELINE: [interpreter, "-c", "pass"],
            "sbatch": sbatch,
            "squeue": [str(bin_dir / "squeue")],
        }
        fresh = _side_by_side(commands, env, tmp, sbatch_runs)
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
        loaded = [_run(sbatch, env, tmp)[0] for _ in range(sbatch_runs)]
        met = (
            submitted / elapsed >= 5000
            and fresh["sbatch_ratio"] <= RATIO_TARGET
            and fresh["squeue_ratio"] <= RATIO_TARGET
        )
        return {
            "benchmark": "submit",
            "jobs": submitted,
            "batch_size": batch,
            "elapsed_s": round(elapsed, 3),
            "jobs_per_s": round(submitted / elapsed, 1),
            "batch_p50_s": round(statistics.median(per_batch), 4),
            "runs": sbatch_runs,
            "python": interpreter,
            **fresh,
            "sbatch_p50_with_queue_s": round(statistics.median(loaded), 4),
            "queued_jobs_at_end": submitted + batch + 2 * sbatch_runs + 1,
            "machine": _machine(),
            "targets": {
                "jobs_per_s": 5000,
                "sbatch_ratio": RATIO_TARGET,
                "squeue_ratio": RATIO_TARGET,
            },
            "met": met,
        }
