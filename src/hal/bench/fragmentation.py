"""``hal bench fragmentation``: on a synthetic GPU cluster with blocks, how many blocks
stay fully free over time with block-aware placement (the ``topology`` plugin on a
topology/block cluster: smallest block that fits, least free capacity first) versus
plain best-fit (the default profile without the plugin), on the same seeded trace.

The cluster: ``nodes`` nodes of 8 GPUs (8 cores, one per GPU) in base blocks of
``block`` nodes, with Slurm's default BlockSizes (the base size and its power-of-two
multiples). The trace: ``jobs`` whole-node exclusive GPU jobs (``--gres=gpu:8
--exclusive``-like: 8 GPUs and 8 cores per node) of 1 to 64 nodes (mostly multi-node,
sizes both powers of two and not), log-uniform run times of 10 min to 8 h, Poisson
arrivals at an offered load of ``load`` (node-seconds asked per node-second).

The event loop is the simulator's in miniature (``hal.sim.engine``, whose outcomes do
not carry node lists): completions, arrivals, then one real ``Scheduler.run_pass`` on a
``ClusterSnapshot`` of the moment, with a ``NodeTable`` kept up to date by take/release.
After each instant it records the number of fully free base blocks (every node idle)
and of fully free blocks of twice the base size, and the busy nodes. The figures are
time averages over the window from the first ``warmup`` fraction of the arrivals to the
last arrival (no fill-up, no drain).

Target (issue 7): block placement keeps ≥ 10% more fully free blocks over time than
plain best-fit at equal utilisation (±1 point).
"""

from __future__ import annotations

import heapq
import math
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from hal.bench import emit
from hal.core.job import Job, JobSpec
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, PendingReason
from hal.core.topology import Block, Topology
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile

PARTITION = "gpu"
GPUS = 8
TARGET_GAIN = 0.10
UTIL_TOLERANCE = 0.01
# (nodes, weight): multi-node GPU jobs, powers of two and not, a few single-node ones
SIZES = (
    (1, 2),
    (2, 4),
    (3, 2),
    (4, 4),
    (6, 2),
    (8, 4),
    (12, 2),
    (16, 3),
    (24, 1),
    (32, 2),
    (64, 1),
)


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: int
    submit: float
    run: float
    nodes: int


def make_trace(jobs: int, nodes: int, load: float, seed: int) -> tuple[TraceJob, ...]:
    rng = random.Random(seed)
    sizes = [s for s, _ in SIZES if s <= nodes]
    weights = [w for s, w in SIZES if s <= nodes]
    picked = [rng.choices(sizes, weights)[0] for _ in range(jobs)]
    runs = [math.exp(rng.uniform(math.log(600), math.log(8 * 3600))) for _ in range(jobs)]
    mean_work = sum(s * r for s, r in zip(picked, runs, strict=True)) / jobs
    rate = load * nodes / mean_work  # arrivals per second
    t = 0.0
    out: list[TraceJob] = []
    for i, (size, run) in enumerate(zip(picked, runs, strict=True)):
        t += rng.expovariate(rate)
        out.append(TraceJob(i + 1, t, run, size))
    return tuple(out)


def gpu_cluster(nodes: int, block: int) -> tuple[tuple[Node, ...], Topology]:
    names = [f"g{i:04d}" for i in range(nodes)]
    blocks = tuple(
        Block(f"b{k // block}", tuple(names[k : k + block])) for k in range(0, nodes, block)
    )
    topo = Topology(blocks=blocks)
    res = ResourceVector(GPUS, GPUS * 32 * GiB, GPUS)
    built = tuple(
        Node(name=n, resources=res, partitions=(PARTITION,), topology=topo.path_of(n))
        for n in names
    )
    return built, topo


def _spec(nodes: int) -> JobSpec:
    return JobSpec(
        user="u1",
        script="",
        partitions=(PARTITION,),
        nodes_min=nodes,
        nodes_max=nodes,
        ntasks=nodes * GPUS,
        gpus_per_node=GPUS,
        exclusive=True,
    )


def replay(
    scheduler: Scheduler,
    nodes: tuple[Node, ...],
    block_rows: list[np.ndarray[Any, np.dtype[np.intp]]],
    trace: tuple[TraceJob, ...],
    warmup: float,
) -> dict[str, float]:
    partitions = (Partition(PARTITION, default=True),)
    table = NodeTable(nodes, partitions)
    specs = {s: _spec(s) for s in {j.nodes for j in trace}}
    pending: dict[int, Job] = {}
    running: dict[int, Job] = {}
    ends: list[tuple[float, int]] = []
    by_id = {j.id: j for j in trace}
    t0, t1 = trace[int(len(trace) * warmup)].submit, trace[-1].submit
    area_free = area_pairs = area_busy = 0.0
    last_t = t0
    free_blocks = free_pairs = busy = 0
    waits: list[float] = []
    passes = 0
    i = 0
    revision = 0
    wall0 = time.perf_counter()
    while i < len(trace) or ends:
        now = min(trace[i].submit if i < len(trace) else math.inf, ends[0][0] if ends else math.inf)
        if now > t0:  # integrate the state that held since the last instant
            span = min(now, t1) - max(last_t, t0)
            if span > 0:
                area_free += free_blocks * span
                area_pairs += free_pairs * span
                area_busy += busy * span
            last_t = now
        if now >= t1 and i >= len(trace):
            break
        revision += 1
        while ends and ends[0][0] <= now:
            _, jid = heapq.heappop(ends)
            job = running.pop(jid)
            assert job.allocation is not None
            table.release(job.allocation, exclusive=True)
        while i < len(trace) and trace[i].submit <= now:
            tj = trace[i]
            i += 1
            pending[tj.id] = Job(
                id=tj.id,
                spec=specs[tj.nodes],
                partition=PARTITION,
                submit_time=tj.submit,
                time_limit_s=math.ceil(tj.run) + 1,
            )
        if pending:
            snap = ClusterSnapshot(
                revision, now, nodes, partitions, tuple(pending.values()), tuple(running.values())
            )
            result = scheduler.run_pass(snap, nodes=table.copy(), explain=False)
            passes += 1
            for placement in result.plan.placements:
                job = pending.pop(placement.job_id)
                table.take(placement.allocation, exclusive=True)
                running[job.id] = job.evolve(
                    state=JobState.RUNNING,
                    reason=PendingReason.NONE,
                    start_time=now,
                    allocation=placement.allocation,
                )
                heapq.heappush(ends, (now + by_id[job.id].run, job.id))
                if t0 <= job.submit_time <= t1:
                    waits.append(now - job.submit_time)
        busy_node = table.jobs_on > 0  # every job holds whole nodes
        free = [not busy_node[rows].any() for rows in block_rows]
        free_blocks = sum(free)
        free_pairs = sum(free[k] and free[k + 1] for k in range(0, len(free) - 1, 2))
        busy = int(busy_node.sum())
    span = t1 - t0
    return {
        "mean_free_blocks": area_free / span,
        "mean_free_double_blocks": area_pairs / span,
        "utilisation": area_busy / span / len(nodes),
        "mean_wait_s": float(np.mean(waits)) if waits else 0.0,
        "passes": passes,
        "wall_s": time.perf_counter() - wall0,
    }


def run_fragmentation_bench(
    nodes: int = 256,
    block: int = 16,
    jobs: int = 1500,
    load: float = 0.85,
    seed: int = 11,
    warmup: float = 0.1,
) -> dict[str, Any]:
    cluster_nodes, topo = gpu_cluster(nodes, block)
    trace = make_trace(jobs, nodes, load, seed)
    row_of = {n.name: i for i, n in enumerate(cluster_nodes)}
    block_rows = [np.array([row_of[n] for n in b.nodes], dtype=np.intp) for b in topo.blocks]
    aware = replay(
        build_scheduler(default_profile(topology=topo)), cluster_nodes, block_rows, trace, warmup
    )
    plain = replay(
        build_scheduler(default_profile(topology_aware=False)),
        cluster_nodes,
        block_rows,
        trace,
        warmup,
    )
    gain = (
        aware["mean_free_blocks"] / plain["mean_free_blocks"] - 1.0
        if plain["mean_free_blocks"] > 0
        else math.inf
    )
    util_gap = abs(aware["utilisation"] - plain["utilisation"])
    rounded = {k: round(v, 4) if isinstance(v, float) else v for k, v in aware.items()}
    return {
        "benchmark": "fragmentation",
        "nodes": nodes,
        "gpus_per_node": GPUS,
        "block_size": block,
        "blocks": len(topo.blocks),
        "jobs": jobs,
        "offered_load": load,
        "seed": seed,
        "block_aware": rounded,
        "plain_best_fit": {k: round(v, 4) if isinstance(v, float) else v for k, v in plain.items()},
        "free_blocks_gain": round(gain, 4),
        "utilisation_gap": round(util_gap, 4),
        "target_gain": TARGET_GAIN,
        "meets_target": gain >= TARGET_GAIN and util_gap <= UTIL_TOLERANCE,
    }


def add_commands(bsub: Any) -> None:
    """Registers ``fragmentation`` on the ``hal bench`` subparsers (wired in ``cli/bench.py``)."""
    p = bsub.add_parser(
        "fragmentation", help="fully free blocks over time: block placement vs best-fit"
    )
    p.add_argument("--nodes", type=int, default=256)
    p.add_argument("--block", type=int, default=16, help="nodes per base block")
    p.add_argument("--jobs", type=int, default=1500)
    p.add_argument("--load", type=float, default=0.85, help="offered load (0-1)")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    result = run_fragmentation_bench(ns.nodes, ns.block, ns.jobs, ns.load, ns.seed)
    return emit(result, ns.json)
