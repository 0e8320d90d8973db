"""Backfill plans licenses over time (Slurm's bf_licenses), on hand-made snapshots: four
single-CPU nodes, job 1 running on one of them since 990 for 100 s (planned end 1090)
holding some matlab licenses; bf_resolution 1 s, so planned times are exact."""

from __future__ import annotations

import math

from hal.core.job import Job
from hal.core.states import PendingReason
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.counted import CountsOverTime
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.keys import COUNTS_OVER_TIME, PLAN_END, PLAN_START
from hal.scheduler.framework.status import Status
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.scheduler.plugins import licenses as licenses_plugin
from hal.testing import JobBuilder, cluster, expected_starts, make_job, placed_nodes

NOW = 1000.0


def _scheduler(mode: str, **total: int) -> Scheduler:
    prof = default_profile(licenses=True, backfill=False)
    plugins = prof["plugins"]
    assert isinstance(plugins, list)
    plugins.append("backfill")
    plugin_args = prof["plugin_args"]
    assert isinstance(plugin_args, dict)
    plugin_args["backfill"] = {"resolution_s": 1, "mode": mode}
    return build_scheduler(prof, default_registry(licenses=total))


def _snapshot(held: int, *pending: JobBuilder):  # type: ignore[no-untyped-def]
    """Job 1 holds ``held`` matlab licenses until 1090."""
    return (
        cluster(NOW)
        .uniform_nodes(4, cpus=1)
        .running(make_job(1).licenses(matlab=held).limit(100).running_on("n0001", start=990))
        .pending(*pending)
        .build()
    )


def test_a_head_waiting_for_licenses_is_not_overtaken() -> None:
    """4 matlab, job 1 holds 3 until 1090. Head 10 wants all 4: it is planned for 1090,
    when job 1's come back. Job 11 (1 license until 1200) would still hold one then, so
    it waits; job 12 (1 license until 1050) gives it back in time and starts now."""
    snap = _snapshot(
        3,
        make_job(10).licenses(matlab=4).limit(100),
        make_job(11).licenses(matlab=1).limit(200),
        make_job(12).licenses(matlab=1).limit(50),
    )
    result = _scheduler("easy", matlab=4).run_pass(snap)
    assert set(placed_nodes(result.plan)) == {12}
    updates = {u.job_id: u for u in result.plan.updates}
    assert updates[10].expected_start == 1090  # job 1's planned end
    assert updates[10].reason is PendingReason.LICENSES
    assert updates[11].reason is PendingReason.LICENSES
    assert result.reservations[10][:2] == (1090, 1190)


def test_spare_licenses_are_still_backfilled() -> None:
    """6 matlab: at 1090 the head takes 4 of them and job 11's one still fits beside it,
    so job 11 starts now though it runs past 1090."""
    snap = _snapshot(
        3,
        make_job(10).licenses(matlab=4).limit(100),
        make_job(11).licenses(matlab=1).limit(200),
    )
    result = _scheduler("easy", matlab=6).run_pass(snap)
    assert set(placed_nodes(result.plan)) == {11}
    assert {u.job_id: u.expected_start for u in result.plan.updates} == {10: 1090}


def test_jobs_without_licenses_start_beside_the_waiting_head() -> None:
    """The head waits for licenses only: a job asking none starts in the main pass (the
    head does not hold its partition back), and the head keeps its start."""
    snap = _snapshot(3, make_job(10).licenses(matlab=4).limit(100), make_job(11).limit(500))
    result = _scheduler("easy", matlab=4).run_pass(snap)
    assert set(placed_nodes(result.plan)) == {11}
    assert {u.job_id: u.expected_start for u in result.plan.updates} == {10: 1090}


def test_conservative_keeps_every_reservation_licenses() -> None:
    """5 matlab, job 1 holds 4 until 1090. Job 10 (3) and job 11 (2) both fit from 1090.
    Job 12 (1 license until 1200) would leave job 11 short at 1090: conservative keeps it
    waiting (planned after job 10 ends), EASY reserves for the head only and starts it;
    job 11's start there is a forecast: once job 10 gives its licenses back."""
    pending = (
        make_job(10).licenses(matlab=3).limit(100),
        make_job(11).licenses(matlab=2).limit(100),
        make_job(12).licenses(matlab=1).limit(200),
    )
    conservative = _scheduler("conservative", matlab=5).run_pass(_snapshot(4, *pending))
    assert placed_nodes(conservative.plan) == {}
    starts = {u.job_id: u.expected_start for u in conservative.plan.updates}
    assert starts == {10: 1090, 11: 1090, 12: 1190}

    sched = _scheduler("easy", matlab=5)
    easy = sched.run_pass(_snapshot(4, *pending))
    assert set(placed_nodes(easy.plan)) == {12}
    assert expected_starts(sched, easy.plan) == {10: 1090, 11: 1190}


def test_conservative_backfills_a_job_done_before_the_licenses_are_needed() -> None:
    """As above, with job 12 asking 1 license for 50 s: back by 1050, it starts now."""
    snap = _snapshot(
        4,
        make_job(10).licenses(matlab=3).limit(100),
        make_job(11).licenses(matlab=2).limit(100),
        make_job(12).licenses(matlab=1).limit(50),
    )
    result = _scheduler("conservative", matlab=5).run_pass(snap)
    assert set(placed_nodes(result.plan)) == {12}
    starts = {u.job_id: u.expected_start for u in result.plan.updates}
    assert starts == {10: 1090, 11: 1090}


def test_licenses_held_past_the_horizon_give_no_reservation() -> None:
    """bf_window 50 s: job 1's licenses come back after the planning horizon, so the
    head gets no start time."""
    prof = default_profile(licenses=True, backfill=False)
    plugins = prof["plugins"]
    assert isinstance(plugins, list)
    plugins.append("backfill")
    plugin_args = prof["plugin_args"]
    assert isinstance(plugin_args, dict)
    plugin_args["backfill"] = {"resolution_s": 1, "window_s": 50}
    sched = build_scheduler(prof, default_registry(licenses={"matlab": 4}))
    result = sched.run_pass(_snapshot(3, make_job(10).licenses(matlab=4).limit(100)))
    assert result.reservations == {}
    assert {u.job_id: u.reason for u in result.plan.updates} == {10: PendingReason.LICENSES}


def test_counts_over_time_by_hand() -> None:
    """The framework's plan of a counted resource (licenses here). Uses: 3 until 1090, 2
    over [1090, 1190), 1 for ever from 1050."""
    p = CountsOverTime()
    p.hold((("matlab", 3),), 1000, 1090)
    p.hold((("matlab", 2),), 1090, 1190)
    p.hold((("matlab", 1),), 1050, math.inf)
    assert p.most_held("matlab", 1000, 1050) == 3
    assert p.most_held("matlab", 1000, 1051) == 4
    assert p.most_held("matlab", 1090, 1100) == 3
    assert p.most_held("matlab", 1190, 2000) == 1
    assert p.most_held("ansys", 0, math.inf) == 0
    totals = {"matlab": 4}
    assert p.earliest((("matlab", 1),), totals, 1000, 50) == 1000  # back by 1050
    assert p.earliest((("matlab", 1),), totals, 1000, 60) == 1090  # 4 held at 1050
    assert p.earliest((("matlab", 2),), totals, 1000, 10) == 1190
    assert p.earliest((("matlab", 4),), totals, 1000, 10) is None  # one held for ever
    assert p.instants() == [1090, 1190]


def test_the_plugin_judges_a_planned_run_and_says_from_when() -> None:
    """The licenses plugin while backfill tries a job: 4 matlab, 3 held until 1090 and 1
    for ever from 1150. Now, 2 are short (job 1 holds 3); planned from 1010, they are
    free from 1090 (the verdict says so); from 1090 they fit (1 + 2 of 4 at 1150); 4
    never fit again."""
    snap = _snapshot(3)
    ctx = PassContext.from_snapshot(snap)
    over_time = CountsOverTime()
    over_time.hold((("matlab", 3),), NOW, 1090)
    over_time.hold((("matlab", 1),), 1150, math.inf)
    ctx.data.write(COUNTS_OVER_TIME, {licenses_plugin.NAME: over_time})
    plugin = licenses_plugin.new({}, {"matlab": 4})
    two = make_job(10).licenses(matlab=2).limit(100).build()
    four = make_job(11).licenses(matlab=4).limit(100).build()

    def judge(job: Job, start: float | None, end: float) -> Status:
        if start is not None:
            ctx.data.write(PLAN_START, start)
        ctx.data.write(PLAN_END, end)
        try:
            return plugin.pre_filter(ctx, CycleState(), job)
        finally:
            ctx.data.delete(PLAN_END)
            if start is not None:
                ctx.data.delete(PLAN_START)

    now = judge(two, None, NOW + 50)  # short now: job 1 holds 3 of 4 (its own count)
    assert (now.reason, now.earliest_start) == (PendingReason.LICENSES, None)
    assert "1 of 4 free" in now.message
    early = judge(two, 1010, 1060)
    assert (early.reason, early.earliest_start) == (PendingReason.LICENSES, 1090)
    assert judge(two, 1090, 1190).is_success
    never = judge(four, 1090, 1190)
    assert (never.reason, never.earliest_start) == (PendingReason.LICENSES, None)


# Het jobs: the licenses of every component count together, against the cluster's and
# over the run backfill plans for the group (docs/user/hetjobs.md, docs/user/licenses.md).


def _het(*per_component: int, limit: int = 100) -> list[JobBuilder]:
    """Het job 10: one 1-node component per count, asking that many matlab licenses."""
    size = len(per_component)
    return [
        make_job(10 + i).het(10, i, size).licenses(matlab=n).limit(limit)
        for i, n in enumerate(per_component)
    ]


def test_a_het_job_asking_more_licenses_than_the_cluster_has_never_starts() -> None:
    """Two components asking 2 matlab each, 3 configured: the het job can never run, so
    no pass starts it and backfill gives it no start time (it was planned a second from
    now, a start that never came); its reason says what it asks in all."""
    for mode in ("easy", "conservative"):
        result = _scheduler(mode, matlab=3).run_pass(_snapshot(0, *_het(2, 2)))
        assert placed_nodes(result.plan) == {}
        assert result.reservations == {}
        updates = {u.job_id: u for u in result.plan.updates}
        assert {j: (u.reason, u.expected_start) for j, u in updates.items()} == {
            10: (PendingReason.LICENSES, None),
            11: (PendingReason.LICENSES, None),
        }
        said = result.statuses[10].message
        assert "het job 10 asks 4 matlab license(s) in all, the cluster has 3" in said


def test_a_het_job_whose_licenses_fit_starts_holding_them_all() -> None:
    """5 matlab, job 1 holds 1: the two components take 2 each, in the main pass and in
    a backfill hole (a 4-node head waits for job 1's node), and job 12 asking 1 more
    waits: none is left."""
    later = make_job(12).licenses(matlab=1).limit(50)
    main = _scheduler("easy", matlab=5).run_pass(_snapshot(1, *_het(2, 2), later))
    assert set(placed_nodes(main.plan)) == {10, 11}
    head = make_job(5).nodes(4).limit(100).priority(100)
    hole = _scheduler("easy", matlab=5).run_pass(_snapshot(1, head, *_het(2, 2, limit=50), later))
    assert set(placed_nodes(hole.plan)) == {10, 11}
    assert {u.job_id: u.reason for u in hole.plan.updates}[12] is PendingReason.LICENSES


def test_a_het_job_is_reserved_when_all_its_licenses_are_back() -> None:
    """4 matlab, job 1 holds 1 until 1090 and job 2 1 until 1150: the two components (2
    each) fit together from 1150 only; each alone fit from 1090, where they were
    reserved, so the planned start passed with the licenses still short."""
    snap = (
        cluster(NOW)
        .uniform_nodes(4, cpus=1)
        .running(
            make_job(1).licenses(matlab=1).limit(100).running_on("n0001", start=990),
            make_job(2).licenses(matlab=1).limit(160).running_on("n0002", start=990),
        )
        .pending(*_het(2, 2))
        .build()
    )
    result = _scheduler("conservative", matlab=4).run_pass(snap)
    assert {u.job_id: u.expected_start for u in result.plan.updates} == {10: 1150, 11: 1150}


def test_backfill_keeps_a_het_jobs_licenses_from_later_jobs() -> None:
    """4 matlab, job 1 holds 2 until 1090: the het job (2 + 2) is reserved at 1090. Job
    12 (1 license until 1200) would leave it short then and waits; job 13 gives its
    license back by 1050 and starts now."""
    for mode in ("easy", "conservative"):
        snap = _snapshot(
            2,
            *_het(2, 2),
            make_job(12).licenses(matlab=1).limit(200),
            make_job(13).licenses(matlab=1).limit(50),
        )
        result = _scheduler(mode, matlab=4).run_pass(snap)
        assert set(placed_nodes(result.plan)) == {13}
        starts = {u.job_id: u.expected_start for u in result.plan.updates}
        assert (starts[10], starts[11]) == (1090, 1090)
        assert starts[12] != 1000


def test_backfill_starts_no_het_job_whose_licenses_together_delay_a_reservation() -> None:
    """6 matlab, job 1 holds 2 until 1090, head 5 wants 5 from then. Het job 10's two
    components (1 each, to 1200) each fit beside the head's 5, together they do not: it
    waits (it started, and the head found 7 of 6 held at 1090). Ending by 1050, it
    starts."""
    head = make_job(5).licenses(matlab=5).limit(100).priority(100)
    late = _scheduler("easy", matlab=6).run_pass(_snapshot(2, head, *_het(1, 1, limit=200)))
    assert placed_nodes(late.plan) == {}
    assert {u.job_id: u.expected_start for u in late.plan.updates}[5] == 1090
    early = _scheduler("easy", matlab=6).run_pass(_snapshot(2, head, *_het(1, 1, limit=50)))
    assert set(placed_nodes(early.plan)) == {10, 11}
