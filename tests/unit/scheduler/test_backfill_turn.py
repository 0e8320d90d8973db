"""Backfill's turn (ADR 0029): a pass that stops placing a partition's jobs at its most
starts (sched_max_job_start) runs its backfill stage all the same when bf_interval has
passed, as Slurm's backfill thread is not held back by sched_max_job_start. It starts no
job of the capped partition (the plan applier would not), plans those that fit now to
start now, holding their nodes from the later jobs, and plans the other partitions' jobs
held back as a full pass would; ``PacedScheduler`` gives it once per bf_interval while
every pass stops at the cap."""

from __future__ import annotations

from hal.core.states import PendingReason
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile
from hal.scheduler.service import PacedScheduler, PassBounds
from hal.testing import JobBuilder, cluster, make_job, placed_nodes

NOW = 1000.0
BULK = tuple(range(100, 110))  # ten 1-CPU jobs of partition bulk, first in the queue
CAP = 5


def _snap(now: float = NOW) -> ClusterSnapshot:
    """Five 4-CPU nodes. Partition bulk (n0001, n0002) has a backlog of ten 1-CPU jobs
    ahead of everyone; partition other (every node) has a head needing three whole nodes
    (199: n0003 and n0004 are busy until 1100, so it is reserved from then, with
    n0005), a 50 s job that fits before that reservation (200) and a 600 s one that would
    delay it (201). With the cap at two, every pass places bulk's 100 and 101 and passes
    over the eight others."""
    busy = [make_job(i).cpus(4).limit(100).running_on(f"n000{i}", start=NOW) for i in (3, 4)]
    bulk = [make_job(i).cpus(1).limit(600).partition("bulk") for i in BULK]
    other = [
        make_job(199).nodes(3).cpus(4).limit(600).partition("other"),
        make_job(200).cpus(1).limit(50).partition("other"),
        make_job(201).cpus(1).limit(600).partition("other"),
    ]
    return (
        cluster(now)
        .uniform_nodes(5, cpus=4)
        .partition("bulk", "n0001", "n0002")
        .partition("other", "n0001", "n0002", "n0003", "n0004", "n0005")
        .running(*busy)
        .pending(*bulk, *other)
        .build()
    )


def test_a_pass_stopped_at_the_cap_runs_the_backfill_stage() -> None:
    """The turn starts nothing of bulk past the cap: of the five bulk jobs handed over
    (as many as the cap), the three that fit now are planned to start now (what the
    next pass starts), the next one is bulk's reservation and the last is forecast.
    The other partition is planned as the full pass plans it, around bulk's jobs as if
    started: 200 starts in the hole before 199's reservation, not on bulk's nodes; 201,
    which would delay 199, does not start."""
    snap = _snap()
    turn = build_scheduler().run_pass(snap, max_starts=CAP)
    full = build_scheduler().run_pass(snap)
    assert not turn.complete and turn.capped == ("bulk",)
    assert turn.backfill is not None
    placed = placed_nodes(turn.plan)
    assert set(placed) == {100, 101, 102, 103, 104, 200}
    assert placed[200] == ("n0005",)
    assert {p.job_id: p.allocation for p in turn.plan.placements if p.job_id > 104} == {
        p.job_id: p.allocation for p in full.plan.placements if p.job_id > 107
    }
    # bulk's jobs 105-107 fit now: each expects to start now, on the nodes the full pass
    # started it on
    full_nodes = placed_nodes(full.plan)
    for job in range(105, 108):
        start, _, alloc = turn.reservations[job]
        assert start == NOW and alloc.nodes == full_nodes[job]
    # the reservations the full pass made (bulk's next job, 199) are the same
    assert {j: r for j, r in turn.reservations.items() if j > 107} == full.reservations
    # (199 from the busy nodes' ends, rounded to bf_resolution: after 200's end, before
    # 201's)
    assert NOW + 50 <= turn.reservations[199][0] < NOW + 600
    updates = {u.job_id: u for u in turn.plan.updates}
    assert updates[105].reason is PendingReason.PRIORITY
    assert updates[105].expected_start == NOW
    assert 201 not in placed
    assert 109 in turn.plan.forecasting  # bulk's last job: its start forecast


def test_a_pass_stopped_at_its_depth_still_runs_no_backfill_stage() -> None:
    """The tail after a depth was not looked at: no turn there, and with backfill not
    due none either (the jobs passed over keep what the store has)."""
    snap = _snap()
    deep = build_scheduler().run_pass(snap, depth=5, max_starts=CAP)
    assert deep.backfill is None and deep.plan.forecasting == ()
    not_due = build_scheduler().run_pass(snap, max_starts=CAP, backfill=False)
    assert not_due.backfill is None and not_due.capped == ("bulk",)
    assert all(job not in not_due.statuses for job in range(105, 110))


def test_a_turn_hands_over_as_many_jobs_as_the_policy_tests_and_the_cap() -> None:
    """bf_max_job_test: with two a partition, the turn hands backfill bulk's first two
    jobs past the cap; the others stay passed over (no verdict, no update). With every
    job to test, never more than the cap (a turn costs what a capped pass costs)."""
    raw = default_profile()
    raw["plugin_args"] = {"backfill": {"max_job_test": 2}}
    turn = build_scheduler(raw).run_pass(_snap(), max_starts=CAP)
    assert {105, 106} <= set(turn.statuses)
    assert not {107, 108, 109} & set(turn.statuses)
    assert not {107, 108, 109} & {u.job_id for u in turn.plan.updates}
    raw["plugin_args"] = {"backfill": {"max_job_test": 0}}
    turn = build_scheduler(raw).run_pass(_snap(), max_starts=3)
    assert {103, 104, 105} <= set(turn.statuses)
    assert not {106, 107, 108, 109} & set(turn.statuses)


def test_paced_backfill_runs_once_per_interval_while_every_pass_stops_at_the_cap() -> None:
    """bf_interval is 30 s: passes every 10 s, each stopping at the cap, backfill at 0,
    30 and 60 s (before: never, as none completed). Each of those reserves 199 and
    starts 200 in the hole before it, never 201; every pass starts bulk's first five, as
    the cap lets it, and the turns plan the next ones to start now."""
    paced = PacedScheduler(build_scheduler(), bounds=PassBounds(100, 60.0, CAP))
    results = [paced.run_pass(_snap(NOW + t)) for t in range(0, 70, 10)]
    assert all(r.capped == ("bulk",) for r in results)
    ran = [r.backfill is not None for r in results]
    assert ran == [True, False, False, True, False, False, True]
    for at, r in zip(range(0, 70, 10), results, strict=True):
        placed = placed_nodes(r.plan)
        assert 201 not in placed
        assert set(placed) & set(BULK) == set(BULK[:CAP])
        assert set(placed) - set(BULK) == ({200} if r.backfill is not None else set())
        if r.backfill is not None:
            assert 199 in r.reservations and r.reservations[105][0] == NOW + at


def test_the_pass_after_one_stopped_at_the_cap_looks_at_every_job() -> None:
    """A queue depth of 3, the cap at five, a full pass that completed at 0 s (one job):
    the turn at 30 s stops at the cap, and the pass at 40 s, backfill not due and
    sched_interval not passed, still looks at the whole queue (it reaches the cap again,
    which the first 3 jobs alone never do): the stopped pass left the queue behind its
    cap unlooked at. The pass at 10 s, after a pass that completed, goes to the depth."""
    paced = PacedScheduler(build_scheduler(), bounds=PassBounds(3, 60.0, CAP))
    one = cluster(NOW).uniform_nodes(5, cpus=4).pending(make_job(1).limit(60)).build()
    results = [paced.run_pass(one)]
    results += [paced.run_pass(_snap(NOW + t)) for t in (10, 30, 40)]
    assert [r.backfill is not None for r in results[1:]] == [False, True, False]
    assert [r.capped for r in results] == [(), (), ("bulk",), ("bulk",)]


def _bulk_only(count: int, held: tuple[int, ...]) -> ClusterSnapshot:
    """Two 4-CPU nodes in partition bulk and ``count`` 1-CPU jobs from 100 on, those of
    ``held`` held by their user."""
    jobs = [make_job(i).cpus(1).limit(600).partition("bulk") for i in range(100, 100 + count)]
    jobs = [job.hold() if 100 + i in held else job for i, job in enumerate(jobs)]
    return (
        cluster(NOW)
        .uniform_nodes(2, cpus=4)
        .partition("bulk", "n0001", "n0002")
        .pending(*jobs)
        .build()
    )


def test_a_job_handed_over_keeps_its_own_reason() -> None:
    """A job passed over at the cap runs its PreFilter when handed to backfill, as one
    behind a blocked queue does: held by its user, it shows that, not the cap's
    Priority, and backfill plans it not."""
    turn = build_scheduler().run_pass(_bulk_only(4, held=(102,)), max_starts=2)
    assert turn.statuses[103].reason is PendingReason.PRIORITY
    assert turn.statuses[102].reason is PendingReason.JOB_HELD_USER
    assert 102 not in turn.reservations and 103 in turn.reservations


def _shared(*extra: JobBuilder) -> ClusterSnapshot:
    """Six 4-CPU nodes. Partition bulk (n0001, n0006) has four 1-CPU jobs (100-103);
    partition other (n0002-n0005, two of them busy until 1100) has a head needing four
    whole nodes (199: blocked, reserved from then). With the cap at two, a pass places
    100 and 101 and hands 102 and 103 to backfill's turn; ``extra`` (priority after
    them) name bulk too."""
    busy = [make_job(i).cpus(4).limit(100).running_on(f"n000{i}", start=NOW) for i in (3, 4)]
    bulk = [make_job(i).cpus(1).limit(600).partition("bulk").submitted(2.0) for i in BULK[:4]]
    head = make_job(199).nodes(4).cpus(4).limit(600).partition("other").submitted(1.0)
    return (
        cluster(NOW)
        .uniform_nodes(6, cpus=4)
        .partition("bulk", "n0001", "n0006")
        .partition("other", "n0002", "n0003", "n0004", "n0005")
        .running(*busy)
        .pending(*bulk, head, *extra)
        .build()
    )


def test_a_turn_starts_no_job_naming_a_capped_partition_or_het_job_in_one() -> None:
    """A job naming other and bulk, behind other's blocked head (too long to start in
    other before 199's reservation), and a het job with a component in each (short
    enough to), after bulk's jobs or ahead of them: none starts in bulk, which placed
    its two (the plan applier would drop a third); each fits there now and is held from
    now, as bulk's own jobs handed over are (the het job ahead takes one of the two
    slots: 103 stays passed over), and 199's reservation is the one it has without
    them."""
    alone = build_scheduler().run_pass(_shared(), max_starts=2)

    def het(submitted: float) -> list[JobBuilder]:
        return [
            make_job(400 + i).het(400, i, 2).cpus(1).limit(60).partition(name)
            .submitted(submitted)
            for i, name in enumerate(("other", "bulk"))
        ]  # fmt: skip

    listed = make_job(300).partitions("other", "bulk").cpus(1).limit(600).submitted(3.0)
    cases = (([listed], (102, 103, 300)), (het(3.0), (102, 103, 401)), (het(1.5), (401, 102)))
    for extra, held in cases:
        turn = build_scheduler().run_pass(_shared(*extra), max_starts=2)
        assert turn.capped == ("bulk",) and turn.backfill is not None
        assert set(placed_nodes(turn.plan)) == {100, 101}
        for job in held:
            start, _, alloc = turn.reservations[job]
            assert start == NOW and set(alloc.nodes) <= {"n0001", "n0006"}
        assert turn.reservations[199] == alone.reservations[199]
        if 401 in held:  # the het job's other component waits with it, from now
            assert turn.reservations[400][0] == NOW


def test_a_job_with_its_own_verdict_uses_no_hand_over_slot() -> None:
    """Cap two, bulk's 102 and 103 held by their user: they show that, and the turn's two
    slots go to 104 and 105, which backfill plans from now; 106 stays passed over."""
    turn = build_scheduler().run_pass(_bulk_only(7, held=(102, 103)), max_starts=2)
    assert turn.backfill is not None
    assert turn.statuses[102].reason is PendingReason.JOB_HELD_USER
    assert turn.statuses[103].reason is PendingReason.JOB_HELD_USER
    for job in (104, 105):
        assert turn.statuses[job].reason is PendingReason.PRIORITY
        assert turn.reservations[job][0] == NOW
    assert 106 not in turn.statuses and 106 not in turn.reservations
