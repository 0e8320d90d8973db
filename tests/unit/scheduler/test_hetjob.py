"""Heterogeneous jobs in the pass: all components start together or none does."""

from __future__ import annotations

from hal.core.states import PendingReason
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.framework.status import Status
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.testing import JobBuilder, cluster, make_job, placed_nodes

NOW = 1000.0


def with_backfill(**args: object) -> Scheduler:
    prof = default_profile(backfill=False)
    plugins = prof["plugins"]
    assert isinstance(plugins, list)
    plugins.append("backfill")
    plugin_args = prof["plugin_args"]
    assert isinstance(plugin_args, dict)
    plugin_args["backfill"] = {"resolution_s": 1, **args}
    return build_scheduler(prof)


def test_all_components_start_together_on_different_nodes(sched: Scheduler) -> None:
    """A 1-node 8-CPU component and a 2-node 4-CPU one on three 8-CPU nodes: all
    three nodes are used, no node is given twice beyond its CPUs."""
    snap = (
        cluster(NOW)
        .uniform_nodes(3, cpus=8)
        .pending(
            make_job(10).het(10, 0, 2).cpus(8),
            make_job(11).het(10, 1, 2).tasks(2, per_node=1).nodes(2).cpus(4),
        )
        .build()
    )
    plan = sched.schedule(snap)
    placed = placed_nodes(plan)
    assert set(placed) == {10, 11}
    assert len(placed[11]) == 2
    assert not set(placed[10]) & set(placed[11])  # component 0 filled its node


def test_none_starts_when_one_component_does_not_fit(sched: Scheduler) -> None:
    """Component 1 asks for 3 nodes on a 2-node cluster that component 0 fits on: the
    pass starts neither, and a later small job still gets the nodes."""
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=4)
        .pending(
            make_job(10).het(10, 0, 2).cpus(1).priority(100),
            make_job(11).het(10, 1, 2).nodes(3).priority(100),
            make_job(12).cpus(4).priority(1),
        )
        .build()
    )
    result = sched.run_pass(snap)
    placed = placed_nodes(result.plan)
    assert 10 not in placed and 11 not in placed
    assert 12 in placed  # component 0's trial allocation was given back
    blocker = result.statuses[11]
    other = result.statuses[10]
    assert blocker.code.name in ("UNSCHEDULABLE", "UNRESOLVABLE")
    assert "10+1" in other.message  # component 0 names the component that blocks


def test_component_blocked_by_busy_nodes_waits_with_resources(sched: Scheduler) -> None:
    """Both nodes busy for component 1's constraint: component 0 would fit on the
    free node but waits; both show Resources."""
    snap = (
        cluster(NOW)
        .uniform_nodes(3, cpus=2)
        .running(make_job(1).cpus(2).limit(100).running_on("n0002", start=NOW - 10))
        .running(make_job(2).cpus(2).limit(100).running_on("n0003", start=NOW - 10))
        .pending(
            make_job(10).het(10, 0, 2).cpus(2),
            make_job(11).het(10, 1, 2).cpus(2),
        )
        .build()
    )
    result = sched.run_pass(snap)
    assert placed_nodes(result.plan) == {}
    reasons = {u.job_id: u.reason for u in result.plan.updates}
    assert reasons == {10: PendingReason.RESOURCES, 11: PendingReason.RESOURCES}


def test_missing_component_keeps_the_rest_pending(sched: Scheduler) -> None:
    """Component 1 was cancelled on its own: component 0 can never start with it."""
    snap = cluster(NOW).uniform_nodes(2).pending(make_job(10).het(10, 0, 2)).build()
    result = sched.run_pass(snap)
    assert placed_nodes(result.plan) == {}
    assert "not pending" in result.statuses[10].message


def _half_busy(*pending: JobBuilder) -> ClusterSnapshot:
    """Four single-CPU nodes, two busy until 1090."""
    return (
        cluster(NOW)
        .uniform_nodes(4, cpus=1)
        .running(
            make_job(1).limit(100).running_on("n0001", start=NOW - 10),
            make_job(2).limit(100).running_on("n0002", start=NOW - 10),
        )
        .pending(*pending)
        .build()
    )


def test_backfill_reserves_all_components_at_one_start() -> None:
    """A 1-node and a 3-node component need all four nodes: both are planned for 1090,
    the moment the running jobs end, not component 0 alone now."""
    snap = _half_busy(
        make_job(10).het(10, 0, 2).limit(100),
        make_job(11).het(10, 1, 2).nodes(3).limit(100),
    )
    result = with_backfill(mode="conservative").run_pass(snap)
    assert placed_nodes(result.plan) == {}
    starts = {u.job_id: u.expected_start for u in result.plan.updates}
    assert starts == {10: 1090, 11: 1090}
    assert set(result.reservations) == {10, 11}


def test_backfill_starts_a_short_het_job_in_the_hole() -> None:
    """A 4-node head waits for 1090; a 50 s het job of two 1-node components fits in
    the two free nodes before that and starts whole."""
    snap = _half_busy(
        make_job(5).nodes(4).limit(100).priority(100),
        make_job(10).het(10, 0, 2).limit(50),
        make_job(11).het(10, 1, 2).limit(50),
    )
    result = with_backfill(mode="easy").run_pass(snap)
    placed = placed_nodes(result.plan)
    assert set(placed) == {10, 11}
    assert {*placed[10], *placed[11]} == {"n0003", "n0004"}


def test_will_run_gives_one_start_for_all_components(sched: Scheduler) -> None:
    """sbatch --test-only of a het job: the earliest instant all components fit
    together, on distinct nodes; a component that can never fit says why."""
    snap = _half_busy()
    fits = sched.will_run_group(
        snap, [make_job(10).het(10, 0, 2).build(), make_job(11).het(10, 1, 2).nodes(3).build()]
    )
    assert isinstance(fits, list)
    assert [r.start_time for r in fits] == [1090, 1090]
    assert not set(fits[0].nodes) & set(fits[1].nodes)
    never = sched.will_run_group(
        snap, [make_job(10).het(10, 0, 2).build(), make_job(11).het(10, 1, 2).nodes(5).build()]
    )
    assert isinstance(never, Status) and not never.is_success


def test_a_component_that_needs_the_node_an_earlier_one_took_is_placed_first(
    sched: Scheduler,
) -> None:
    """``-c1 : -w n0001 -c2`` on two free 2-CPU nodes: component 0 took n0001 and left
    component 1 nothing, so the job waited for ever on an idle cluster (found by a
    session's exploratory testing). Tried again with component 1 first, both start."""
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=2)
        .pending(
            make_job(10).het(10, 0, 2).cpus(1),
            make_job(11).het(10, 1, 2).cpus(2).nodelist("n0001"),
        )
        .build()
    )
    placed = placed_nodes(sched.schedule(snap))
    assert placed == {10: ("n0002",), 11: ("n0001",)}
    backfilled = placed_nodes(with_backfill(mode="easy").schedule(snap))
    assert backfilled == placed
    fits = sched.will_run_group(snap, [j for j in snap.pending])
    assert isinstance(fits, list) and [r.start_time for r in fits] == [NOW, NOW]


def test_a_blocked_component_is_named_whatever_order_was_tried(sched: Scheduler) -> None:
    """Component 1 can never fit (3 nodes of 2): the verdicts name it, not whichever
    component the retry placed first."""
    snap = (
        cluster(NOW)
        .uniform_nodes(2, cpus=2)
        .pending(
            make_job(10).het(10, 0, 3).cpus(1),
            make_job(11).het(10, 1, 3).cpus(2).nodelist("n0001"),
            make_job(12).het(10, 2, 3).nodes(3),
        )
        .build()
    )
    result = sched.run_pass(snap)
    assert placed_nodes(result.plan) == {}
    assert result.statuses[12].code.name in ("UNSCHEDULABLE", "UNRESOLVABLE")
    assert "10+2" in result.statuses[10].message and "10+2" in result.statuses[11].message
