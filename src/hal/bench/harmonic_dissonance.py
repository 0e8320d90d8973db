"""``hal bench harmonic-dissonance``: keeping work that clashes apart, measured.

**The simulator part** (``--sim``; ``hal.sim.interference``). Each slice of a real trace
is replayed on nodes of 8 CPUs with EASY backfilling and the default profile, its jobs
put in classes per workload identity (the trace's user and executable) and slowed by
the neighbours on their nodes through a hidden ground-truth matrix
(``hal.sim.interference.TRUTH``). Four runs of the same jobs:

* ``none``: no interference at all (the truth all 1.0: the reference);
* ``oblivious``: interference, and no model (the ``dissonance`` plugin skips: packing
  by best fit alone);
* ``plugin``: the model the simulator learns from the slowdowns it observes (every job
  end: its elapsed time over its solo run time, and its exposure), the classes of
  workloads profiled once one of their jobs has run a minute;
* ``oracle``: the true matrix and every workload's class from the start.

``interference_bsld`` is the mean bounded slowdown *lost to interference*: per job,
``max(1, (wait + elapsed) / max(solo, 10))`` less the same with its solo run time, i.e.
what its stretched run added to its bounded slowdown, the waits as they fell in that run
(so 0 in ``none``). The full mean bounded slowdown (waits included) is reported beside
it. ``utilization`` is the work done (solo CPU-seconds) over the machine's CPU-seconds
from the first submission to the last end, in percent. ``share_of_oracle_gain`` is
``(oblivious - plugin) / (oblivious - oracle)`` of ``interference_bsld`` (goal: 0.6,
with utilisation within 2 points of oblivious packing).

Traces without requested times (METACENTRUM's) would kill every slowed job at its solo
run time: there, a job's limit is three times its run time (a user without an estimate
asks generously). Jobs with a request keep it and may be killed when slowed
(``killed``).

The figures under ``sim`` are the means over the slices; each slice's own are under
``sim.traces``.

**Pass cost.** ``pass_overhead_pct``: ``hal bench sched-pass --dissonance`` at 10,000
jobs × 1,000 nodes (``hal.bench.dissonance_pass``; goal: at most 10 %).

**Malleable jobs** (``sim.malleable_mean_jct_s``; ``hal.bench.malleable``): the mean
completion time of malleable training-like jobs on two other slices, at fixed
allocations (``static``), started within their range (``moldable``) and resized by the
feedback controller (``feedback``); ``--malleable-only`` runs this part alone.

**The live part** (``--live`` alone; ``hal.bench.dissonance_live``): a latency-sensitive
service reporting its p99 through the feedback API beside batch work of the kind that
hurts it most here, on a real server and two agents of this machine, the plugin off
then on: ``live.service_p99_ms.off``/``.on``, the batch throughput, where the batch
jobs ran, and what the probe measured of each kind of batch work.

A part not run (``--sim``, ``--live``, ``--malleable-only``) is ``null`` in the JSON,
named in ``not_measured``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hal.bench import emit
from hal.bench.malleable import SLICES as MALLEABLE_SLICES
from hal.bench.malleable import parse_slices as parse_malleable_slices
from hal.bench.malleable import run_malleable
from hal.bench.slices import Slice, parse_slices
from hal.core.profiles import CLASSES
from hal.scheduler.framework.profile import build_profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import DISSONANCE_WEIGHT, default_registry
from hal.sim.cluster import ClusterModel
from hal.sim.engine import SimRun, Simulation
from hal.sim.interference import TRUTH, InterferenceModel
from hal.sim.policies import profile_config
from hal.sim.traces import trace_file
from hal.sim.workload import Cleaning, TraceJob, load_workload

TAU_S = 10.0
TARGET_SHARE = 0.6
UTIL_POINTS = 2.0
NO_REQUEST_LIMIT = 3.0  # a job without a requested time may run this many times its run
RUNS = ("none", "oblivious", "plugin", "oracle")
_MODES = {"none": "off", "oblivious": "off", "plugin": "learned", "oracle": "oracle"}
NOT_MEASURED = (
    "{} not measured in this run (null, not zero): run without --sim, --live or "
    "--malleable-only for every part"
)


CORES = 8  # CPUs a node: room for neighbours
SLICES = (
    Slice("METACENTRUM-2009-2.swf.gz", 10_000, 512, CORES),
    Slice("LCG-2005-1.swf.gz", 10_000, 384, CORES),
)


def load_slice(s: Slice) -> tuple[tuple[TraceJob, ...], ClusterModel]:
    path = s.path or trace_file(s.trace)
    workload = load_workload(path, Cleaning(procs=s.procs, first_jobs=s.jobs))
    jobs = tuple(
        dataclasses.replace(j, requested=max(j.requested, NO_REQUEST_LIMIT * j.run))
        if j.record.time_req <= 0
        else j
        for j in workload.jobs
    )
    return jobs, ClusterModel.for_procs(s.procs, s.cores)


def scheduler(weight: float = DISSONANCE_WEIGHT) -> Scheduler:
    """The simulator's EASY profile (the default profile's plugins, ``dissonance`` at
    ``weight``)."""
    config = profile_config("easy", dissonance_weight=weight)
    return Scheduler(build_profile(config, default_registry()))


def summarise(run: SimRun, model: InterferenceModel, cluster: ClusterModel) -> dict[str, Any]:
    done = [o for o in run.outcomes if not math.isnan(o.start)]
    if not done:
        return {"jobs_run": 0}
    submit = np.array([o.job.submit for o in done])
    start = np.array([o.start for o in done])
    end = np.array([o.end for o in done])
    solo = np.array([o.job.run for o in done])
    procs = np.array([o.job.procs for o in done])
    floor = np.maximum(solo, TAU_S)
    bsld = np.maximum(1.0, (end - submit) / floor)
    unslowed = np.maximum(1.0, (start + solo - submit) / floor)
    work = np.array([model.work_done.get(o.job.id, 0.0) for o in done])
    span = float(end.max() - submit.min())
    slowed = list(model.slowdown.values())
    return {
        "interference_bsld": float(np.mean(bsld - unslowed)),
        "mean_bsld": float(np.mean(bsld)),
        "mean_wait_s": float(np.mean(start - submit)),
        "mean_run_slowdown": float(np.mean(slowed)) if slowed else 1.0,
        "utilization_pct": 100.0 * float((procs * work).sum()) / (cluster.total_cpus * span),
        "killed": model.killed,
        "outcomes_learnt": model.outcomes,
        "jobs_run": len(done),
        "passes": run.passes,
        "wall_s": round(run.wall_s, 1),
    }


def matrix_error(model: InterferenceModel) -> dict[str, Any]:
    """How far the learned matrix ended from the truth (mean and worst absolute error of
    the cells, and those with at least 30 observations)."""
    learnt, counts = model.learner.matrix(), model.learner.observations()
    errors = [(abs(learnt[v][a] - TRUTH[v][a]), counts[v][a]) for v in CLASSES for a in CLASSES]
    seen = [e for e, n in errors if n >= 30]
    return {
        "mean_abs_error": float(np.mean([e for e, _ in errors])),
        "max_abs_error": float(max(e for e, _ in errors)),
        "cells_seen_30": len(seen),
        "mean_abs_error_seen_30": float(np.mean(seen)) if seen else None,
    }


def run_slice(s: Slice, seed: int = 1, weight: float = DISSONANCE_WEIGHT) -> dict[str, Any]:
    jobs, cluster = load_slice(s)
    nodes = cluster.build_nodes()
    calm = {v: dict.fromkeys(CLASSES, 1.0) for v in CLASSES}
    runs: dict[str, dict[str, Any]] = {}
    learnt: dict[str, Any] = {}
    for name in RUNS:
        truth: Mapping[str, Mapping[str, float]] = calm if name == "none" else TRUTH
        model = InterferenceModel(nodes, _MODES[name], seed, truth)
        run = Simulation(jobs, cluster, scheduler(weight), interference=model).run()
        runs[name] = summarise(run, model, cluster)
        if name == "plugin":
            learnt = matrix_error(model)
    lost = {k: runs[k]["interference_bsld"] for k in RUNS}
    gain = lost["oblivious"] - lost["oracle"]
    return {
        "trace": s.trace,
        "jobs": len(jobs),
        "procs": s.procs,
        "cores_per_node": s.cores,
        "nodes": cluster.nodes,
        "interference_bsld": lost,
        "utilization_pct": {k: runs[k]["utilization_pct"] for k in RUNS},
        "share_of_oracle_gain": (lost["oblivious"] - lost["plugin"]) / gain if gain > 0 else None,
        "learned_matrix": learnt,
        "runs": runs,
    }


def run_sim(
    slices: Sequence[Slice] = SLICES, seed: int = 1, weight: float = DISSONANCE_WEIGHT
) -> dict[str, Any]:
    traces = [run_slice(s, seed, weight) for s in slices]

    def mean(key: str, run: str) -> float:
        return float(np.mean([t[key][run] for t in traces]))

    lost = {k: mean("interference_bsld", k) for k in ("oblivious", "plugin", "oracle")}
    util = {k: mean("utilization_pct", k) for k in ("oblivious", "plugin", "oracle")}
    gain = lost["oblivious"] - lost["oracle"]
    share = (lost["oblivious"] - lost["plugin"]) / gain if gain > 0 else None
    return {
        "interference_bsld": lost,
        "utilization": util,
        "share_of_oracle_gain": share,
        "utilization_points_lost": util["oblivious"] - util["plugin"],
        "meets_target": share is not None
        and share >= TARGET_SHARE
        and abs(util["oblivious"] - util["plugin"]) <= UTIL_POINTS,
        "target_share": TARGET_SHARE,
        "malleable_mean_jct_s": None,
        "dissonance_weight": weight,
        "seed": seed,
        "traces": {t["trace"]: t for t in traces},
    }


def run_bench(
    sim: bool = True,
    slices: Sequence[Slice] = SLICES,
    seed: int = 1,
    pass_repeats: int = 21,
    weight: float = DISSONANCE_WEIGHT,
    malleable: Sequence[Slice] | None = None,
    live: bool = True,
) -> dict[str, Any]:
    """The JSON: the interference part (``sim``), the malleable part where ``malleable``
    slices are given (else ``sim.malleable_mean_jct_s`` is null), the pass cost."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"benchmark": "harmonic-dissonance"}
    if sim:
        out["sim"] = run_sim(slices, seed, weight)
    if malleable:
        part = out.setdefault("sim", {"malleable_mean_jct_s": None})
        part["malleable_mean_jct_s"] = run_malleable(malleable, seed=seed)
    out["live"] = None
    if live:
        from hal.bench.dissonance_live import run_live

        out["live"] = run_live()
    missing = [
        name
        for name, value in (
            ("live.service_p99_ms", out["live"]),
            ("sim.malleable_mean_jct_s", out.get("sim", {}).get("malleable_mean_jct_s")),
        )
        if value is None
    ]
    out["not_measured"] = NOT_MEASURED.format(", ".join(missing)) if missing else ""
    if pass_repeats > 0:
        from hal.bench.dissonance_pass import run_dissonance_pass_bench

        cost = run_dissonance_pass_bench(repeats=pass_repeats)
        out["pass_overhead_pct"] = cost["overhead_pct"]
        out["pass"] = cost
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def _slices(text: str) -> list[Slice]:
    """``TRACE:JOBS:PROCS[:CORES]``, comma-separated (8 cores a node where none given)."""
    try:
        return parse_slices(text, CORES, "METACENTRUM-2009-2.swf.gz:10000:384:8")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_commands(bsub: Any) -> None:
    p = bsub.add_parser(
        "harmonic-dissonance",
        help="keeping work that clashes apart: simulated on traces, live, the pass's cost",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument("--sim", action="store_true", help="the simulator part only")
    only.add_argument(
        "--live",
        action="store_true",
        help="the live part only: a service beside batch work on a real local cluster (~3 min)",
    )
    p.add_argument(
        "--slices",
        type=_slices,
        default=list(SLICES),
        help="TRACE:JOBS:PROCS[:CORES],... (default: METACENTRUM and LCG, 10,000 jobs each)",
    )
    p.add_argument("--seed", type=int, default=1, help="the classes' draw")
    p.add_argument("--weight", type=float, default=DISSONANCE_WEIGHT, help="the plugin's weight")
    p.add_argument(
        "--pass-repeats", type=int, default=21, help="sched-pass repeats for the cost (0: skip)"
    )
    p.add_argument(
        "--malleable-slices",
        type=_malleable_slices,
        default=list(MALLEABLE_SLICES),
        help="TRACE:JOBS:PROCS[:CORES],... for the malleable jobs (default: SDSC-SP2 and "
        "CTC-SP2, 3,000 jobs each, one CPU a node)",
    )
    only.add_argument("--malleable-only", action="store_true", help="the malleable jobs' part only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _malleable_slices(text: str) -> list[Slice]:
    try:
        return parse_malleable_slices(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def _cmd(ns: argparse.Namespace) -> int:
    repeats = 0 if ns.sim or ns.live or ns.malleable_only else ns.pass_repeats
    result = run_bench(
        not (ns.live or ns.malleable_only),
        ns.slices,
        ns.seed,
        repeats,
        ns.weight,
        None if ns.live else ns.malleable_slices,
        live=not (ns.sim or ns.malleable_only),
    )
    return emit(result, ns.json)
