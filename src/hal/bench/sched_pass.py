"""``hal bench sched-pass``: one full scheduler pass (main loop + EASY backfill, the
default server profile) on a synthetic cluster and queue.

The cluster: N nodes of 64 CPUs, 80% plain (256 GiB), 10% with 8 GPUs (512 GiB), 10%
big-memory (1 TiB); four partitions given as node lists, as the config gives them
(``batch`` default: plain + big-memory nodes; ``gpu``; ``bigmem``; ``debug``: a few plain
nodes, 1 h, at most 4 nodes, higher tier). Running jobs fill about half the nodes' CPUs.

The queue: J pending jobs from 200 users in 20 accounts: 1-CPU and small single-node
jobs, whole nodes, multi-node (2-128 nodes), GPU jobs (1-8 GPUs, multi-node GPU), big
memory, debug; 3% of the 1-CPU, small and GPU submissions are arrays (4-128 elements
sharing one spec, as Slurm keeps them, some with a ``%`` throttle), so about half the
pending jobs are array elements (``array_elements``); some user or admin holds,
``--begin`` in the future, and ``afterok`` dependencies on pending, running or finished
jobs. Seeded: the same arguments give the same workload. With limits (the default;
``--no-limits`` leaves them out) every job is charged to a project account under two
organisations and a QoS, and the pass runs the ``limits`` plugin against GrpTRES,
GrpJobs, MaxJobs, MaxJobsPerUser, MaxWall and MaxTRESPerJob caps (``sched_limits``).

One repeat times ``Scheduler.run_pass(snapshot, backfill=True)`` with no table passed
in, so the ``NodeTable`` build (running jobs taken out) is inside the timing, as in the
server's pass; its own cost is reported apart (``table_build_ms``). Peak memory is
measured on one more pass, run under ``tracemalloc`` (Python and numpy allocations of the
pass alone: ``pass_peak_traced_mib``); ``maxrss_mib`` is the whole process's peak RSS
(``resource.getrusage``: interpreter, synthetic snapshot and the passes).

Targets (issue 3): J=50,000 × N=10,000 median ≤ 1 s; J=10,000 × N=1,000 median ≤ 100 ms;
peak ≤ 2 GB.
"""

from __future__ import annotations

import dataclasses
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hal.bench import emit
from hal.bench.sched_limits import build_policy, charged
from hal.core.job import (
    Allocation,
    ArraySpec,
    Dependency,
    DependencyKind,
    DependencyTerm,
    Job,
    JobSpec,
)
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.scheduler import PassResult, Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry

CPUS = 64
GPUS = 8
NOW = 1_000_000.0
TARGETS_MS = {(50_000, 10_000): 1000.0, (10_000, 1_000): 100.0}
PEAK_TARGET_MIB = 2048.0
CURVE_JOBS = (1_000, 10_000, 50_000)
CURVE_NODES = (1_000, 10_000, 50_000)
TIME_LIMITS = (600, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 48 * 3600)


@dataclass(frozen=True, slots=True)
class Workload:
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    pending: tuple[Job, ...]
    running: tuple[Job, ...]
    related: dict[int, Job]
    arrays: int

    def snapshot(self, revision: int = 1) -> ClusterSnapshot:
        return ClusterSnapshot(
            revision, NOW, self.nodes, self.partitions, self.pending, self.running, self.related
        )


def build_cluster(count: int) -> tuple[tuple[Node, ...], tuple[Partition, ...]]:
    gpu_from = int(count * 0.8)
    big_from = int(count * 0.9)
    nodes: list[Node] = []
    for i in range(count):
        name = f"n{i:05d}"
        if i < gpu_from:
            nodes.append(Node(name, ResourceVector(CPUS, 256 * GiB), features=("cpu", "ib")))
        elif i < big_from:
            res = ResourceVector(CPUS, 512 * GiB, GPUS)
            nodes.append(Node(name, res, features=("gpu", "a100"), gpu_model="a100"))
        else:
            nodes.append(Node(name, ResourceVector(CPUS, 1024 * GiB), features=("bigmem",)))
    names = [n.name for n in nodes]
    debug = tuple(names[: max(2, count // 50)])
    partitions = (
        Partition(
            "batch",
            tuple(names[:gpu_from] + names[big_from:]),
            default=True,
            max_time_s=48 * 3600,
            default_time_s=3600,
        ),
        Partition("gpu", tuple(names[gpu_from:big_from]), max_time_s=48 * 3600),
        Partition("bigmem", tuple(names[big_from:]), max_time_s=48 * 3600),
        Partition("debug", debug, max_time_s=3600, max_nodes=4, priority_tier=2),
    )
    return tuple(nodes), partitions


def _running(nodes: tuple[Node, ...], rng: random.Random, first_id: int) -> list[Job]:
    """Jobs on about half the nodes' CPUs: some 4-node whole-node jobs, the rest one node
    each (whole or part; GPU nodes with some GPUs held)."""
    jobs: list[Job] = []
    next_id = first_id
    i = 0
    count = len(nodes)
    while i < count:
        node = nodes[i]
        if rng.random() >= 0.5:
            i += 1
            continue
        gpu = node.resources.gpus > 0
        part = "gpu" if gpu else ("bigmem" if node.resources.memory_bytes > 512 * GiB else "batch")
        span = 4 if rng.random() < 0.08 and i + 4 <= count else 1
        group = nodes[i : i + span]
        if any(n.resources != node.resources for n in group):
            span, group = 1, (node,)
        cpus = CPUS if span > 1 else rng.choice((CPUS, CPUS, 48, 32, 16, 8))
        gpus = (GPUS if span > 1 else rng.choice((2, 4, 8))) if gpu else 0
        mem = cpus * 4 * GiB if not gpu else cpus * 8 * GiB
        per = ResourceVector(cpus, mem, gpus)
        gpu_ids = tuple(tuple(range(gpus)) for _ in group) if gpus else ()
        alloc = Allocation(tuple(n.name for n in group), tuple(per for _ in group), gpu_ids)
        spec = JobSpec(
            user=f"u{rng.randrange(200):03d}",
            script="#!/bin/sh\n",
            partitions=(part,),
            nodes_min=span,
            nodes_max=span,
            ntasks=cpus * span,
            ntasks_per_node=cpus,
            memory_per_cpu_bytes=mem // cpus,
            gpus_per_node=gpus,
        )
        limit = rng.choice(TIME_LIMITS)
        jobs.append(
            Job(
                next_id,
                spec,
                state=JobState.RUNNING,
                partition=part,
                submit_time=NOW - 2 * limit,
                start_time=NOW - rng.uniform(0, limit * 0.9),
                time_limit_s=limit,
                allocation=alloc,
            )
        )
        next_id += 1
        i += span
    return jobs


def _pending_spec(rng: random.Random, user: str, account: str) -> tuple[JobSpec, str, bool]:
    """One submission's spec, its partition, and whether it may be an array."""
    roll = rng.random()
    base = JobSpec(user=user, script="#!/bin/sh\n", account=account)
    if roll < 0.30:  # serial
        spec = base.with_changes(memory_per_cpu_bytes=2 * GiB)
        return spec, "batch", True
    if roll < 0.52:  # small single node
        n = rng.choice((2, 4, 8, 16, 32))
        spec = base.with_changes(ntasks=n, memory_per_cpu_bytes=4 * GiB)
        return spec, "batch", True
    if roll < 0.60:  # a whole node
        spec = base.with_changes(ntasks=CPUS, memory_per_node_bytes=0, exclusive=True)
        return spec, "batch", False
    if roll < 0.66:  # multi-node
        n = rng.choice((2, 2, 4, 4, 8, 16))
        return _multi(base, n), "batch", False
    if roll < 0.67:  # large multi-node
        return _multi(base, rng.choice((32, 64, 128))), "batch", False
    if roll < 0.80:  # GPU, one node
        g = rng.choice((1, 1, 2, 4, 8))
        spec = base.with_changes(
            ntasks=g * 8, gpus_per_node=g, gpu_type="a100", memory_per_gpu_bytes=48 * GiB
        )
        return spec, "gpu", True
    if roll < 0.82:  # GPU, multi-node
        n = rng.choice((2, 4))
        spec = _multi(base, n).with_changes(gpus_per_node=GPUS, memory_per_node_bytes=0)
        return spec, "gpu", False
    if roll < 0.87:  # big memory
        mem = rng.choice((384, 512, 768, 900)) * GiB
        spec = base.with_changes(ntasks=rng.choice((8, 16, 32)), memory_per_node_bytes=mem)
        return spec, "bigmem", False
    if roll < 0.90:  # debug
        n = rng.choice((1, 1, 2, 4))
        return _multi(base, n), "debug", False
    # a constrained or excluding single-node job
    spec = base.with_changes(ntasks=rng.choice((4, 8)), constraint=("ib",))
    return spec, "batch", True


def _multi(base: JobSpec, nodes: int) -> JobSpec:
    return base.with_changes(
        nodes_min=nodes,
        nodes_max=nodes,
        ntasks=nodes * CPUS,
        ntasks_per_node=CPUS,
        memory_per_cpu_bytes=3 * GiB,
    )


def build_workload(jobs: int, nodes: int, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    cluster, partitions = build_cluster(nodes)
    running = _running(cluster, rng, 1)
    finished = [
        Job(
            len(running) + 1 + k,
            JobSpec(user="u000", script="#!/bin/sh\n"),
            state=JobState.COMPLETED,
            partition="batch",
        )
        for k in range(50)
    ]
    related: dict[int, Job] = {}
    next_id = len(running) + len(finished) + 1
    pending: list[Job] = []
    arrays = 0
    while len(pending) < jobs:
        u = rng.randrange(200)
        user, account = f"u{u:03d}", f"acct{u % 20:02d}"
        spec, part, arrayable = _pending_spec(rng, user, account)
        limit = rng.choice(TIME_LIMITS[:2] if part == "debug" else TIME_LIMITS)
        spec = spec.with_changes(partitions=(part,), time_limit_s=limit)
        roll = rng.random()
        held_admin = False
        if roll < 0.02:
            spec = spec.with_changes(hold=True)
        elif roll < 0.025:
            held_admin = True
        elif roll < 0.035:
            spec = spec.with_changes(begin_time=NOW + rng.uniform(600, 86_400))
        elif roll < 0.085 and (pending or running):
            pool: list[Job] = rng.choice((pending, running, finished)) or running
            target = rng.choice(pool)
            related[target.id] = target
            term = DependencyTerm(DependencyKind.AFTEROK, (target.id,))
            spec = spec.with_changes(dependency=Dependency((term,)))
        size = 1
        throttle = 0
        if arrayable and rng.random() < 0.03:
            size = min(rng.choice((4, 8, 16, 32, 64, 128)), jobs - len(pending))
            throttle = rng.choice((0, 0, 0, 4, 16))
            if size > 1:
                arrays += 1
                spec = spec.with_changes(
                    array=ArraySpec(tuple(range(size)), throttle, f"0-{size - 1}")
                )
        priority = rng.randrange(1_000, 100_000)
        submit = NOW - rng.uniform(0, 7 * 86_400)
        first = next_id
        for k in range(size):
            pending.append(
                Job(
                    next_id,
                    spec,
                    partition=part,
                    priority=priority,
                    submit_time=submit,
                    time_limit_s=limit,
                    held_by_admin=held_admin,
                    array_job_id=first if size > 1 else None,
                    array_task_id=k if size > 1 else None,
                    array_max_running=throttle if size > 1 else 0,
                )
            )
            next_id += 1
    return Workload(cluster, partitions, tuple(pending), tuple(running), related, arrays)


def overcommitted_nodes(workload: Workload, result: PassResult) -> list[str]:
    """Nodes where the running jobs plus the pass's placements exceed a capacity, share
    a GPU index, or share a node with an exclusive job."""
    cap = {n.name: n.resources for n in workload.nodes}
    used: dict[str, ResourceVector] = {}
    gpus: dict[str, set[int]] = {}
    holders: Counter[str] = Counter()
    exclusive: set[str] = set()
    bad: set[str] = set()
    placed = {p.job_id: p.allocation for p in result.plan.placements}
    by_id = {j.id: j for j in workload.pending}
    pairs = [(j.spec.exclusive, j.allocation) for j in workload.running]
    pairs += [(by_id[i].spec.exclusive, a) for i, a in placed.items()]
    for excl, alloc in pairs:
        if alloc is None:
            continue
        for k, name in enumerate(alloc.nodes):
            used[name] = used.get(name, ResourceVector()) + alloc.per_node[k]
            holders[name] += 1
            if excl:
                exclusive.add(name)
            ids = alloc.gpu_ids[k] if k < len(alloc.gpu_ids) else ()
            taken = gpus.setdefault(name, set())
            if taken.intersection(ids):
                bad.add(name)
            taken.update(ids)
    for name, res in used.items():
        if not res.fits_in(cap[name]) or (name in exclusive and holders[name] > 1):
            bad.add(name)
    return sorted(bad)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def measure(workload: Workload, scheduler: Scheduler, repeats: int) -> dict[str, Any]:
    snap = workload.snapshot()
    builds: list[float] = []
    for _ in range(max(1, min(repeats, 3))):
        t0 = time.perf_counter()
        NodeTable.build(snap.nodes, snap.partitions, snap.running)
        builds.append(time.perf_counter() - t0)
    times: list[float] = []
    cpu: list[float] = []  # the pass's CPU time: steadier than wall on a shared machine
    result: PassResult | None = None
    for r in range(repeats):
        snap = workload.snapshot(revision=r + 1)  # a fresh snapshot; the pass builds its table
        t0, c0 = time.perf_counter(), time.process_time()
        result = scheduler.run_pass(snap, backfill=True)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    assert result is not None
    tracemalloc.start()
    scheduler.run_pass(workload.snapshot(revision=repeats + 1), backfill=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    plan = result.plan
    top: Counter[str] = Counter()
    for (_, reason), n in result.rejections.items():
        top[str(reason)] += n
    return {
        "repeats": repeats,
        "median_ms": _ms(statistics.median(times)),
        "p90_ms": _ms(_p90(times)),
        "min_ms": _ms(min(times)),
        "cpu_median_ms": _ms(statistics.median(cpu)),
        "table_build_ms": _ms(statistics.median(builds)),
        "jobs_started": len(plan.placements),
        "updates": len(plan.updates),
        "terminations": len(plan.terminations),
        "reservations": len(result.reservations),
        "waiting_reasons": dict(top.most_common(8)),
        "pass_peak_traced_mib": round(peak / 2**20, 1),
        "overcommitted_nodes": len(overcommitted_nodes(workload, result)),
    }


def _maxrss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (2**20 if sys.platform == "darwin" else 1024), 1)


def with_limits(workload: Workload) -> tuple[Workload, Scheduler]:
    """``workload`` charged to accounts and QoS, and the default scheduler with the
    ``limits`` plugin enforcing ``sched_limits``' policy (as the server builds it)."""
    limited = dataclasses.replace(
        workload, pending=charged(workload.pending), running=charged(workload.running)
    )
    policy = build_policy(len(workload.nodes), CPUS, GPUS)
    scheduler = build_scheduler(default_profile(limits=True), default_registry(policy=policy))
    return limited, scheduler


def run_sched_pass_bench(
    jobs: int = 50_000, nodes: int = 10_000, repeats: int = 5, seed: int = 1, limits: bool = True
) -> dict[str, Any]:
    t0 = time.perf_counter()
    workload = build_workload(jobs, nodes, seed)
    scheduler = build_scheduler()
    if limits:
        workload, scheduler = with_limits(workload)
    build_s = time.perf_counter() - t0
    out: dict[str, Any] = {
        "benchmark": "sched-pass",
        "jobs": len(workload.pending),
        "nodes": len(workload.nodes),
        "running_jobs": len(workload.running),
        "arrays": workload.arrays,
        "array_elements": sum(1 for j in workload.pending if j.array_job_id is not None),
        "profile": "default (main + backfill EASY)" + (" + limits" if limits else ""),
        "workload_build_s": round(build_s, 2),
    }
    out.update(measure(workload, scheduler, repeats))
    out["maxrss_mib"] = _maxrss_mib()
    target = TARGETS_MS.get((jobs, nodes))
    if target is not None:
        out["target_median_ms"] = target
        out["meets_target"] = out["median_ms"] <= target
    out["peak_target_mib"] = PEAK_TARGET_MIB
    out["meets_peak_target"] = out["pass_peak_traced_mib"] <= PEAK_TARGET_MIB
    return out


def run_targets(repeats: int = 5, limits: bool = True) -> dict[str, Any]:
    """The two target points of issue 3 (what ``bench/run_all.py`` runs)."""
    points = [run_sched_pass_bench(j, n, repeats, limits=limits) for j, n in TARGETS_MS]
    return {
        "benchmark": "sched-pass",
        "points": points,
        "meets_targets": all(p["meets_target"] and p["meets_peak_target"] for p in points),
    }


def run_curve(
    repeats: int = 3,
    max_cell_s: float = 60.0,
    skip: tuple[tuple[int, int], ...] = (),
    jobs: tuple[int, ...] = CURVE_JOBS,
    nodes: tuple[int, ...] = CURVE_NODES,
    limits: bool = True,
) -> dict[str, Any]:
    """The scaling grid. A cell whose first pass takes over ``max_cell_s`` is measured
    once, and every cell at least as large in both dimensions is skipped (reported)."""
    cells: list[dict[str, Any]] = []
    too_slow: list[tuple[int, int, float]] = []
    for j in jobs:
        for n in nodes:
            if (j, n) in skip:
                cells.append({"jobs": j, "nodes": n, "skipped": "--skip"})
                continue
            slow = next(((sj, sn, s) for sj, sn, s in too_slow if j >= sj and n >= sn), None)
            if slow is not None:
                why = f"{slow[0]}x{slow[1]} took {slow[2]:.1f} s > {max_cell_s:.0f} s"
                cells.append({"jobs": j, "nodes": n, "skipped": why})
                continue
            cell = run_sched_pass_bench(j, n, 1, limits=limits)
            if cell["median_ms"] / 1000.0 <= max_cell_s and repeats > 1:
                cell = run_sched_pass_bench(j, n, repeats, limits=limits)
            else:
                too_slow.append((j, n, cell["median_ms"] / 1000.0))
            cells.append(cell)
            # progress on stderr: the JSON comes only at the end of the grid
            print(f"{j}x{n}: median {cell['median_ms']} ms", file=sys.stderr, flush=True)
    return {"benchmark": "sched-pass-curve", "cells": cells, "max_cell_s": max_cell_s}


def add_commands(bsub: Any) -> None:
    """Registers ``sched-pass`` on the ``hal bench`` subparsers (wired in ``cli/bench.py``)."""
    p = bsub.add_parser("sched-pass", help="one full scheduler pass (main + backfill)")
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--curve", action="store_true", help="the 1k/10k/50k jobs × nodes grid")
    p.add_argument("--max-cell-s", type=float, default=60.0, help="with --curve")
    p.add_argument(
        "--skip", default="", help="with --curve: cells to skip, e.g. 50000x50000,50000x10000"
    )
    p.add_argument(
        "--no-limits",
        dest="limits",
        action="store_false",
        help="no accounts, QoS or limits (the workload measured before 2026-11-23)",
    )
    p.add_argument(
        "--harmonic",
        action="store_true",
        help="the pass with and without the harmonic plugin and a traffic graph "
        "(nodes on a switch tree; default size 10,000 jobs x 1,000 nodes)",
    )
    p.add_argument(
        "--dissonance",
        action="store_true",
        help="the pass with and without the dissonance plugin and an interference model "
        "(default size 10,000 jobs x 1,000 nodes)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    if ns.dissonance:
        from hal.bench.dissonance_pass import run_dissonance_pass_bench

        jobs = 10_000 if ns.jobs == 50_000 else ns.jobs  # (the size by default)
        nodes = 1_000 if ns.nodes == 10_000 else ns.nodes
        return emit(run_dissonance_pass_bench(jobs, nodes, ns.repeat, ns.seed), ns.json)
    if ns.harmonic:
        from hal.bench.harmonic_pass import run_harmonic_pass_bench

        jobs = 10_000 if ns.jobs == 50_000 else ns.jobs  # (the size by default)
        nodes = 1_000 if ns.nodes == 10_000 else ns.nodes
        return emit(run_harmonic_pass_bench(jobs, nodes, ns.repeat, ns.seed), ns.json)
    if ns.curve:
        skip = tuple(
            (int(a), int(b)) for a, b in (c.split("x") for c in ns.skip.split(",") if c.strip())
        )
        result = run_curve(ns.repeat, ns.max_cell_s, skip, limits=ns.limits)
    else:
        result = run_sched_pass_bench(ns.jobs, ns.nodes, ns.repeat, ns.seed, ns.limits)
    return emit(result, ns.json)
