"""``hal bench e2e-vs-slurm``: HAL against Slurm 22.05 on the same machine, same run.

Workloads (issue 2): 1,000 trivial jobs (``--wrap true``) and one 1,000-task array, each
timed from the first submit to all completed; and one trivial job's submit-to-completion
latency (median of ``repeats``). HAL runs as ``hal up`` with 2 agents offering 32 CPUs each
(64 in all, like the Slurm peer's one 64-CPU node). HAL's jobs are submitted one request
per job through the SDK, sequentially, as the Slurm peer submits one ``sbatch`` per job;
completion is read from HAL's event stream (Slurm's from ``squeue`` polling).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import queue
import statistics
import time
from typing import Any

from hal.bench.localup import cluster_cpu_seconds, local_cluster
from hal.client import HalClient
from hal.testing import http
from hal.wire.jobs import JobSubmit

TRUE = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", stdout="/dev/null")


class Completions:
    """Follows /v1/events in a separate process and records when each job ended.

    A process, not a thread: a thread parsing thousands of events in the benchmark's own
    interpreter would hold the GIL while the submitting loop waits for its replies and
    slow the submissions it is meant to time. The follower stamps each ``job.finished``
    with ``time.monotonic()`` (one clock for every process on Linux) as it arrives."""

    def __init__(self, url: str, token: str, after: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._events: multiprocessing.Queue[tuple[int, float]] = ctx.Queue()
        self._proc = ctx.Process(
            target=_follow, args=(url, token, after, self._events), daemon=True
        )
        self._proc.start()
        self.finished: dict[int, float] = {}

    def wait_for(self, ids: set[int], timeout: float) -> float:
        """The time at which the last of ``ids`` was seen finished."""
        deadline = time.monotonic() + timeout
        while not ids <= self.finished.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                missing = len(ids - self.finished.keys())
                raise TimeoutError(f"{missing} jobs did not finish in {timeout} s")
            try:
                job_id, when = self._events.get(timeout=left)
            except queue.Empty:
                continue
            self.finished[job_id] = when
        return max(self.finished[i] for i in ids)

    def close(self) -> None:
        self._proc.kill()
        self._proc.join(5)


def _follow(
    url: str, token: str, after: int, events: multiprocessing.Queue[tuple[int, float]]
) -> None:
    with HalClient(url, token) as client:
        for event in client.events(after):
            if event.kind == "job.finished" and event.job_id is not None:
                events.put((event.job_id, time.monotonic()))


def run_hal(jobs: int, array: int, repeats: int, timeout: float = 300) -> dict[str, Any]:
    with local_cluster(agents=2, cpus_per_agent=32) as up, HalClient(up.url, up.token) as client:
        completions = Completions(up.url, up.token, _revision(up.url))
        result: dict[str, Any] = {"system": "hal", "cpus": 64}
        # (a) 1,000 trivial jobs, one submission request each
        cpu_before = cluster_cpu_seconds(up.pid)
        t0 = time.monotonic()
        ids = {client.submit(TRUE).job_id for _ in range(jobs)}
        submitted = time.monotonic()
        end = completions.wait_for(ids, timeout)
        cpu = {k: v - cpu_before[k] for k, v in cluster_cpu_seconds(up.pid).items()}
        result["jobs_1000_s"] = round(end - t0, 3)
        result["jobs_1000_rate"] = round(jobs / (end - t0), 1)
        result["jobs_1000_submit_s"] = round(submitted - t0, 3)
        # CPU is the figure a loaded machine skews least (step supervisors and jobs are
        # not in it: see cluster_cpu_seconds)
        result["jobs_1000_cpu_s"] = {k: round(v, 2) for k, v in cpu.items()}
        result["jobs_1000_cpu_ms_per_job"] = round(sum(cpu.values()) / jobs * 1000, 2)
        # (b) one array of 1,000 tasks
        t0 = time.monotonic()
        res = client.submit(dataclasses.replace(TRUE, array=f"0-{array - 1}"))
        end = completions.wait_for(set(res.task_ids), timeout)
        result["array_1000_s"] = round(end - t0, 3)
        # (c) one job, submit to completion
        lat = []
        for _ in range(repeats):
            t0 = time.monotonic()
            jid = client.submit(TRUE).job_id
            lat.append(completions.wait_for({jid}, timeout) - t0)
        result["single_job_latency_p50_s"] = round(statistics.median(lat), 4)
        result["single_job_latency_all_s"] = [round(x, 4) for x in lat]
        completions.close()
        return result


def _revision(url: str) -> int:
    return int(http.get(url + "/healthz", timeout=5).json()["revision"])


def run_e2e_bench(
    jobs: int = 1000, array: int = 1000, repeats: int = 5, *, with_slurm: bool = True
) -> dict[str, Any]:
    hal = run_hal(jobs, array, repeats)
    out: dict[str, Any] = {"benchmark": "e2e-vs-slurm", "hal": hal}
    if with_slurm:
        from hal.bench.slurm_peer import run_slurm_peer

        slurm = run_slurm_peer(jobs=jobs, array=array, latency_repeats=repeats)
        out["slurm"] = slurm
        ratios = {}
        for key in ("jobs_1000_s", "array_1000_s", "single_job_latency_p50_s"):
            theirs, ours = slurm.get(key), hal.get(key)
            if isinstance(theirs, (int, float)) and isinstance(ours, (int, float)) and ours:
                ratios[key] = round(float(theirs) / float(ours), 2)
        out["speedup"] = ratios
        out["met"] = (
            ratios.get("jobs_1000_s", 0) >= 5
            and ratios.get("array_1000_s", 0) >= 5
            and hal["single_job_latency_p50_s"] <= 0.5
        )
    return out
