"""``hal bench harmonic``: placement from the traffic graph, measured.

``--sim``: the simulator part (``hal.sim.traffic``). A 1,000-node cluster of 4-CPU nodes
on a three-level switch tree (leaves of 16 nodes: ``--topology leaf=16,levels=3``)
replays a real trace (LLNL Thunder's first 3,000 jobs by default, in the repository:
1,002 nodes of 4 CPUs, EASY backfilling) with a communication workload laid over it:
20 services restarted daily and campaigns of clients calling them (``CommSpec``). Three
runs of the same jobs, the default profile (``harmonic`` at weight 2) each time:

* ``off``: no traffic graph (placement as without the plugin);
* ``on``: the graph the simulator has *seen* (``TrafficModel`` mode ``learned``);
* ``oracle``: the whole graph known in advance.

Reported per run: bytes between clients and their services that cross a leaf switch
(``cross_switch_bytes``), their share of all such bytes, the mean bounded slowdown of the
communication-bound jobs (the clients: response time over their run time on one node,
at least 10 s) and of the trace's jobs, mean waits. ``saving_share_of_oracle`` is
``(off - on) / (off - oracle)`` of the cross-switch bytes (goal: 0.8).

``--live``: real jobs exchanging real TCP traffic on a control plane and 4 agents of this
machine, plugin off and on (``hal.bench.harmonic_live``).

Without ``--sim`` or ``--live`` both parts run. ``pass_overhead_pct``: ``hal bench
sched-pass --harmonic`` at 10,000 jobs × 1,000 nodes
(``hal.bench.harmonic_pass``; goal: at most 10 %).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from hal.bench import emit
from hal.scheduler.framework.profile import build_profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import HARMONIC_WEIGHT, default_registry
from hal.sim.cluster import ClusterModel
from hal.sim.engine import SimRun, Simulation
from hal.sim.policies import profile_config
from hal.sim.topology import with_topology
from hal.sim.traffic import FIRST_ID, CommSpec, CommWorkload, TrafficModel, comm_workload
from hal.sim.workload import Cleaning, load_workload
from hal.testing.traces import trace_path

TRACE = "LLNL-Thunder-2007-1.1-cln.head3000.swf.gz"
NODES, CORES = 1_000, 4
TREE = "leaf=16,levels=3"
TARGET_SHARE = 0.8
TAU_S = 10.0
RUNS = {"off": "off", "on": "learned", "oracle": "oracle"}


def _bsld(outcomes: list[tuple[float, float, float]]) -> float:
    """Mean bounded slowdown of (submit, end, run time without penalty)."""
    if not outcomes:
        return 0.0
    a = np.array(outcomes)
    return float(np.mean(np.maximum(1.0, (a[:, 1] - a[:, 0]) / np.maximum(a[:, 2], TAU_S))))


def summarise(run: SimRun, model: TrafficModel, comm: CommWorkload) -> dict[str, Any]:
    done = [o for o in run.outcomes if not np.isnan(o.start)]
    clients = [o for o in done if o.job.id in comm.flows]
    trace = [o for o in done if o.job.id < FIRST_ID]
    paths = np.array(list(model.switches.values()))
    return {
        "cross_switch_bytes": model.cross_switch_bytes,
        "comm_bytes": model.bytes_total,
        "cross_switch_share": model.cross_switch_bytes / max(model.bytes_total, 1.0),
        "clients_on_service_node": float(np.mean(paths == 0)) if len(paths) else 0.0,
        "clients_under_service_leaf": float(np.mean(paths <= 1)) if len(paths) else 0.0,
        "mean_bsld_comm": _bsld([(o.job.submit, o.end, o.job.run) for o in clients]),
        "mean_bsld_trace": _bsld([(o.job.submit, o.end, o.job.run) for o in trace]),
        "mean_wait_comm_s": float(np.mean([o.start - o.job.submit for o in clients])),
        "mean_wait_trace_s": float(np.mean([o.start - o.job.submit for o in trace])),
        "jobs_run": len(done),
        "passes": run.passes,
        "wall_s": round(run.wall_s, 1),
    }


def scheduler(weight: float = HARMONIC_WEIGHT) -> Scheduler:
    """The simulator's EASY profile (the default profile's plugins, ``harmonic`` with
    ``weight``)."""
    return Scheduler(
        build_profile(profile_config("easy", harmonic_weight=weight), default_registry())
    )


def run_sim(
    trace: str = TRACE,
    first_jobs: int = 0,
    seed: int = 1,
    spec: CommSpec | None = None,
    weight: float = HARMONIC_WEIGHT,
) -> dict[str, Any]:
    cleaning = Cleaning(procs=NODES * CORES, first_jobs=first_jobs)
    workload = load_workload(trace_path(trace), cleaning)
    comm = comm_workload(workload.jobs, seed, spec)
    base = ClusterModel(nodes=NODES, cores_per_node=CORES)
    results: dict[str, dict[str, Any]] = {}
    for name, mode in RUNS.items():
        cluster, recorder = with_topology(base, scheduler(weight), TREE)
        model = TrafficModel(comm, cluster.build_nodes(), mode)
        run = Simulation(comm.jobs, cluster, recorder, traffic=model).run()
        results[name] = summarise(run, model, comm)
    off, on, oracle = (results[k]["cross_switch_bytes"] for k in ("off", "on", "oracle"))
    share = (off - on) / (off - oracle) if off > oracle else 0.0
    spec = spec or CommSpec()
    return {
        "trace": trace,
        "trace_jobs": len(workload.jobs),
        "nodes": NODES,
        "cores_per_node": CORES,
        "tree": TREE,
        "services": spec.groups,
        "clients": len(comm.flows),
        "client_identities": len({k[0] for k in comm.expected}),
        "harmonic_weight": weight,
        "cross_switch_bytes": {k: results[k]["cross_switch_bytes"] for k in RUNS},
        "mean_bsld_comm": {k: results[k]["mean_bsld_comm"] for k in RUNS},
        "saving_share_of_oracle": share,
        "meets_target": share >= TARGET_SHARE,
        "target_share": TARGET_SHARE,
        "runs": results,
    }


def run_harmonic_bench(
    sim: bool = True,
    first_jobs: int = 0,
    seed: int = 1,
    pass_repeats: int = 21,
    live: bool = True,
    live_clients: int = 8,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {"benchmark": "harmonic"}
    if live:
        from hal.bench.harmonic_live import run_live

        out["live"] = run_live(clients=live_clients)
    if sim:
        out["sim"] = run_sim(first_jobs=first_jobs, seed=seed)
    if pass_repeats > 0:
        from hal.bench.harmonic_pass import run_harmonic_pass_bench

        cost = run_harmonic_pass_bench(repeats=pass_repeats)
        out["pass_overhead_pct"] = cost["overhead_pct"]
        out["pass"] = cost
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def add_commands(bsub: Any) -> None:
    p = bsub.add_parser(
        "harmonic", help="placement from the traffic graph (live and simulated; pass cost)"
    )
    p.add_argument(
        "--sim", action="store_true", help="the simulator part (only it, unless --live too)"
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="the live part: real jobs on 4 local agents (only it, unless --sim too)",
    )
    p.add_argument(
        "--live-clients", type=int, default=8, help="client jobs per round of the live part"
    )
    p.add_argument("--first-jobs", type=int, default=0, help="replay only the trace's first K")
    p.add_argument("--seed", type=int, default=1, help="the communication workload's seed")
    p.add_argument(
        "--pass-repeats", type=int, default=21, help="sched-pass repeats for the cost (0: skip)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: argparse.Namespace) -> int:
    both = not (ns.sim or ns.live)  # neither named: both parts
    result = run_harmonic_bench(
        ns.sim or both,
        ns.first_jobs,
        ns.seed,
        ns.pass_repeats,
        live=ns.live or both,
        live_clients=ns.live_clients,
    )
    return emit(result, ns.json)
