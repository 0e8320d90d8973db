"""The malleable part of ``hal bench harmonic-dissonance``: mean completion time of
malleable training-like jobs with the feedback loop against fixed allocations.

Each slice of a real trace is replayed three times with the real scheduler (EASY, the
default profile) on nodes of ``cores`` CPUs (``hal.sim.malleable``): a seeded share of
its long jobs are malleable with an Amdahl goodput curve of their own; ``static`` runs
them at the node count the trace gave them, ``moldable`` starts them at what the
scheduler can give within their range and keeps it, ``feedback`` adds the controller
of ``hal.core.malleable`` (the server's). ``mean_jct_s`` is over the malleable jobs,
``all_mean_jct_s`` over every job (the rigid ones wait behind or beside them);
``reduction`` is ``1 - feedback / static`` of the malleable jobs' mean (goal: 0.3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hal.bench.slices import Slice
from hal.bench.slices import parse_slices as parse_trace_slices
from hal.scheduler.framework.profile import build_profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import default_registry
from hal.sim.cluster import ClusterModel
from hal.sim.malleable import (
    MODES,
    MalleableModel,
    MalleableSimulation,
    mean_jct,
    pick_malleable,
)
from hal.sim.policies import profile_config
from hal.sim.traces import trace_file
from hal.sim.workload import Cleaning, load_workload

SHARE = 0.3  # of the long jobs, malleable
TARGET = 0.3  # the mean completion time 30 % lower


CORES = 1  # one CPU a node, as the traces count them
SLICES = (
    Slice("SDSC-SP2-1998-4.2-cln.swf.gz", 3000, 128, CORES),
    Slice("CTC-SP2-1996-3.1-cln.swf.gz", 3000, 430, CORES),
)


def run_slice(s: Slice, share: float = SHARE, seed: int = 1) -> dict[str, Any]:
    workload = load_workload(
        s.path or trace_file(s.trace), Cleaning(procs=s.procs, first_jobs=s.jobs)
    )
    cluster = ClusterModel.for_procs(s.procs, s.cores)
    chosen = pick_malleable(workload.jobs, cluster, share, seed)
    ids = set(chosen)
    out: dict[str, Any] = {"trace": s.trace, "jobs": len(workload.jobs), "malleable": len(ids)}
    jct: dict[str, float] = {}
    every: dict[str, float] = {}
    resizes = 0
    for mode in MODES:
        model = MalleableModel(chosen, mode, seed=seed)
        scheduler = Scheduler(build_profile(profile_config("easy"), default_registry()))
        run = MalleableSimulation(workload.jobs, cluster, scheduler, model).run()
        jct[mode], every[mode] = mean_jct(run, ids), mean_jct(run)
        resizes += model.resizes
    out.update(
        mean_jct_s=jct,
        all_mean_jct_s=every,
        reduction=1.0 - jct["feedback"] / jct["static"],
        resizes=resizes,
    )
    return out


def run_malleable(
    slices: Sequence[Slice] = SLICES, share: float = SHARE, seed: int = 1
) -> dict[str, Any]:
    """``sim.malleable_mean_jct_s``: the means over the slices, and each slice's own."""
    traces = [run_slice(s, share, seed) for s in slices]
    mean = {m: float(np.mean([t["mean_jct_s"][m] for t in traces])) for m in MODES}
    reduction = 1.0 - mean["feedback"] / mean["static"]
    return {
        **mean,
        "reduction": reduction,
        "meets_target": reduction >= TARGET,
        "target_reduction": TARGET,
        "share_malleable": share,
        "traces": {t["trace"]: t for t in traces},
    }


def parse_slices(text: str) -> list[Slice]:
    """``TRACE:JOBS:PROCS[:CORES]``, comma-separated (one core a node where none given)."""
    return parse_trace_slices(text, CORES, "SDSC-SP2-1998-4.2-cln.swf.gz:3000:128")
