"""N emulated nodes registering with a real ``hal server`` on a fresh PostgreSQL
database, as ``hal bench scale`` starts them (``hal emulate`` processes of at most
``--per-process`` nodes, 256 registrations in flight across them, ``--heartbeat``
seconds between heartbeats). Times from the emulators' start to every node stored UP
(read from the database, not the server: a node list would cost the server CPU) and
reports the CPU of the server, of the emulators (their start-up included) and of the
server's PostgreSQL backends over that time, each per node, and how many
registrations the server committed (more than the nodes: agents that gave up waiting
registered again). Prints one JSON object::

    PYTHONPATH=src python bench/register_path.py [--nodes 2500] [--heartbeat 30]
    PYTHONPATH=/path/to/other/tree/src python bench/register_path.py ...

The server and the emulators run from the tree ``PYTHONPATH`` names. On a shared
machine the CPU figures are the ones that compare; the wall time waits on whatever
else runs. ``--profile FILE``: ``py-spy record`` of the server over the registrations
(raw stacks, for ``py-spy``'s flame graphs or a grep).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

from hal.bench.scale import (
    cpu_seconds,
    emulate_args,
    site,
    spawner,
    start_emulators,
    start_server,
)
from hal.testing import http
from hal.testing.live import stop_process, wait_until


def _backends(conn: psycopg.Connection[Any], db: str) -> list[psutil.Process]:
    """The PostgreSQL backends serving database ``db`` (the server's pool)."""
    name = db.rsplit("/", 1)[1]
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        (name,),
    ).fetchall()
    found = []
    for (pid,) in rows:
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


def _spy(pid: int, output: str) -> subprocess.Popen[bytes]:
    """``py-spy record`` of process ``pid`` until stopped (SIGINT), raw stacks to ``output``."""
    py_spy = Path(sys.executable).with_name("py-spy")
    what = ["--pid", str(pid), "--format", "raw", "--rate", "50", "--gil", "--nonblocking"]
    return subprocess.Popen(
        [str(py_spy), "record", *what, "--output", output],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def run(nodes: int, per_process: int, heartbeat: float, profile: str | None) -> dict[str, Any]:
    procs: list[subprocess.Popen[bytes]] = []
    with site("hal-register-", nodes, heartbeat) as (work, db, admin, agents, port, config):
        url = f"http://127.0.0.1:{port}"
        spawn = spawner(work, url, procs)
        watch = psycopg.connect(db, autocommit=True)
        try:
            server = start_server(spawn, work, db, port, config, admin, timeout=120)
            server_ps = psutil.Process(server.pid)
            backends = _backends(watch, db)
            server0, pg0 = cpu_seconds([server_ps]), cpu_seconds(backends)
            t0 = time.monotonic()
            emu = emulate_args(url, 16, nodes, per_process)
            emulators = start_emulators(spawn, emu, nodes, per_process, agents)
            emulator_ps = [psutil.Process(p.pid) for p in emulators]
            spies = [
                _spy(p.pid, f"{profile}.{what}")
                for p, what in ((server, "server"), (emulators[0], "emulate"))
                if profile
            ]

            def up() -> bool:
                row = watch.execute("SELECT count(*) FROM nodes WHERE state = 'UP'").fetchone()
                return row is not None and row[0] >= nodes

            wait_until(up, timeout=max(300.0, nodes / 5), interval=0.1, message="the nodes")
            wall = time.monotonic() - t0
            server_cpu = cpu_seconds([server_ps]) - server0
            emulator_cpu = cpu_seconds(emulator_ps)
            backends += [b for b in _backends(watch, db) if b.pid not in {p.pid for p in backends}]
            pg_cpu = cpu_seconds(backends) - pg0
            for spy in spies:
                stop_process(spy, sig=signal.SIGINT, timeout=30)
            row = watch.execute(
                "SELECT count(*) FROM events WHERE kind = 'node.registered'"
            ).fetchone()
            registrations = row[0] if row is not None else 0
            # the agent requests the server answered meanwhile (sdiag's counts), and
            # their mean time in the server
            diag = http.get(
                url + "/v1/diag", headers={"Authorization": f"Bearer {admin}"}, timeout=60
            ).json()
            requests = {
                r["name"]: {
                    "count": r["count"],
                    "mean_ms": round(1000 * r["total_s"] / r["count"], 1),
                }
                for r in diag["rpc_by_type"]
                if "agent" in r["name"] or "REGISTRATION" in r["name"]
            }
        finally:
            for proc in reversed(procs):
                stop_process(proc)
            watch.close()
    return {
        "benchmark": "register-path",
        "nodes": nodes,
        "emulators": len(emulators),
        "heartbeat_s": heartbeat,
        "registrations": registrations,
        "requests": requests,
        "wall_s": round(wall, 2),
        "nodes_per_s": round(nodes / wall, 1),
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_ms_per_node": round(1000 * server_cpu / nodes, 3),
        "emulator_cpu_s": round(emulator_cpu, 2),
        "emulator_cpu_ms_per_node": round(1000 * emulator_cpu / nodes, 3),
        "postgres_cpu_s": round(pg_cpu, 2),
        "postgres_cpu_ms_per_node": round(1000 * pg_cpu / nodes, 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2500)
    parser.add_argument("--per-process", type=int, default=2500)
    parser.add_argument("--heartbeat", type=float, default=30.0)
    parser.add_argument(
        "--profile",
        help="py-spy's raw stacks: the server's to FILE.server, the first emulator's to "
        "FILE.emulate",
    )
    args = parser.parse_args()
    print(json.dumps(run(args.nodes, args.per_process, args.heartbeat, args.profile)))


if __name__ == "__main__":
    main()
