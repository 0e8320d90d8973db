"""``hal bench harmonic --live``: the traffic graph placing real jobs on a real cluster.

A control plane (``LiveServer``) and 4 agents on this machine, nodes of 4 CPUs under two
leaf switches (``leaf0``: node1-node2, ``leaf1``: node3-node4, one spine above), agents
reading their jobs' TCP traffic every second (``--traffic-interval 1``, heartbeats of
1 s). The same scenario runs twice, each on a fresh server: ``[harmonic] weight = 0``
(``off``: the plugin left out of the profile; the graph is still kept) and the default
weight (``on``).

* A service job (``svc``, 1 CPU, on node1) runs a threaded TCP echo server; it writes its
  address into a file of a shared directory.
* Two filler jobs of 2 CPUs (no traffic) on node3 and node4: best fit then prefers the
  nodes of ``leaf1`` (2 CPUs free) to node1 (3 free) and node2 (4 free).
* A stream of client jobs (name ``client``: one workload identity), submitted one every
  ``gap_s`` with no affinity and 1 CPU each: each reads the address, sends
  ``client_bytes`` to the service and reads the echo back, keeps the connection open
  ``hold_s`` (so both agents read its counters), and exits.

Round 1 teaches the graph (``on`` places it as ``off`` does: no edge yet); once the
scheduler's view has the edge ``admin/client`` - ``admin/svc``, round 2 is measured:
the growth of ``hal_harmonic_bytes_total`` by distance while it runs (``switch`` and
``site``: across leaf switches), and the clients' mean wait (start - submit). The setup
favours the plugin: every client fits in the service's leaf, and best fit alone sends
them to the other leaf, so ``off`` is close to the worst case and ``on`` to the best.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hal.api.server import HalServer
from hal.bench.replay_cost import cpu_model
from hal.bench.slurm_peer import bench_work_dir
from hal.client import HalClient
from hal.scheduler.plugins import HARMONIC_WEIGHT
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

NODES, CPUS = 4, 4
LEAVES = {"node1": "leaf0", "node2": "leaf0", "node3": "leaf1", "node4": "leaf1"}
SERVICE_NODE = "node1"
FILLERS = {"node3": 2, "node4": 2}  # CPUs held on the other leaf
CROSS_LEAF = ("switch", "site")  # hal_harmonic_bytes_total's distances above a leaf
SERVICE_ID, CLIENT_ID = "admin/svc", "admin/client"
MiB = 1 << 20
TARGET_REDUCTION = 5.0  # the goal: 5x fewer cross-leaf bytes with the plugin on
TARGET_WAIT_PCT = 5.0  # and a mean wait no more than 5 % longer

CONFIG = """\
heartbeat_interval_seconds = 1

[harmonic]
weight = {weight}

[topology]
level_names = ["leaf", "spine"]
[[topology.switches]]
name = "leaf0"
nodes = "node[1-2]"
[[topology.switches]]
name = "leaf1"
nodes = "node[3-4]"
[[topology.switches]]
name = "spine0"
switches = "leaf[0-1]"
"""

SERVICE = """\
import os, socket, sys, threading

shared = sys.argv[1]
listener = socket.create_server(("127.0.0.1", 0))


def echo(conn):
    with conn:
        while True:
            data = conn.recv(1 << 16)
            if not data:
                return
            conn.sendall(data)


with open(os.path.join(shared, "service.tmp"), "w") as f:
    f.write("%s %d" % listener.getsockname()[:2])
os.rename(os.path.join(shared, "service.tmp"), os.path.join(shared, "service.addr"))
while True:
    conn, _ = listener.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
"""

CLIENT = """\
import socket, sys, time

shared, total, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
host, port = open(shared + "/service.addr").read().split()
conn = socket.create_connection((host, int(port)))
chunk = b"x" * 65536
left = total
while left:
    n = min(left, len(chunk))
    conn.sendall(chunk[:n])
    got = 0
    while got < n:
        data = conn.recv(n - got)
        if not data:
            sys.exit("the service closed the connection")
        got += len(data)
    left -= n
time.sleep(hold)  # both agents read the connection's counters before it closes
conn.close()
"""


def job(script: str, name: str, workdir: Path, cpus: int = 1, **fields: Any) -> JobSubmit:
    return JobSubmit(
        script=f"#!/bin/sh\nexec {script}\n",
        name=name,
        workdir=str(workdir),
        cpus_per_task=cpus,
        memory_per_node_bytes=64 * MiB,
        **{"time_limit_seconds": 3600, **fields},
    )


def bytes_by_distance(url: str) -> dict[str, float]:
    """``hal_harmonic_bytes_total`` per ``distance`` label."""
    text = http.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "hal_harmonic_bytes_total":
                out[s.labels["distance"]] = out.get(s.labels["distance"], 0.0) + s.value
    return out


def run_round(
    hal: HalClient, shared: Path, clients: int, client_bytes: int, gap_s: float, hold_s: float
) -> list[int]:
    """Submit the clients one every ``gap_s``; their ids once all have ended."""
    argv = f"{sys.executable} {shared / 'client.py'} {shared} {client_bytes} {hold_s}"
    ids = []
    for i in range(clients):
        if i:
            time.sleep(gap_s)
        ids.append(hal.submit(job(argv, "client", shared, time_limit_seconds=300)).job_id)
    ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
    wait_until(
        lambda: all(hal.job(j).state in ended for j in ids),
        timeout=120 + clients * (gap_s + hold_s),
        interval=0.2,
        message="the clients to end",
    )
    failed = [j for j in ids if hal.job(j).state != "COMPLETED"]
    if failed:
        raise RuntimeError(f"clients {failed} did not complete (see {shared})")
    return ids


def run_mode(
    work: Path,
    weight: float,
    clients: int,
    client_bytes: int,
    gap_s: float,
    hold_s: float,
) -> dict[str, Any]:
    """One server with ``[harmonic] weight``: round 1 teaches, round 2 is measured."""
    work.mkdir(parents=True)
    shared = work / "shared"
    shared.mkdir()
    (shared / "service.py").write_text(SERVICE)
    (shared / "client.py").write_text(CLIENT)
    config = work / "hal.toml"
    config.write_text(CONFIG.format(weight=weight))
    extra = ["--traffic-interval", "1"]
    with LiveServer(work / "hal", config_file=config) as live, live.client() as hal:
        for i in range(1, NODES + 1):
            live.start_agent(f"node{i}", cpus=CPUS, memory="1G", extra=extra)
        wait_until(
            lambda: len([n for n in hal.nodes() if n.state == "UP"]) >= NODES,
            timeout=90,
            message="the agents to register",
        )
        svc = f"{sys.executable} {shared / 'service.py'} {shared}"
        held = [hal.submit(job(svc, "svc", shared, nodelist=[SERVICE_NODE])).job_id]
        for node, cpus in FILLERS.items():
            held.append(
                hal.submit(job("sleep 3600", "filler", shared, cpus, nodelist=[node])).job_id
            )
        wait_until(
            lambda: (
                (shared / "service.addr").exists()
                and all(hal.job(j).state == "RUNNING" for j in held)
            ),
            timeout=60,
            message="the service and the fillers to run",
        )
        try:
            t0 = time.monotonic()
            first = run_round(hal, shared, clients, client_bytes, gap_s, hold_s)
            server = live.server
            assert isinstance(server, HalServer)
            wait_until(
                lambda: SERVICE_ID in server.traffic.view().peers(CLIENT_ID),
                timeout=60,
                interval=0.2,
                message="the scheduler's view of the graph to hold the clients' edge",
            )
            learned_s = time.monotonic() - t0
            time.sleep(2 * hold_s)  # round 1's last reports
            before = bytes_by_distance(live.url)
            second = run_round(hal, shared, clients, client_bytes, gap_s, hold_s)
            expected = 2 * clients * client_bytes  # each side counts what it sent
            with contextlib.suppress(TimeoutError):  # then reported as counted < expected
                wait_until(
                    lambda: (
                        sum(bytes_by_distance(live.url).values()) - sum(before.values()) >= expected
                    ),
                    timeout=30,
                    interval=0.5,
                )
            after = bytes_by_distance(live.url)
            jobs = {j: hal.job(j) for j in [*first, *second]}
        finally:
            for j in held:
                hal.cancel(j)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    waits = [(jobs[j].start_time or 0.0) - jobs[j].submit_time for j in second]
    nodes = [jobs[j].nodes[0] for j in second]
    return {
        "weight": weight,
        "cross_leaf_bytes": sum(delta.get(k, 0.0) for k in CROSS_LEAF),
        "bytes_by_distance": delta,
        "bytes_counted": sum(delta.values()),
        "bytes_exchanged": expected,
        "mean_wait_s": sum(waits) / len(waits),
        "clients_under_service_leaf": sum(LEAVES[n] == LEAVES[SERVICE_NODE] for n in nodes)
        / len(nodes),
        "round1_nodes": [jobs[j].nodes[0] for j in first],
        "round2_nodes": nodes,
        "graph_learned_s": round(learned_s, 1),
    }


def run_live(
    clients: int = 8,
    client_bytes: int = 4 * MiB,
    gap_s: float = 1.0,
    hold_s: float = 3.0,
) -> dict[str, Any]:
    """Both modes, ``off`` first; the figures the JSON's ``live`` carries."""
    t0 = time.perf_counter()
    modes: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=bench_work_dir(), prefix="harmonic-live-") as tmp:
        for name, weight in (("off", 0.0), ("on", HARMONIC_WEIGHT)):
            modes[name] = run_mode(Path(tmp) / name, weight, clients, client_bytes, gap_s, hold_s)
    off, on = modes["off"], modes["on"]
    return {
        "cpu_model": cpu_model(),
        "nodes": NODES,
        "cpus_per_node": CPUS,
        "leaves": sorted(set(LEAVES.values())),
        "clients_per_round": clients,
        "client_bytes": client_bytes,
        "cross_leaf_bytes": {"on": on["cross_leaf_bytes"], "off": off["cross_leaf_bytes"]},
        "mean_wait_s": {"on": on["mean_wait_s"], "off": off["mean_wait_s"]},
        # off / on (None when nothing crossed with the plugin on)
        "cross_leaf_reduction": (
            off["cross_leaf_bytes"] / on["cross_leaf_bytes"] if on["cross_leaf_bytes"] else None
        ),
        "meets_target": {
            "cross_leaf": on["cross_leaf_bytes"] * TARGET_REDUCTION <= off["cross_leaf_bytes"],
            "mean_wait": on["mean_wait_s"] <= off["mean_wait_s"] * (1 + TARGET_WAIT_PCT / 100),
        },
        "runs": modes,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
