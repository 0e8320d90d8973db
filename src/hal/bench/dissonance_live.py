"""``hal bench harmonic-dissonance --live``: a latency-sensitive service beside batch work
on a real cluster, the ``dissonance`` plugin off and on.

**The cluster.** A control plane (``LiveServer``) and two agents on this machine, each a
node of ``CPUS`` CPUs, each started pinned to one host CPU (``taskset``: node1 on the
first CPU this process may use, node2 on the second; their jobs inherit it). So a job
beside another on node1 shares that CPU's core with it, and a job on node2 does not;
both nodes share the host's caches beyond the core and its memory bandwidth.

**Which work hurts here** (``probe``; outside HAL, the same scripts pinned by hand):
the service alone on the first CPU, then beside each kind of batch work (``cpu``: a
spinning loop; ``cache``: random reads over an array the size of a last-level cache
slice; ``membw``: copying an array far larger than the caches) on the same CPU and on
the other one. The kind that raises the service's p99 most on its own CPU is the batch
work of the live part.

**The live part.** The same scenario twice, each on a fresh server: ``off`` (the
server's profile without the plugin) then ``on`` (the default profile). The ``off``
server learns: its interference model (``<data>/harmonic/dissonance.json``) is copied
into the ``on`` server's data directory, as after a restart, so ``on`` starts from what
``off`` observed (and knows the batch workload's class by its identity before its jobs
run).

* The service (``--latency-sensitive``, 1 CPU, on node1) serves a request every
  ``period_ms`` (a fixed compute), open loop: a request's latency runs from when it was
  due to when it was served (a backlog of more than a second is dropped). Every
  ``report_s`` it reports its window's p99 latency with ``hal.feedback.report(p99_ms=...)``
  (goal ``min``) and logs every latency to a file.
* Once the server has classed it and it has reported alone for ``alone_s``, batch jobs
  of the chosen kind (1 CPU each, no node asked) run one after another, each
  ``batch_s``; each writes the work it did.
* Then the service is cancelled, once it has run ``MIN_RUN_S``: its feedback beside the
  batch work and alone is one outcome for the model (``hal.server.dissonance``,
  "Feedback drops").

Reported per mode: the service's p99 over the batch phase and alone (from its log),
where the batch jobs ran, and their throughput (work units per second of run time).

**What a 2-core machine can show.** Node1's free CPU and node2 are each one host CPU:
with the plugin off, best fit puts the batch job beside the service (the fuller node)
and they share a core; on, it goes to node2. That is CPU contention, which real nodes
also have between jobs packed on one node's cores; what it cannot show is separate
nodes' separate caches and memory bandwidth: both "nodes" share them here, so the
``cache`` and ``membw`` rows of the probe on the other CPU are what no placement on
this machine avoids. Each node's 2 CPUs are one host CPU: a node is oversubscribed
twice, and other work on the host shares both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from hal.bench.replay_cost import cpu_model
from hal.bench.slurm_peer import bench_work_dir
from hal.client import HalClient
from hal.config.model import HalConfig
from hal.scheduler.plugins import DISSONANCE
from hal.server.dissonance import FILE as MODEL_FILE
from hal.server.dissonance import MIN_RUN_S
from hal.server.profile import config_default_profile
from hal.testing import http
from hal.testing.live import LiveServer, stop_process, wait_until
from hal.wire.submit import JobSubmit

CPUS = 2  # each node's CPUs (one host CPU underneath)
MiB = 1 << 20
KINDS = ("cpu", "cache", "membw")
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")

SERVICE = """\
import os, sys, threading, time

log, period = sys.argv[1], float(sys.argv[2]) / 1000
work, every = int(sys.argv[3]), float(sys.argv[4])
report = None
if os.environ.get("HAL_FEEDBACK_TOKEN"):
    import hal.feedback
    report = hal.feedback.report
window, start, due = [], time.monotonic(), time.monotonic()
with open(log, "a", buffering=1) as f:
    while True:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        x = 0
        for i in range(work):
            x += i * i
        done = time.monotonic()
        ms = (done - due) * 1000
        window.append(ms)
        f.write("%.3f %.3f\\n" % (time.time(), ms))
        due += period
        if done - due > 1.0:  # more than a second behind: the backlog is dropped
            due = done
        if report is not None and done - start >= every:
            window.sort()
            p99 = window[min(len(window) - 1, int(0.99 * len(window)))]
            threading.Thread(target=report, kwargs={"p99_ms": round(p99, 3)}, daemon=True).start()
            window, start = [], done
"""

BATCH = """\
import sys, time
import numpy as np

kind, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
end = time.monotonic() + seconds
units = 0
if kind == "cpu":  # units: million loop steps
    while time.monotonic() < end:
        x = 0
        for i in range(100_000):
            x += i
        units += 0.1
elif kind == "cache":  # units: million random 8-byte reads over 16 MiB
    a = np.arange(2 * 1024 * 1024, dtype=np.int64)
    rng = np.random.default_rng(1)
    while time.monotonic() < end:
        idx = rng.integers(0, len(a), 1 << 20)
        a[idx].sum()
        units += 1.048576
else:  # membw; units: GB copied (read + written)
    a = np.ones(32 * 1024 * 1024)
    b = np.empty_like(a)
    while time.monotonic() < end:
        np.copyto(b, a)
        units += 2 * a.nbytes / 1e9
with open(out, "w") as f:
    f.write("%.6f\\n" % units)
"""


@dataclass(frozen=True, slots=True)
class BatchRun:
    """One batch job: where it ran, how it ended, when (Unix s), the work it did and
    what the scheduler said of its placement."""

    node: str | None
    state: str
    start: float
    end: float
    units: float
    note: str | None


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def latencies(log: Path, since: float, until: float) -> list[float]:
    """The service's latencies (ms) logged between ``since`` and ``until`` (Unix s)."""
    out = []
    for line in log.read_text().splitlines():
        t, ms = line.split()
        if since <= float(t) <= until:
            out.append(float(ms))
    return out


def host_cpus() -> tuple[int, int]:
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        raise RuntimeError("the live part needs two CPUs to pin its two nodes to")
    return mine[0], mine[1]


def service_argv(shared: Path, log: Path, period_ms: float, work: int, report_s: float) -> str:
    return f"{sys.executable} {shared / 'service.py'} {log} {period_ms} {work} {report_s}"


def probe(
    shared: Path, seconds: float, period_ms: float, work: int
) -> dict[str, dict[str, float | None]]:
    """The service's p99 (ms) alone and beside each kind, same CPU and other CPU."""
    first, second = host_cpus()
    out: dict[str, dict[str, float | None]] = {}
    cases = [("alone", None, None)] + [(k, k, cpu) for k in KINDS for cpu in (first, second)]
    for name, kind, cpu in cases:
        log = shared / f"probe-{name}-{cpu}.log"
        argv = service_argv(shared, log, period_ms, work, 1e9).split()
        svc = subprocess.Popen(["taskset", "-c", str(first), *argv], env=_no_feedback())
        hog = None
        if kind is not None:
            cmd = [sys.executable, str(shared / "batch.py"), kind, str(seconds + 2), os.devnull]
            hog = subprocess.Popen(["taskset", "-c", str(cpu), *cmd])
        time.sleep(1.0)  # (started, arrays made)
        t0 = time.time()
        time.sleep(seconds)
        t1 = time.time()
        for p in (svc, hog):
            if p is not None:
                stop_process(p)
        where = "alone" if kind is None else ("same_cpu" if cpu == first else "other_cpu")
        out.setdefault(name, {})[where] = p99(latencies(log, t0, t1))
    return out


def _no_feedback() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HAL_FEEDBACK_TOKEN", None)
    return env


def start_agent(live: LiveServer, name: str, cpu: int) -> subprocess.Popen[bytes]:
    """``hal agent`` for node ``name`` pinned to host CPU ``cpu`` (its jobs inherit it)."""
    cmd = [
        "taskset", "-c", str(cpu), sys.executable, "-m", "hal.cli.main", "agent",
        "--server", live.url, "--name", name, "--cpus", str(CPUS), "--memory", "2G",
        "--state-dir", str(live.data_dir / "agents" / name), "--unknown-users-as-agent",
    ]  # fmt: skip
    log = open(live.data_dir / f"agent-{name}.log", "ab")  # noqa: SIM115 - owned by proc
    env = {**live.env(), "HAL_TOKEN": live.agent_token or live.token}
    return subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def profile_without_plugin() -> dict[str, Any]:
    """The server's default profile with the ``dissonance`` plugin left out."""
    profile = config_default_profile(HalConfig())
    plugins = [p for p in profile["plugins"] if p != DISSONANCE]  # type: ignore[attr-defined]
    weights = {k: v for k, v in profile["score_weights"].items() if k != DISSONANCE}  # type: ignore[attr-defined]
    return {**profile, "plugins": plugins, "score_weights": weights}


def submit(hal: HalClient, argv: str, name: str, shared: Path, **fields: Any) -> int:
    spec = JobSubmit(
        script=f"#!/bin/sh\nexec {argv}\n", name=name, workdir=str(shared),
        cpus_per_task=1, memory_per_node_bytes=512 * MiB, time_limit_seconds=1800, **fields,
    )  # fmt: skip
    return hal.submit(spec).job_id


def ended(hal: HalClient, job_id: int) -> bool:
    return hal.job(job_id).state in ENDED


def learnt(live: LiveServer) -> int:
    auth = {"Authorization": f"Bearer {live.token}"}
    r = http.get(live.url + "/v1/harmonic/dissonance", headers=auth, timeout=10)
    return int(r.json()["outcomes_learnt"]) if r.status_code == 200 else -1


def run_mode(
    work: Path,
    mode: str,
    kind: str,
    model: Path | None,
    cfg: dict[str, float],
) -> dict[str, Any]:
    """One server: the service alone, then ``batches`` batch jobs beside it, then its end."""
    shared = work / "shared"
    shared.mkdir(parents=True)
    (shared / "service.py").write_text(SERVICE)
    (shared / "batch.py").write_text(BATCH)
    data = work / "hal"
    if model is not None and model.exists():  # (none: the off run learnt nothing)
        (data / MODEL_FILE).parent.mkdir(parents=True)
        shutil.copy(model, data / MODEL_FILE)
    overrides: dict[str, object] = {"heartbeat_interval_seconds": 1.0}
    if mode == "off":
        overrides["scheduler_profile"] = profile_without_plugin()
    first, second = host_cpus()
    log = shared / "service.log"
    with LiveServer(data, config_overrides=overrides) as live, live.client() as hal:
        agents = [start_agent(live, "node1", first), start_agent(live, "node2", second)]
        try:
            wait_until(
                lambda: len([n for n in hal.nodes() if n.state == "UP"]) >= 2,
                timeout=90,
                message="the agents to register",
            )
            argv = service_argv(shared, log, cfg["period_ms"], int(cfg["work"]), cfg["report_s"])
            svc = submit(
                hal, argv, "service", shared, nodelist=["node1"], latency_sensitive=True,
                feedback_goal=["p99_ms:min"],
            )  # fmt: skip
            wait_until(
                lambda: hal.job(svc).profile_class is not None and log.exists(),
                timeout=120,
                message="the service to run and be classed",
            )
            alone_from = time.time()
            time.sleep(cfg["alone_s"])
            alone_to = time.time()
            before = learnt(live)
            batches = []
            for i in range(int(cfg["batches"])):
                out = shared / f"batch-{i}.out"
                cmd = f"{sys.executable} {shared / 'batch.py'} {kind} {cfg['batch_s']} {out}"
                job = submit(hal, cmd, f"batch-{kind}", shared)
                wait_until(partial(ended, hal, job), timeout=120 + cfg["batch_s"])
                info = hal.job(job)
                units = float(out.read_text()) if out.exists() else 0.0
                batches.append(
                    BatchRun(
                        info.nodes[0] if info.nodes else None,
                        info.state,
                        info.start_time or 0.0,
                        info.end_time or 0.0,
                        units,
                        info.placement,
                    )
                )
            shared_from = min(b.start for b in batches)
            shared_to = max(b.end for b in batches)
            # (a run shorter than MIN_RUN_S teaches the model nothing)
            started = hal.job(svc).start_time or time.time()
            time.sleep(max(0.0, started + MIN_RUN_S + 2.0 - time.time()))
            reported = hal.job_feedback(svc).metrics
            hal.cancel(svc)
            wait_until(partial(ended, hal, svc), timeout=60)
            with contextlib.suppress(TimeoutError):  # the outcome of its feedback
                wait_until(lambda: learnt(live) > before, timeout=30, interval=0.5)
            outcomes = learnt(live)
        finally:
            for p in agents:
                stop_process(p)
    beside = [b for b in batches if b.node == "node1"]
    points = reported[0].points if reported else []
    return {
        "service_p99_ms": p99(latencies(log, shared_from, shared_to)),
        "service_p99_alone_ms": p99(latencies(log, alone_from, alone_to)),
        "service_reported_p99_ms": [v for _, v in points],
        # the median of the windows' p99 the service reported while batch work ran: less
        # moved by one stall of the whole host than the phase's p99
        "service_window_p99_median_ms": _median(
            [v for t, v in points if shared_from <= t <= shared_to + cfg["report_s"]]
        ),
        "batch_nodes": [b.node for b in batches],
        "batch_beside_service": len(beside),
        "batch_units_per_s": sum(b.units for b in batches)
        / max(1e-9, sum(b.end - b.start for b in batches)),
        "batches": [dataclasses.asdict(b) for b in batches],
        "outcomes_learnt": outcomes,
        "model": data / MODEL_FILE,
    }


DEFAULTS = {
    "period_ms": 20.0,  # a request every 20 ms
    "work": 2_000,  # loop steps a request (about 0.1 ms of one CPU here, idle)
    "report_s": 2.0,
    "alone_s": 10.0,
    "batches": 3,
    "batch_s": 15.0,
    "probe_s": 6.0,
}


def run_live(**given: float) -> dict[str, Any]:
    """The probe, then ``off`` and ``on``; what the JSON's ``live`` carries."""
    cfg = {**DEFAULTS, **given}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=bench_work_dir(), prefix="dissonance-live-") as tmp:
        base = Path(tmp)
        shared = base / "probe"
        shared.mkdir()
        (shared / "service.py").write_text(SERVICE)
        (shared / "batch.py").write_text(BATCH)
        found = probe(shared, cfg["probe_s"], cfg["period_ms"], int(cfg["work"]))
        kind = max(KINDS, key=lambda k: found[k]["same_cpu"] or 0.0)
        off = run_mode(base / "off", "off", kind, None, cfg)
        on = run_mode(base / "on", "on", kind, off["model"], cfg)
    for m in (off, on):
        m["model"] = str(m["model"].name)
    load = os.getloadavg()
    return {
        "cpu_model": cpu_model(),
        "load_avg_1m": round(load[0], 1),
        "nodes": 2,
        "cpus_per_node": CPUS,
        "probe_p99_ms": found,
        "batch_kind": kind,
        "service_p99_ms": {"off": off["service_p99_ms"], "on": on["service_p99_ms"]},
        "service_window_p99_median_ms": {
            "off": off["service_window_p99_median_ms"],
            "on": on["service_window_p99_median_ms"],
        },
        "service_p99_alone_ms": {
            "off": off["service_p99_alone_ms"],
            "on": on["service_p99_alone_ms"],
        },
        "batch_units_per_s": {"off": off["batch_units_per_s"], "on": on["batch_units_per_s"]},
        "batch_beside_service": {
            "off": off["batch_beside_service"],
            "on": on["batch_beside_service"],
        },
        "settings": cfg,
        "runs": {"off": off, "on": on},
        "wall_s": round(time.perf_counter() - t0, 1),
    }
