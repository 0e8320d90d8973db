"""``hal bench sched-pass`` runs end to end on a small cluster: JSON shape, jobs start,
no node is over-committed (no wall-time assertions: the figures live in
docs/benchmarks.md)."""

from __future__ import annotations

import json

from hal.bench.sched_limits import build_policy
from hal.bench.sched_pass import (
    CPUS,
    GPUS,
    build_workload,
    overcommitted_nodes,
    run_curve,
    run_sched_pass_bench,
    with_limits,
)
from hal.scheduler.plugins import build_scheduler


def test_small_pass_reports_shape_starts_jobs_and_overcommits_nothing() -> None:
    result = run_sched_pass_bench(jobs=600, nodes=80, repeats=2)
    json.dumps(result)  # serialisable as is
    for key in (
        "median_ms",
        "p90_ms",
        "table_build_ms",
        "jobs_started",
        "pass_peak_traced_mib",
        "maxrss_mib",
        "overcommitted_nodes",
        "waiting_reasons",
    ):
        assert key in result
    assert result["jobs"] == 600 and result["nodes"] == 80
    assert result["repeats"] == 2
    assert result["p90_ms"] >= result["median_ms"] >= result["min_ms"] > 0
    assert result["cpu_median_ms"] > 0
    assert result["jobs_started"] > 0
    assert result["overcommitted_nodes"] == 0
    assert result["running_jobs"] > 0


def test_workload_mix_and_overcommit_check() -> None:
    workload = build_workload(800, 60, seed=3)
    assert len(workload.pending) == 800
    assert workload.arrays > 0
    assert {j.partition for j in workload.pending} >= {"batch", "gpu"}
    assert any(j.spec.gpus_per_node for j in workload.pending)
    assert any(j.spec.nodes_min > 1 for j in workload.pending)
    result = build_scheduler().run_pass(workload.snapshot(), backfill=True)
    assert result.plan.placements
    assert overcommitted_nodes(workload, result) == []


def test_curve_reports_measured_and_skipped_cells() -> None:
    result = run_curve(repeats=1, skip=((200, 40),), jobs=(100, 200), nodes=(20, 40))
    cells = {(c["jobs"], c["nodes"]): c for c in result["cells"]}
    assert set(cells) == {(100, 20), (100, 40), (200, 20), (200, 40)}
    assert cells[(200, 40)]["skipped"] == "--skip"
    assert cells[(100, 20)]["overcommitted_nodes"] == 0
    # a first cell over the limit skips every cell at least as large in both dimensions
    slow = run_curve(repeats=1, max_cell_s=0.0, jobs=(100, 200), nodes=(20, 40))
    skipped = [c for c in slow["cells"] if "skipped" in c]
    assert len(skipped) == 3 and all("took" in c["skipped"] for c in skipped)


def test_the_bench_runs_the_limits_plugin_and_no_limit_is_exceeded() -> None:
    """By default the workload is charged to accounts and QoS with limits (issue 3's
    "realistic mix"): some jobs wait for a limit, and no job the pass starts takes an
    account or QoS over a GrpTRES cpu cap of sched_limits' policy (the running jobs it
    starts from may already be over one)."""
    workload, scheduler = with_limits(build_workload(3000, 120, seed=2))
    result = scheduler.run_pass(workload.snapshot(), backfill=True)
    reasons = {str(reason) for (_, reason) in result.rejections}
    assert reasons & {"QOSGrpCpuLimit", "AssocGrpCpuLimit", "QOSMaxJobsPerUserLimit"}
    policy = build_policy(120, CPUS, GPUS)
    caps = {a.name: a.grp_tres.cpus for a in policy.accounts if a.grp_tres.cpus}
    caps |= {q.name: q.grp_tres.cpus for q in policy.qos if q.grp_tres.cpus}
    pending = {j.id: j for j in workload.pending}
    placed = [(p.allocation, pending[p.job_id]) for p in result.plan.placements]
    used: dict[str, int] = {}
    started: set[str] = set()
    for allocation, job in [(j.allocation, j) for j in workload.running] + placed:
        assert allocation is not None
        project = job.spec.account or ""
        for key in (project, f"org{int(project[4:]) % 2}", job.spec.qos or ""):
            used[key] = used.get(key, 0) + allocation.total().cpus
            if job.id in pending:
                started.add(key)
    assert placed and caps.keys() & started
    assert all(used[k] <= caps[k] for k in caps.keys() & started)
    plain = run_sched_pass_bench(jobs=600, nodes=80, repeats=1, limits=False)
    assert plain["profile"] == "default (main + backfill EASY)"
    assert not any("Limit" in r for r in plain["waiting_reasons"])


def test_charged_array_elements_keep_sharing_one_spec() -> None:
    """The pass decides an array's elements once per spec object (as Slurm keeps one
    record): charging the workload to accounts must not give each element a copy."""
    workload = build_workload(2000, 40, seed=4)
    limited, _ = with_limits(workload)
    by_array: dict[int, set[int]] = {}
    for job in limited.pending:
        if job.array_job_id is not None:
            by_array.setdefault(job.array_job_id, set()).add(id(job.spec))
    assert by_array and all(len(ids) == 1 for ids in by_array.values())
    assert all(j.spec.account and j.spec.qos for j in limited.pending + limited.running)
