"""Malleable jobs in the simulator (``hal.sim.malleable``) on a slice of a real trace:
at fixed allocations they run exactly as the trace says; started within their range
they run at another size and for another time; with the feedback loop the server's
controller resizes them, every job still runs to its end, and each run of a malleable
job stays within its declared range. ``hal bench harmonic-dissonance`` carries the
figures under ``sim.malleable_mean_jct_s``."""

from __future__ import annotations

import json
import math

import pytest

from hal.bench.harmonic_dissonance import run_bench
from hal.bench.malleable import parse_slices
from hal.bench.slices import Slice
from hal.scheduler.framework.profile import build_profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import default_registry
from hal.sim.cluster import ClusterModel
from hal.sim.malleable import MalleableModel, MalleableSimulation, pick_malleable
from hal.sim.policies import profile_config
from hal.sim.workload import Cleaning, load_workload
from hal.testing.traces import trace_path

KTH = "KTH-SP2-1996-2.swf.gz"
TINY = Slice(KTH, 400, 100, 1, trace_path(KTH))


def replay(mode: str) -> tuple[MalleableModel, dict[int, tuple[float, float]]]:
    """One replay of the tiny slice: the model and (start, end) of every job."""
    workload = load_workload(TINY.path or "", Cleaning(procs=100, first_jobs=400))
    cluster = ClusterModel.for_procs(100, 1)
    model = MalleableModel(pick_malleable(workload.jobs, cluster, 0.5), mode)
    scheduler = Scheduler(build_profile(profile_config("easy"), default_registry()))
    run = MalleableSimulation(workload.jobs, cluster, scheduler, model).run()
    return model, {o.job.id: (o.start, o.end) for o in run.outcomes}


def test_fixed_allocations_run_as_the_trace_and_the_loop_resizes_within_ranges() -> None:
    static, fixed = replay("static")
    assert static.jobs and static.resizes == 0
    workload = load_workload(TINY.path or "", Cleaning(procs=100, first_jobs=400))
    runs = {j.id: j.run for j in workload.jobs}
    for jid in static.jobs:
        start, end = fixed[jid]
        assert end - start == pytest.approx(runs[jid])
    loop, resized = replay("feedback")
    assert loop.resizes > 0
    for jid, sizes in loop.sizes.items():
        m = loop.jobs[jid]
        assert all(m.low <= n <= m.high for n in sizes), (jid, sizes, m)
    assert sum(len(s) for s in loop.sizes.values()) == len(loop.sizes) + loop.resizes
    assert all(not math.isnan(end) for _, end in resized.values())
    moved = [j for j in loop.jobs if resized[j] != fixed[j]]
    assert moved  # the malleable jobs ran otherwise than at their fixed size


@pytest.mark.slow  # three minutes of simulation: CI runs it
def test_the_bench_json_carries_the_malleable_figures() -> None:
    result = run_bench(False, (), seed=1, pass_repeats=0, malleable=[TINY])
    json.dumps(result)
    part = result["sim"]["malleable_mean_jct_s"]
    assert part["static"] > 0 and part["feedback"] > 0
    assert part["reduction"] == pytest.approx(1 - part["feedback"] / part["static"])
    trace = part["traces"][KTH]
    assert trace["malleable"] > 0 and trace["resizes"] > 0
    assert parse_slices("A.swf.gz:100:64") == [Slice("A.swf.gz", 100, 64, 1)]
    with pytest.raises(ValueError, match="TRACE:JOBS:PROCS"):
        parse_slices("A:x:1")
