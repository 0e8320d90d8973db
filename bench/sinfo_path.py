"""``hal sinfo`` and ``hal sinfo -N`` as a user runs them against a live ``hal server``
holding ``--nodes`` nodes, for this tree and (``--before``) another, alternately in one
run so that a loaded machine's figures compare.

The nodes are written to a SQLite database directly (``upsert_node``, as the server
stores a registered agent's node): 16 CPUs and 64 GiB each, every 50th drained and every
97th down with a reason, in two partitions (``bulk``, the default, of every node, and
``other``, of the first fifth); no agent runs, and a day's node timeout keeps the nodes
as written while the commands run: ``GET /v1/nodes`` answers what 10,000 registered
nodes' answer holds, without 10,000 agents' heartbeats on the machine measured. One ``hal server``
(this tree's) answers both trees' commands, each run in a process of its own (``python -m
hal.cli.main sinfo``), the trees in turn, up to ``--samples`` times each or until a
command has used ``--budget`` seconds. Reported per tree and command: the process's wall
and CPU seconds (``getrusage`` of the children) and the server's CPU (p50, p99), the
lines printed and their SHA-256, and whether every run of both trees printed the same
bytes. Prints one JSON object::

    python bench/sinfo_path.py [--nodes 10000] [--samples 7] [--before ../main/src]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from squeue_path import _cpu, _percentiles, _server

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"
COMMANDS = (("sinfo",), ("sinfo", "-N"))


def _fill(path: Path, count: int) -> str:
    """``count`` nodes in the SQLite database at ``path``; an administrator's token."""
    from hal.core.states import NodeState
    from hal.server.users import ensure_user
    from hal.state.store import SqlStateStore
    from hal.testing.builders import make_node

    store = SqlStateStore(f"sqlite:///{path}")
    try:
        now = time.time()
        token = ensure_user(store, "admin", admin=True, now=now)
        with store.transaction() as tx:
            for i in range(1, count + 1):
                node = make_node(f"emu{i}").cpus(16).mem(64 << 30).features("ib").build()
                if i % 97 == 0:
                    node = node.evolve(state=NodeState.DOWN, reason="no heartbeat", reason_time=now)
                elif i % 50 == 0:
                    node = node.evolve(state=NodeState.DRAIN, reason="bad disk", reason_time=now)
                tx.upsert_node(node.evolve(reason_user="admin" if node.reason else ""))
    finally:
        store.close()
    assert token is not None
    return token


def _config(path: Path, count: int) -> None:
    path.write_text(
        "node_timeout_seconds = 86400\n"  # (no agent answers: the nodes stay as written)
        "[[partitions]]\n"
        'name = "bulk"\n'
        "default = true\n"
        f'nodes = "emu[1-{count}]"\n'
        "[[partitions]]\n"
        'name = "other"\n'
        f'nodes = "emu[1-{max(1, count // 5)}]"\n'
    )


def _command(src: Path, url: str, token: str, server: Any, argv: tuple[str, ...]) -> dict[str, Any]:
    """``hal ARGV`` of the tree at ``src`` in a process of its own against ``url``: wall,
    its CPU, the server's (``server``: its psutil.Process) and the output's digest."""
    env = {**os.environ, "PYTHONPATH": str(src), "HAL_URL": url, "HAL_TOKEN": token}
    served = sum(server.cpu_times()[:2])
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "hal.cli.main", *argv],
        env=env,
        capture_output=True,
        check=True,
        timeout=1800,
    )
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall": wall,
        "cpu": after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime,
        "server_cpu": sum(server.cpu_times()[:2]) - served,
        "sha256": hashlib.sha256(done.stdout).hexdigest(),
        "lines": done.stdout.count(b"\n"),
        "stdout": done.stdout,
    }


def measure(
    count: int, samples: int, budget: float, before: Path | None, outputs: Path | None = None
) -> dict[str, Any]:
    import psutil

    from hal.testing.live import stop_process

    trees = ([("before", before)] if before else []) + [("now", SRC)]
    with tempfile.TemporaryDirectory(prefix="hal-sinfo-") as tmp:
        work = Path(tmp)
        db = work / f"hal-{count}.db"
        t = time.perf_counter()
        token = _fill(db, count)
        out: dict[str, Any] = {"fill_s": round(time.perf_counter() - t, 1)}
        config = work / "hal.toml"
        _config(config, count)
        proc, url = _server(SRC, f"sqlite:///{db}", config, work)
        server = psutil.Process(proc.pid)
        try:
            for argv in COMMANDS:
                runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
                spent = dict.fromkeys(runs, 0.0)
                for _ in range(samples):  # the trees in turn, against the same server
                    for name, src in trees:
                        if spent[name] <= budget:
                            runs[name].append(_command(src, url, token, server, argv))
                            spent[name] += runs[name][-1]["wall"]
                for name, found in runs.items():
                    out.setdefault(name, {})[" ".join(argv)] = {
                        "samples": len(found),
                        "s": _percentiles([r["wall"] for r in found]),
                        "cpu_s": _percentiles([r["cpu"] for r in found]),
                        "server_cpu_s": _percentiles([r["server_cpu"] for r in found]),
                        "lines": sorted({r["lines"] for r in found}),
                        "sha256": sorted({r["sha256"] for r in found}),
                    }
                if before:  # every run of both trees printed the same bytes
                    printed = {r["sha256"] for found in runs.values() for r in found}
                    out["now"][" ".join(argv)]["same_as_other_tree"] = len(printed) == 1
                if outputs is not None:  # each tree's last output, to compare by hand
                    for name, found in runs.items():
                        (outputs / f"{name}-{'_'.join(argv)}.txt").write_bytes(found[-1]["stdout"])
        finally:
            stop_process(proc)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds a command may use")
    parser.add_argument("--before", type=Path, help="another tree's src/, measured alternately")
    parser.add_argument("--outputs", type=Path, help="a folder for each tree's last output")
    ns = parser.parse_args()
    sys.path.insert(0, str(SRC))
    result: dict[str, Any] = {"cpu": _cpu(), "nodes": ns.nodes, "load_before": os.getloadavg()}
    before = ns.before.resolve() if ns.before else None
    result.update(measure(ns.nodes, ns.samples, ns.budget, before, ns.outputs))
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
