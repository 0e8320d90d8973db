"""The pass's shortcuts decide exactly what the plain cycle decides.

Three of them: array elements of one group take the group's PreFilter verdict instead of
a cycle each (``element_group``); ``noderesources`` redoes only the rows a placement
changed on large tables (``NodeTable.changed_rows``); the cyclic garbage collector is
paused during the pass. Two results are kept instead of made again: the partition
Filter's per partition and pass, and noderesources' no-GPU bonus per table. Each is
switched off here and the whole pass compared: every placement, verdict (message
included), update and reservation must be the same.
"""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from hal.bench.sched_pass import build_workload
from hal.core.job import Job
from hal.core.priority import Account, PriorityPolicy, Qos
from hal.core.states import PendingReason
from hal.scheduler.framework import PassResult, Scheduler
from hal.scheduler.framework import main_loop as main_loop_module
from hal.scheduler.framework import node_table as node_table_module
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.interfaces import MAX_NODE_SCORE, FilterResult
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.scheduler.plugins.noderesources import NodeResourcesFit
from hal.scheduler.plugins.partition import PartitionLimits
from hal.testing import cluster, make_job


def conservative() -> Scheduler:
    prof = default_profile()
    prof["plugin_args"]["backfill"] = {"mode": "conservative"}  # type: ignore[index]
    return build_scheduler(prof)


def with_limits() -> Scheduler:
    """Account limits: a placement changes what PreFilter says about the user's other
    jobs, array elements included (a kept verdict must not outlive it)."""
    accounts = tuple(
        Account(f"acct{i:02d}", max_jobs=2 if i % 2 else None, grp_jobs=6 if i % 3 else None)
        for i in range(20)
    )
    policy = PriorityPolicy(accounts=accounts, qos=(Qos("normal", max_jobs_per_user=4),))
    return build_scheduler(default_profile(limits=True), default_registry(policy=policy))


def decisions(result: PassResult) -> dict[str, Any]:
    plan = result.plan
    return {
        "placements": [(p.job_id, p.allocation) for p in plan.placements],
        "updates": list(plan.updates),
        "terminations": list(plan.terminations),
        "statuses": dict(result.statuses),
        "rejections": dict(result.rejections),
        "reservations": dict(result.reservations),
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("explain", [True, False])
def test_array_elements_get_the_verdict_a_cycle_each_would_give(
    seed: int, explain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the synthetic queue is array elements (some throttled, some held, some behind
    a blocked partition): grouping them changes no placement and no reason."""
    workload = build_workload(1500, 120, seed)
    for sched in (build_scheduler(), conservative(), with_limits()):
        grouped = decisions(sched.run_pass(workload.snapshot(), explain=explain))
        monkeypatch.setattr(main_loop_module, "element_group", lambda job: None)
        alone = decisions(sched.run_pass(workload.snapshot(), explain=explain))
        monkeypatch.undo()
        assert grouped == alone


def test_a_placement_between_two_elements_makes_the_group_ask_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Elements 10 and 12 of one array (one spec) wait in the full partition ``a``; job
    11 of the same user, equal priority, starts in ``b`` and uses up the user's QoS
    limit of one running job. Element 12's own reason is then that limit, not the
    Priority that element 10's verdict (passed PreFilter) would give it."""
    policy = PriorityPolicy(qos=(Qos("normal", max_jobs_per_user=1),))
    sched = build_scheduler(default_profile(limits=True), default_registry(policy=policy))
    first = make_job(10).partition("a").priority(5).submitted(1.0).array(10, 0).build()
    other = make_job(11).partition("b").priority(5).submitted(1.0).build()
    last = replace(first, id=12, array_task_id=2)  # the same spec object
    snap = (
        cluster()
        .uniform_nodes(2, cpus=1)
        .partition("a", "n0001")
        .partition("b", "n0002")
        .running(make_job(1).user("bob").partition("a").running_on("n0001"))
        .pending(first, other, last)
        .build()
    )
    result = sched.run_pass(snap)
    assert [p.job_id for p in result.plan.placements] == [11]
    assert result.statuses[12].reason is PendingReason.QOS_MAX_JOBS_PER_USER
    monkeypatch.setattr(main_loop_module, "element_group", lambda job: None)
    assert decisions(sched.run_pass(snap)) == decisions(result)


def test_kept_masks_and_scores_equal_a_full_recompute(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 5,000 nodes Filter and Score redo only the rows each placement changed; with
    change tracking off they recompute every row: the same plan, bit for bit."""
    workload = build_workload(3000, 5000, 4)
    sched = build_scheduler()
    kept = decisions(sched.run_pass(workload.snapshot()))
    assert kept["placements"]
    monkeypatch.setattr(node_table_module, "_TRACKED_FROM", 1 << 30)
    full = decisions(sched.run_pass(workload.snapshot()))
    assert kept == full


def test_kept_partition_results_and_gpu_bonus_equal_fresh_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The partition Filter result kept per pass, and the no-GPU bonus kept per table,
    against a new result every call and ``np.where`` every Score call (as before they
    were kept): the same plan, bit for bit, on a small table and a tracked one."""
    small, large = build_workload(1500, 120, 5), build_workload(3000, 5000, 6)
    # batch on every node: its jobs without GPUs then choose between GPU nodes and others
    every = tuple(n.name for n in small.nodes)
    parts = tuple(replace(p, nodes=every) if p.name == "batch" else p for p in small.partitions)
    snapshots = [replace(small.snapshot(), partitions=parts), large.snapshot()]

    def passes() -> list[dict[str, Any]]:
        # schedulers built here: the framework looks the plugins' methods up when built
        runs = [(snapshots[0], build_scheduler()), (snapshots[0], conservative())]
        runs.append((snapshots[1], build_scheduler()))
        return [decisions(sched.run_pass(snap)) for snap, sched in runs]

    kept = passes()

    def fresh_result(
        self: object, ctx: PassContext, state: object, job: Job, request: object
    ) -> FilterResult:
        mask = ctx.nodes.partition_mask(job.partition)
        return FilterResult(mask, message=f"not in partition {job.partition}")

    def where_bonus(self: object, t: NodeTable, request: NodeRequest, score: Any, rows: Any) -> Any:
        if request.gpus == 0 and t.any_gpus:
            half = score * 0.5
            has_gpus = t.has_gpus if rows is None else t.has_gpus[rows]
            score = np.where(has_gpus, half, half + MAX_NODE_SCORE / 2)
        return score

    monkeypatch.setattr(PartitionLimits, "filter", fresh_result)
    monkeypatch.setattr(NodeResourcesFit, "_gpu_part", where_bonus)
    assert passes() == kept


@pytest.mark.parametrize("enabled", [True, False])
def test_the_pass_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    """Paused during the pass, then back on; left off when the caller had it off."""
    workload = build_workload(50, 20, 1)
    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        build_scheduler().run_pass(workload.snapshot())
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
