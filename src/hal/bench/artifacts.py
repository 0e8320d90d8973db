"""``hal bench artifacts``: an artifact fanned out to many nodes, through the cache tree
against each node fetching from the server (docs/user/artifacts.md, docs/benchmarks.md).

On this machine: a HAL server (``LiveServer``, SQLite) with ``[data]`` naming a cache
control plane, and real ``hal cache node`` processes, one root, one branch and a leaf per
node. Each node is a process running the agent's fetch code
(``hal.bench.artifact_fetch``). A random artifact of ``size`` bytes is published, then:

- ``single_node_s``: one node fetches it from the server, alone;
- ``single_node_tree_s``: one node fetches it through the cold tree, alone (the server
  writes it into the root first);
- ``direct_s``: every node fetches it from the server at once;
- ``tree_s``: the caches emptied, every node fetches it through the tree at once;
  ``root_bytes_read`` is what the root sent (``hal_bytes_served``), ``server_bytes_read``
  what the server read from its store for the tree (``hal_artifact_served_bytes_total
  {to="cache"}``).

Each phase says where the time went: CPU seconds of the server (this process), the
cache control plane, the root, the branch, the leaves and the nodes, against its wall
time times the machine's cores. ``venv`` and ``container`` are ``hal bench envs``'s
figures (``hal.bench.envs.run_envs_bench``), taken after.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis

from hal.bench import emit
from hal.bench.envs import run_envs_bench
from hal.bench.replay_cost import cpu_model
from hal.bench.slurm_peer import bench_work_dir
from hal.config.model import DataConfig
from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until

CACHE_CLI = [sys.executable, "-m", "hal.cli.cache", "cache"]
FETCH = [sys.executable, "-m", "hal.bench.artifact_fetch"]
GOAL_ROOT_FACTOR = 1.1  # the root sends each byte at most this many times
LEAF_BYTES = 256 * 1024 * 1024  # a leaf keeps what its node read last, not all of it
PULL_TIMEOUT_S = "60"  # a 4 MiB piece's pull, on a machine all the nodes share
CHUNK = 16 * 1024 * 1024
TICKS = os.sysconf("SC_CLK_TCK")


def add_commands(bsub: Any) -> None:
    """Registers ``artifacts`` on the ``hal bench`` subparsers (``cli/bench.py``)."""
    p = bsub.add_parser(
        "artifacts", help="an artifact to many nodes: through the cache tree vs direct"
    )
    p.add_argument("--nodes", type=int, default=16, help="nodes, each behind its own leaf")
    p.add_argument("--size", type=size_of, default=size_of("1G"), help="artifact size (1G)")
    p.add_argument("--envs-jobs", type=int, default=15, help="hal bench envs's jobs of a kind")
    p.add_argument("--no-envs", action="store_true", help="skip hal bench envs's figures")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def size_of(text: str) -> int:
    """``1G``, ``64M``, ``4096``: bytes (binary units)."""
    found = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if found is None or int(found[1]) == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no size: write bytes, or a number with K, M or G (64M, 1G)"
        )
    unit: int = 1024 ** " KMG".index((found[2] or " ").upper())
    return int(found[1]) * unit


def _cmd(ns: Any) -> int:
    result = run_artifacts_bench(ns.nodes, ns.size)
    if not ns.no_envs:
        envs = run_envs_bench(ns.envs_jobs)
        result["venv"], result["container"] = envs["venv"], envs["container"]
    return emit(result, ns.json)


class Tree:
    """A cache control plane, a root, a branch and ``leaves`` leaves, as processes."""

    def __init__(self, work: Path, leaves: list[str]) -> None:
        self.work = work
        self.log = (work / "caches.log").open("ab")
        self.cp_port = free_port()
        self.url = f"http://127.0.0.1:{self.cp_port}/v1"
        self.ports = {name: free_port() for name in ["root", "branch", *leaves]}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.leaves = leaves

    def start(self) -> None:
        listen = f"127.0.0.1:{self.cp_port}"
        db = f"sqlite:///{self.work / 'cache.db'}"
        self._spawn("control-plane", ["control-plane", "--listen", listen, "--db", db])
        session = httpx.Client(base_url=self.url, timeout=10)
        wait_until(lambda: _ok(session, "/instances"), 60, message="the cache control plane")
        self._node("root", None, "root")
        self._node("branch", "root", "branch")
        for leaf in self.leaves:
            self._node(leaf, "branch", "leaf", "--max-bytes", str(LEAF_BYTES))
        for name in self.ports:
            known = functools.partial(_chain_known, self.client(name))
            wait_until(known, 120, message=f"cache node {name} in the tree")

    def _node(self, name: str, parent: str | None, tier: str, *extra: str) -> None:
        args = ["node", "--instance-id", name, "--listen-host", "127.0.0.1"]
        args += ["--listen-port", str(self.ports[name]), "--tier", tier]
        args += ["--control-plane-events-url", self.url + "/events"]
        args += ["--state-dir", str(self.work / "state" / name), "--pull-timeout", PULL_TIMEOUT_S]
        args += ["--maxmemory-policy", "allkeys-lru", *extra]
        if parent:
            args += ["--parent-id", parent]
        self._spawn(name, args)

    def _spawn(self, name: str, args: list[str]) -> None:
        self.procs[name] = subprocess.Popen(
            [*CACHE_CLI, *args], stdout=self.log, stderr=subprocess.STDOUT
        )

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(port=self.ports[name], socket_timeout=60)

    def stats(self, name: str) -> dict[str, Any]:
        return dict(self.client(name).info("stats"))

    def empty(self) -> None:
        """Every copy gone, every counter zeroed."""
        for name in self.ports:
            client = self.client(name)
            client.flushall()
            client.config_resetstat()

    def cpu(self) -> dict[str, float]:
        """CPU seconds each process used so far."""
        return {name: _cpu_of(proc.pid) for name, proc in self.procs.items()}

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.log.close()


def run_artifacts_bench(nodes: int = 16, size: int = 1024**3) -> dict[str, Any]:
    names = [f"node{i:02d}" for i in range(1, nodes + 1)]
    leaves = {name: f"leaf{name[4:]}" for name in names}
    with tempfile.TemporaryDirectory(prefix="hal-bench-artifacts-", dir=bench_work_dir()) as tmp:
        work = Path(tmp)
        tree = Tree(work, list(leaves.values()))
        try:
            tree.start()
            data = DataConfig(cache_url=tree.url, node_cache=leaves, refresh_seconds=1.0)
            with (
                LiveServer(work / "hal", config_overrides={"data": data}) as live,
                live.client() as hal,
            ):
                sha256 = _publish(hal, work / "bench.bin", size)
                wait_until(
                    lambda: _view_ready(live, len(names) + 2), 60, message="the server's view"
                )
                run = _Runner(live, work, sha256, tree)
                single = run.phase(names[:1], direct=True)
                single_tree = run.phase(names[:1], direct=False)
                direct = run.phase(names, direct=True)
                tree.empty()
                fanout = run.phase(names, direct=False)
        finally:
            tree.stop()
    root_read = fanout["caches"]["root"]["hal_bytes_served"]
    return {
        "benchmark": "artifacts",
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "fanout": {
            "nodes": nodes,
            "artifact_bytes": size,
            "root_bytes_read": root_read,
            "root_factor": round(root_read / size, 3),
            "server_bytes_read": fanout["server_bytes"],
            "tree_s": fanout["s"],
            "direct_s": direct["s"],
            "single_node_s": single["s"],
            "single_node_tree_s": single_tree["s"],
            "goal_root_factor": GOAL_ROOT_FACTOR,
            "met_root": root_read <= GOAL_ROOT_FACTOR * size,
            "met_speed": fanout["s"] <= direct["s"],
            "fallbacks": sum(n["fallbacks"] for n in fanout["nodes"]),
            "where_tree": fanout["cpu"],
            "where_direct": direct["cpu"],
            "where_single": single["cpu"],
            "where_single_tree": single_tree["cpu"],
        },
    }


class _Runner:
    def __init__(self, live: LiveServer, work: Path, sha256: str, tree: Tree) -> None:
        self.live = live
        self.work = work
        self.sha256 = sha256
        self.tree = tree

    def phase(self, names: list[str], *, direct: bool) -> dict[str, Any]:
        """Every node in ``names`` fetches at once; their copies are removed after."""
        env = {**os.environ, "HAL_TOKEN": self.live.agent_token}
        folders = {n: self.work / "nodes" / n for n in names}
        procs = {}
        for name, folder in folders.items():
            argv = [*FETCH, self.live.url, name, self.sha256, "program", str(folder)]
            procs[name] = subprocess.Popen(
                [*argv, *(["--direct"] if direct else [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
        for name, proc in procs.items():
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"the fetch of {name} did not start")
        served = _served(self.live)
        caches_cpu, own_cpu = self.tree.cpu(), _own_cpu()
        started = time.monotonic()
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        results = []
        for name, proc in procs.items():
            out, _ = proc.communicate(timeout=3600)
            if proc.returncode != 0:
                raise RuntimeError(f"the fetch of {name} failed (exit {proc.returncode})")
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
        took = time.monotonic() - started
        after = self.tree.cpu()
        cpu = {
            "server": round(_own_cpu() - own_cpu, 2),
            "cache_control_plane": _delta(after, caches_cpu, lambda n: n == "control-plane"),
            "root": _delta(after, caches_cpu, lambda n: n == "root"),
            "branch": _delta(after, caches_cpu, lambda n: n == "branch"),
            "leaves": _delta(after, caches_cpu, lambda n: n.startswith("leaf")),
            "nodes": round(sum(r["cpu_s"] for r in results), 2),
            "available": round(took * (os.cpu_count() or 1), 2),
        }
        for folder in folders.values():
            _remove(folder)
        now = _served(self.live)
        return {
            "s": round(took, 3),
            "nodes": results,
            "cpu": cpu,
            "server_bytes": now.get("cache", 0) - served.get("cache", 0),
            "caches": {name: self.tree.stats(name) for name in ("root", "branch")},
        }


def _publish(hal: Any, path: Path, size: int) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("wb") as f:
        left = size
        while left:
            block = os.urandom(min(CHUNK, left))
            digest.update(block)
            f.write(block)
            left -= len(block)
    hal.push_artifact("bench", "1", path, kind="program")
    path.unlink()
    return digest.hexdigest()


def _view_ready(live: LiveServer, instances: int) -> bool:
    got = http.get(
        f"{live.url}/v1/data/status", headers={"Authorization": f"Bearer {live.token}"}, timeout=10
    ).json()
    return bool(got.get("instances", 0) >= instances and not got.get("stale"))


def _served(live: LiveServer) -> dict[str, float]:
    """``hal_artifact_served_bytes_total`` by ``to``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = http.get(f"{live.url}/metrics", timeout=30).text
    return {
        s.labels["to"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "hal_artifact_served_bytes_total"
    }


def _ok(session: httpx.Client, path: str) -> bool:
    try:
        return session.get(path).status_code == 200
    except httpx.HTTPError:
        return False


def _chain_known(client: redis.Redis) -> bool:
    try:
        return bool(client.info("server").get("hal_chain_complete") == 1)
    except (redis.RedisError, OSError):
        return False


def _cpu_of(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _delta(
    after: dict[str, float], before: dict[str, float], which: Callable[[str], bool]
) -> float:
    return round(sum(after[n] - before.get(n, 0.0) for n in after if which(n)), 2)


def _remove(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)
