"""The pass: priority order, Resources blocking only its own partition, Priority for the
jobs behind, reasons only when changed, determinism, and a crashing plugin failing only
its job."""

from __future__ import annotations

from hal.core.states import PendingReason as R
from hal.scheduler.framework import Code, Scheduler
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.plugins.noderesources import NodeResourcesFit
from hal.scheduler.plugins.priority import PrioritySort
from hal.testing import (
    CrashingFilter,
    CrashingPreFilter,
    CrashingReserve,
    CrashingScore,
    RecordingReserve,
    RejectingPermit,
    cluster,
    make_job,
    make_node,
    placed_nodes,
    reasons,
    scheduler_with,
)

J = make_job


def test_higher_priority_goes_first(sched: Scheduler) -> None:
    """One free slot, three jobs: the highest priority takes it, whatever the order."""
    snap = (
        cluster()
        .nodes(make_node("a").cpus(1))
        .pending(J(1).priority(1), J(2).priority(9), J(3).priority(5))
        .build()
    )
    plan = sched.schedule(snap)
    assert set(placed_nodes(plan)) == {2}
    assert reasons(plan) == {3: R.RESOURCES, 1: R.PRIORITY}


def test_equal_priority_goes_by_submit_time_then_id(sched: Scheduler) -> None:
    """Same priority: earlier submission first; same time: lower id first."""
    snap = (
        cluster()
        .nodes(make_node("a").cpus(1))
        .pending(J(3).submitted(5.0), J(2).submitted(1.0), J(1).submitted(1.0))
        .build()
    )
    assert set(placed_nodes(sched.schedule(snap))) == {1}


def test_blocked_job_holds_back_its_partition_only() -> None:
    """A big job waiting for Resources in 'big' blocks smaller jobs in 'big' (Priority)
    but not jobs in 'small', even on shared nodes (the main pass alone: without backfill,
    which would start job 2 in the hole, see test_backfill.py)."""
    sched = build_scheduler(default_profile(backfill=False))
    snap = (
        cluster()
        .nodes(make_node("a").cpus(4), make_node("b").cpus(4))
        .partition("big", "a", "b")
        .partition("small", "a", "b")
        .running(J(9).cpus(2).running_on("a"))
        .pending(
            J(1).partition("big").cpus(4).nodes(2).priority(10),
            J(2).partition("big").priority(5),
            J(3).partition("small").priority(1),
        )
        .build()
    )
    plan = sched.schedule(snap)
    assert set(placed_nodes(plan)) == {3}
    assert reasons(plan) == {1: R.RESOURCES, 2: R.PRIORITY}


def test_unresolvable_job_does_not_block(sched: Scheduler) -> None:
    """A job that can never fit (BadConstraints) does not hold back the jobs behind it."""
    snap = cluster().nodes(make_node("a")).pending(J(1).cpus(99).priority(9), J(2)).build()
    plan = sched.schedule(snap)
    assert set(placed_nodes(plan)) == {2}
    assert reasons(plan) == {1: R.BAD_CONSTRAINTS}


def test_req_node_not_avail_does_not_block(sched: Scheduler) -> None:
    """A job waiting for its DOWN --nodelist node lets the next job start."""
    snap = (
        cluster()
        .nodes(make_node("a").down(), make_node("b"))
        .pending(J(1).nodelist("a").priority(9), J(2))
        .build()
    )
    plan = sched.schedule(snap)
    assert set(placed_nodes(plan)) == {2}
    assert reasons(plan) == {1: R.REQ_NODE_NOT_AVAIL}


def test_updates_only_for_changed_reasons(sched: Scheduler) -> None:
    """A job already marked Resources gets no update; one marked WaitingForScheduling does."""
    snap = (
        cluster()
        .nodes(make_node("a").cpus(1))
        .running(J(9).running_on("a"))
        .pending(J(1).reason(R.RESOURCES).priority(2), J(2).priority(1))
        .build()
    )
    plan = sched.schedule(snap)
    assert reasons(plan) == {2: R.PRIORITY}
    assert sched.run_pass(snap).statuses[1].reason is R.RESOURCES


def test_same_snapshot_same_plan(sched: Scheduler) -> None:
    """Determinism: two passes over one snapshot give identical plans."""
    snap = (
        cluster()
        .uniform_nodes(5, cpus=4)
        .pending(*[J(i).cpus(1 + i % 3).priority(i % 4) for i in range(1, 30)])
        .build()
    )
    assert sched.schedule(snap) == sched.schedule(snap)
    assert build_scheduler().schedule(snap) == sched.schedule(snap)


def test_plan_is_stamped_with_the_revision(sched: Scheduler) -> None:
    """The plan carries the snapshot revision the applier re-checks against."""
    snap = cluster().revision(42).nodes(make_node("a")).pending(J(1)).build()
    assert sched.schedule(snap).revision == 42


def _profile_with(*extra: object) -> Scheduler:
    return scheduler_with(PrioritySort(), *extra, NodeResourcesFit())  # type: ignore[arg-type]


def test_crashing_prefilter_fails_only_its_job() -> None:
    """A plugin that raises on job 1 gives job 1 an ERROR; job 2 is placed as usual."""
    sched = _profile_with(CrashingPreFilter("boom", {1}))
    snap = cluster().nodes(make_node("a")).pending(J(1).priority(9), J(2)).build()
    result = sched.run_pass(snap)
    assert set(placed_nodes(result.plan)) == {2}
    assert result.statuses[1].code is Code.ERROR
    assert result.statuses[1].plugin == "boom"
    assert "crashed on job 1" in result.statuses[1].message
    assert result.plan.updates == ()  # no made-up reason for the crashed job


def test_crashing_filter_and_score_fail_only_their_job() -> None:
    """Crashes at Filter and at Score are contained the same way."""
    for plugin in (CrashingFilter("f", {1}), CrashingScore("s", {1})):
        sched = _profile_with(plugin)
        snap = cluster().nodes(make_node("a"), make_node("b")).pending(J(1), J(2)).build()
        result = sched.run_pass(snap)
        assert set(placed_nodes(result.plan)) == {2}, plugin.name
        assert result.statuses[1].code is Code.ERROR
        assert result.statuses[1].plugin == plugin.name


def test_crash_in_reserve_unreserves_the_others() -> None:
    """Reserve raising after another plugin reserved: that one is unreserved and the
    node stays free for the next job."""
    recorder = RecordingReserve()
    crasher = CrashingReserve("crash", {1})
    sched = _profile_with(recorder, crasher)
    snap = cluster().nodes(make_node("a").cpus(1)).pending(J(1).priority(9), J(2)).build()
    result = sched.run_pass(snap)
    assert recorder.calls == [("reserve", 1), ("unreserve", 1), ("reserve", 2)]
    assert set(placed_nodes(result.plan)) == {2}


def test_permit_rejection_unreserves_and_frees_the_node() -> None:
    """Permit refusing job 1 undoes its Reserve; job 2 gets the only CPU."""
    recorder = RecordingReserve()
    sched = _profile_with(recorder, RejectingPermit("gate", {1}))
    snap = cluster().nodes(make_node("a").cpus(1)).pending(J(1).priority(9), J(2)).build()
    plan = sched.schedule(snap)
    assert set(placed_nodes(plan)) == {2}
    assert recorder.calls == [("reserve", 1), ("unreserve", 1), ("reserve", 2)]


def test_rejections_are_counted_per_plugin_and_reason(sched: Scheduler) -> None:
    """Explainability: the pass counts why jobs wait, per plugin and reason."""
    snap = (
        cluster()
        .nodes(make_node("a").cpus(1))
        .pending(J(1).hold(), J(2).hold(), J(3).cpus(2))
        .build()
    )
    counts = sched.run_pass(snap).rejections
    assert counts[("hold", R.JOB_HELD_USER)] == 2
    assert counts[("noderesources", R.BAD_CONSTRAINTS)] == 1


def test_identical_unfit_jobs_share_one_verdict(sched: Scheduler) -> None:
    """1,000 elements of an array that can never fit all get BadConstraints (the fit is
    computed once per placement key, not per element)."""
    elements = [J(1000 + i).array(1000, i).cpus(99) for i in range(1000)]
    plan = sched.schedule(cluster().nodes(make_node("a")).pending(*elements).build())
    assert set(reasons(plan).values()) == {R.BAD_CONSTRAINTS}
    assert len(plan.updates) == 1000
