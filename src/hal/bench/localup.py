"""``hal up`` as a separate process, for benchmarks that measure the whole local cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from hal.bench.slurm_peer import bench_work_dir
from hal.testing import http
from hal.testing.live import free_port, wait_until


@dataclass(frozen=True, slots=True)
class LocalCluster:
    url: str
    token: str
    pid: int


def cluster_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by ``hal up`` (``pid``, the control plane)
    and its living descendants, summed by role: ``server``, ``agents``, ``launchers`` (the
    agents' step launchers). Step supervisors and jobs are not counted: the kernel reaps
    them, so their time reaches no parent's account."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    roles = {"server": used.get(pid, 0.0), "agents": 0.0, "launchers": 0.0}
    for child, ppid in parent.items():
        if ppid == pid:
            roles["agents"] += used[child]
        elif parent.get(ppid) == pid:
            roles["launchers"] += used[child]
    return roles


@contextmanager
def local_cluster(agents: int = 2, cpus_per_agent: int | None = None) -> Iterator[LocalCluster]:
    """Start ``hal up`` on a free port with a fresh data directory and wait until it and
    its agents answer; stop it with Ctrl-C (SIGINT) afterwards, as a user would.

    The data directory is not under /tmp: on this VM files there are ~10x slower to create
    than elsewhere on the same disk, and HAL's default data directory is in the home."""
    with tempfile.TemporaryDirectory(prefix="hal-bench-up-", dir=bench_work_dir()) as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "hal.cli.main", "up", "--port", str(port),
               "--data-dir", tmp, "--agents", str(agents)]  # fmt: skip
        if cpus_per_agent:
            cmd += ["--cpus-per-agent", str(cpus_per_agent)]
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, "XDG_CONFIG_HOME": tmp},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:

            def ready() -> bool:
                try:
                    return http.get(url + "/healthz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(ready, 60, message="hal up")
            creds = json.loads((Path(tmp) / "hal" / "credentials.json").read_text())
            token = str(creds[url]["token"])
            headers = {"Authorization": f"Bearer {token}"}

            def agents_up() -> bool:
                nodes = http.get(url + "/v1/nodes", headers=headers, timeout=5).json()["nodes"]
                return bool(sum(n["state"] == "UP" for n in nodes) == agents)

            wait_until(agents_up, 60, message=f"{agents} agents")
            yield LocalCluster(url, token, proc.pid)
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
