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

Where podman is installed (and this runs as root: the agent runs podman rootful), the
same for ``--container``: an image made on the spot from this host's programs
(``hal.testing.images``) is published, and ``jobs`` jobs in it alternate with ``jobs``
plain jobs: ``container.overhead_ms`` is the difference of the medians of their start
delays, ``container.podman_run_ms_p50`` the median of ``podman run`` alone (the same
image, runtime and containers.conf, from its start to the command's first line inside),
``container.cold_start_s`` the first job's (the image fetched and loaded on the node).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hal.agent.containers import CONF, choose_runtime, unified_cgroups_only
from hal.bench import emit
from hal.bench.replay_cost import cpu_model
from hal.client import HalClient
from hal.host.oci import image_facts
from hal.testing.images import make_image, make_rootfs
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
    p.add_argument(
        "--no-container", action="store_true", help="skip --container (default: with podman)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    return emit(run_envs_bench(ns.jobs, ns.lock, container=not ns.no_container), ns.json)


def run_envs_bench(
    jobs: int = 15, lock: str | None = None, *, container: bool = True
) -> dict[str, Any]:
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
            images = _containers(live, hal, work, jobs) if container else {"skipped": "asked"}
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
        "container": images,
    }


def _containers(live: LiveServer, hal: HalClient, work: Path, jobs: int) -> dict[str, Any]:
    """``--container``'s figures (the module's docstring); why not, where they cannot be
    taken here."""
    podman = shutil.which("podman")
    if podman is None or os.geteuid() != 0:
        return {"skipped": "no podman" if podman is None else "not root (rootful podman)"}
    path = make_image(make_rootfs(work / "rootfs"), work / "bench.oci.tar")
    done = live.cli("artifact", "push", "halbench@1", str(path))
    if done.returncode != 0:
        raise RuntimeError(f"cannot publish the image: {done.stderr}")
    cold = _start_delay(hal, work, "ccold", None, 600, container="halbench@1")
    plain: list[float] = []
    inside: list[float] = []
    for i in range(jobs):
        plain.append(_start_delay(hal, work, f"cplain{i}", None))
        inside.append(_start_delay(hal, work, f"cinside{i}", None, container="halbench@1"))
    image_id = image_facts(path).image_id
    alone = [_podman_run(podman, work, image_id) for _ in range(jobs)]
    subprocess.run([podman, "rmi", "--force", image_id], capture_output=True, check=False)
    plain_ms, inside_ms = statistics.median(plain) * 1000, statistics.median(inside) * 1000
    return {
        "jobs": jobs,
        "runtime": Path(_runtime()).name,
        "cold_start_s": round(cold, 3),
        "plain_start_ms_p50": round(plain_ms, 2),
        "start_ms_p50": round(inside_ms, 2),
        "overhead_ms": round(inside_ms - plain_ms, 2),
        "podman_run_ms_p50": round(statistics.median(alone) * 1000, 2),
    }


def _runtime() -> str:
    found = {n: p for n in ("crun", "runc") if (p := shutil.which(n) or f"/usr/sbin/{n}")}
    found = {n: p for n, p in found.items() if os.access(p, os.X_OK)}
    return choose_runtime(shutil.which("podman"), found, unified_cgroups_only())


def _podman_run(podman: str, work: Path, image_id: str) -> float:
    """Seconds from starting ``podman run`` to the command's first line inside."""
    runtime = _runtime()
    conf = work / "containers.conf"
    conf.write_text(CONF.format(runtime=Path(runtime).name))
    out = work / "alone.t"
    argv = [podman, "--runtime", runtime, "run", "--rm", "--network", "host"]
    argv += ["--volume", f"{work}:{work}", image_id, "/bin/sh", "-c", STAMP.format(out=out)]
    started = time.time()
    subprocess.run(argv, env={**os.environ, "CONTAINERS_CONF": str(conf)}, check=True)
    return float(out.read_text()) - started


def _start_delay(
    hal: HalClient,
    work: Path,
    name: str,
    files: dict[str, str] | None,
    limit_s: float = 120,
    container: str | None = None,
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
        container=container,
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
