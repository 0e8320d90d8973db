"""The backfill plugin and stage on hand-made snapshots: four single-CPU nodes, two of
them busy until 1090 (jobs started at 990 asking for 100 s)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hal.core.job import Job
from hal.core.states import PendingReason
from hal.core.suspension import SUSPENDED_S
from hal.predict import UserPredictor, planned_runtime
from hal.scheduler.framework import ProfileError, Scheduler
from hal.scheduler.plugins import backfill, build_scheduler, default_profile
from hal.testing import JobBuilder, cluster, expected_starts, make_job, placed_nodes

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


def half_busy(*pending: JobBuilder):  # type: ignore[no-untyped-def]
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


def test_easy_fills_the_hole_before_the_head_starts() -> None:
    """The 4-node head waits for 1090; a 50 s job fits before that, a 95 s one does not
    (it would still hold a node the head needs at 1090)."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50),
                     make_job(13).limit(95))  # fmt: skip
    sched = with_backfill(mode="easy")
    result = sched.run_pass(snap)
    assert set(placed_nodes(result.plan)) == {12}
    updates = {u.job_id: u for u in result.plan.updates}
    assert updates[10].expected_start == 1090
    assert updates[10].reason is PendingReason.RESOURCES
    # EASY reserves for the head only; job 13's start is a forecast after it (squeue
    # --start), planned as conservative backfilling would, after the plan, holding nothing
    assert updates[13].expected_start is None
    assert expected_starts(sched, result.plan)[13] == 1190
    assert set(result.reservations) == {10}


def test_easy_forecasts_starts_in_priority_order_without_holding_them() -> None:
    """Behind the head (all four nodes at 1090), each waiting job is planned where it
    would start after the jobs before it: the 3-node job after the head, the 2-node one in
    the hole job 12 (started now) leaves at 1060. A pass that does not explain (the
    simulator) forecasts nothing, and both start the same jobs."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(11).nodes(3).limit(60),
                     make_job(12).limit(60), make_job(13).nodes(2).limit(30))  # fmt: skip
    sched = with_backfill(mode="easy")
    shown = sched.run_pass(snap)
    assert set(placed_nodes(shown.plan)) == {12}
    assert expected_starts(sched, shown.plan) == {10: 1090, 11: 1190, 13: 1060}
    quiet = sched.run_pass(snap, explain=False)
    assert quiet.plan.forecasting == ()
    assert placed_nodes(shown.plan) == placed_nodes(quiet.plan)


def test_a_forecast_keeps_the_last_one_until_it_comes() -> None:
    """A job whose last forecast was 1190 keeps it in the plan (not None, then 1190 again,
    each pass); the forecast, after the plan, updates only the starts that moved."""
    pending = (make_job(10).nodes(4).limit(100), make_job(11).nodes(3).limit(60))
    sched = with_backfill(mode="easy")
    result = sched.run_pass(half_busy(*pending[:1], pending[1].expected_start(1190.0)))
    assert {u.job_id: u.expected_start for u in result.plan.updates}[11] == 1190
    assert result.plan.forecasting == (11,) and sched.forecast(result.plan) == ()
    moved = sched.run_pass(half_busy(*pending[:1], pending[1].expected_start(1500.0)))
    assert moved.plan.forecasting == (11,)
    assert [(u.job_id, u.expected_start) for u in sched.forecast(moved.plan)] == [(11, 1190)]


def test_conservative_gives_every_waiting_job_a_start_time() -> None:
    """squeue --start has an answer for every job: the head at 1090, the next after it."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(11).nodes(3).limit(60))
    result = with_backfill(mode="conservative").run_pass(snap)
    starts = {u.job_id: u.expected_start for u in result.plan.updates}
    assert starts == {10: 1090, 11: 1190}


def test_without_the_plugin_nothing_jumps_the_queue() -> None:
    """Without backfill, strict priority order: job 12 would fit, but waits."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50))
    assert placed_nodes(build_scheduler(default_profile(backfill=False)).schedule(snap)) == {}


def test_the_default_profile_backfills_like_slurm(sched: Scheduler) -> None:
    """The default profile is Slurm's sched/backfill: EASY with Slurm's tunables. Job 12
    starts in the hole; the head gets its expected start: the nodes free at 1090, on
    bf_resolution's 60 s grid, 1140."""
    plugin = sched.profile.backfill
    assert plugin is not None
    policy = plugin.policy_for("batch")
    assert policy is not None
    assert (policy.mode.value, policy.window_s, policy.resolution_s) == ("easy", 86_400, 60)
    assert (policy.max_job_test, policy.interval_s) == (500, 30)
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50))
    result = sched.run_pass(snap)
    assert set(placed_nodes(result.plan)) == {12}
    (update,) = result.plan.updates
    assert update.job_id == 10
    assert update.expected_start == 1140


def test_between_backfill_passes_held_jobs_keep_their_start(sched: Scheduler) -> None:
    """A pass that skips the backfill stage (bf_interval) leaves the head's expected
    start as the last backfill pass set it, and clears it for a job that is no longer
    held back by the queue."""
    head = make_job(10).nodes(4).limit(100).reason(PendingReason.RESOURCES)
    snap = half_busy(head.expected_start(1090.0))
    assert sched.run_pass(snap, backfill=False).plan.updates == ()
    (update,) = sched.run_pass(half_busy(head.hold()), backfill=False).plan.updates
    assert (update.reason, update.expected_start) == (PendingReason.JOB_HELD_USER, None)


def test_a_partition_can_opt_out() -> None:
    """partitions = {batch = "none"}: that partition stays in strict priority order."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50))
    plan = with_backfill(mode="easy", partitions={"batch": "none"}).schedule(snap)
    assert placed_nodes(plan) == {}


def test_a_held_job_is_never_backfilled() -> None:
    """A job on user hold keeps its own reason even when it would fit in the hole."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50).hold())
    result = with_backfill(mode="easy").run_pass(snap)
    assert placed_nodes(result.plan) == {}
    assert result.statuses[12].reason is PendingReason.JOB_HELD_USER


def test_placements_do_not_depend_on_explanations() -> None:
    """The simulator's explain=False decides the same placements as the server."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50),
                     make_job(13).limit(20).hold(), make_job(14).limit(40))  # fmt: skip
    s = with_backfill(mode="conservative")
    assert placed_nodes(s.run_pass(snap).plan) == placed_nodes(s.run_pass(snap, explain=False).plan)


def test_bf_interval_is_exposed_and_a_pass_may_skip_backfill() -> None:
    """bf_interval is the caller's to honour: run_pass(backfill=False) keeps strict order."""
    s = with_backfill(mode="easy", interval_s=30)
    assert s.backfill_interval_s == 30
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50))
    assert placed_nodes(s.run_pass(snap, backfill=False).plan) == {}


def test_bf_window_limits_how_far_reservations_reach() -> None:
    """With a 60 s window the head (start 1090) gets no reservation and no estimate."""
    snap = half_busy(make_job(10).nodes(4).limit(100))
    result = with_backfill(mode="conservative", window_s=60).run_pass(snap)
    assert {u.job_id: u.expected_start for u in result.plan.updates} == {10: None}


def test_max_job_test_bounds_the_work_per_pass() -> None:
    """bf_max_job_test = 1: only the head is planned; the small job is not even tried."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50))
    assert placed_nodes(with_backfill(mode="easy", max_job_test=1).schedule(snap)) == {}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"mode": "aggressive"}, "plugin_args.backfill.mode"),
        ({"order": "random"}, "plugin_args.backfill.order"),
        ({"window_s": -1}, "plugin_args.backfill.window_s"),
        ({"yield_interval_s": float("nan")}, "plugin_args.backfill.yield_interval_s"),
        ({"interval_s": float("inf")}, "plugin_args.backfill.interval_s"),
        ({"max_job_test": 2.5}, "plugin_args.backfill.max_job_test"),
        ({"predictor": "perfect"}, "plugin_args.backfill.predictor"),
        ({"bf_window": 10}, "plugin_args.backfill.bf_window"),
    ],
)
def test_bad_arguments_stop_start_up_naming_the_field(args: dict[str, object], field: str) -> None:
    """A typo in the config is caught at start-up with the field to fix."""
    with pytest.raises(ProfileError) as err:
        with_backfill(**args)
    assert err.value.field == field


def test_a_pass_reports_its_backfill_stage_for_sdiag(sched: Scheduler) -> None:
    """The pass says what its backfill stage did: jobs handed to it, started, reserved."""
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(50))
    cycle = sched.run_pass(snap).backfill
    assert cycle is not None
    assert (cycle.considered, cycle.started, cycle.reservations) == (2, 1, 1)
    assert cycle.duration_s >= 0
    assert sched.run_pass(snap, backfill=False).backfill is None


def test_kept_user_predictions_plan_what_the_predictor_plans() -> None:
    """The plugin keeps each job's requested time (user predictor): asked again, for the
    same job, another object of it, or a job that has outlived it, it answers what
    ``planned_runtime`` answers."""
    plugin = backfill.new({"mode": "easy"})
    assert plugin._fixed is not None
    user = UserPredictor()
    for limit in (0, 1, 60, 3600):
        job = make_job(limit + 1).limit(limit).build()
        for elapsed in (0.0, 0.5, 59.0, 60.0, 61.0, 3600.0, 1e9, 0.0):
            assert plugin.runtime(job, elapsed) == planned_runtime(user, job, elapsed)
        other = job.evolve(time_limit_s=limit + 30)
        assert plugin.runtime(other, 10.0) == planned_runtime(user, other, 10.0)
    # what is kept holds no job (an ended job's script and environment would stay alive)
    assert all(isinstance(limit, int) for limit, _ in plugin._fixed.values())
    assert backfill.new({"mode": "easy", "predictor": "avg2"})._fixed is None


class _ShortGuess:
    """Predicts 5 s for every waiting job and the time limit for running ones."""

    name = "short-guess"

    def predict(self, job: Job) -> float:
        return 5.0 if job.start_time is None else float(job.time_limit_s)

    def observe(self, job: Job, runtime_s: float) -> None:
        pass


@pytest.mark.parametrize(("protect_after_s", "started"), [(0, {12}), (500, set()), (2000, {12})])
def test_a_head_waiting_past_protect_after_is_not_delayed_by_predictions(
    protect_after_s: float, started: set[int]
) -> None:
    """The 4-node head (submitted at 10) waits for 1090. Job 12 asks for 95 s but is
    predicted to run 5: planned by its prediction it fits before 1090, and would delay
    the head if the prediction were wrong. Once the head has waited ``protect_after_s``
    (990 s here), job 12 is planned to its time limit and waits."""
    scheduler = with_backfill(mode="easy", protect_after_s=protect_after_s)
    plugin_args = {"mode": "easy", "resolution_s": 1, "protect_after_s": protect_after_s}
    profile = replace(scheduler.profile, backfill=backfill.new(plugin_args, _ShortGuess()))
    snap = half_busy(make_job(10).nodes(4).limit(100), make_job(12).limit(95))
    result = Scheduler(profile).run_pass(snap)
    assert set(placed_nodes(result.plan)) == started


def test_protect_after_counts_from_the_heads_begin_time() -> None:
    """The head could not start before its ``--begin`` 100 s ago: it has waited 100 s,
    not the 990 s since its submission, so at 500 it is not protected yet."""
    plugin_args = {"mode": "easy", "resolution_s": 1, "protect_after_s": 500}
    scheduler = with_backfill(mode="easy", protect_after_s=500)
    profile = replace(scheduler.profile, backfill=backfill.new(plugin_args, _ShortGuess()))
    snap = half_busy(make_job(10).nodes(4).limit(100).begin(NOW - 100), make_job(12).limit(95))
    assert set(placed_nodes(Scheduler(profile).run_pass(snap).plan)) == {12}


def test_protect_after_must_be_a_number() -> None:
    with pytest.raises(ProfileError) as err:
        with_backfill(mode="easy", protect_after_s=-1)
    assert err.value.field == "plugin_args.backfill.protect_after_s"


def test_fixed_runtimes_answer_what_runtime_answers() -> None:
    """With the user predictor the plugin gives every pending job's run time at once,
    the values ``runtime`` gives one by one; with a learning predictor it declines."""
    plugin = backfill.new({"mode": "easy"})
    jobs = [make_job(i).limit(limit).build() for i, limit in enumerate((0, 1, 60, 3600, 59))]
    plugin.runtime(jobs[2])  # one already kept
    fixed = plugin.fixed_runtimes(jobs)
    assert fixed is not None and fixed.tolist() == [plugin.runtime(j) for j in jobs]
    assert backfill.new({"mode": "easy", "predictor": "avg2"}).fixed_runtimes(jobs) is None


class _AskedOneByOne(backfill.Backfill):
    """The plugin as it was before ``fixed_runtimes``: the stage asks job by job."""

    def fixed_runtimes(self, jobs: object) -> None:
        return None


@pytest.mark.parametrize("protect_after_s", [0, 100])
def test_the_settled_screen_decides_alike_with_run_times_asked_at_once(
    protect_after_s: float,
) -> None:
    """A busy machine, a wide head and a queue of small jobs of many sizes and limits:
    the settled stage, comparing every job's window at once, starts and plans exactly
    what it starts and plans asking each job's run time in turn (also while the head is
    protected, when jobs are planned to their time limits)."""
    snap = (
        cluster(NOW)
        .uniform_nodes(8, cpus=4)
        .running(
            *(
                make_job(i)
                .cpus(1 + i % 4)
                .limit(50 + 40 * i)
                .running_on(f"n000{i}", start=NOW - 10)
                for i in range(1, 9)
            )
        )
        .pending(
            make_job(20).nodes(8).cpus(4).limit(500),
            *(make_job(21 + k).cpus(1 + k % 3).limit(20 + 37 * (k % 11)) for k in range(40)),
        )
        .build()
    )
    # (every job tested, as the simulator does: the settled stage needs it)
    args = {
        "mode": "easy",
        "resolution_s": 1,
        "max_job_test": 0,
        "protect_after_s": protect_after_s,
    }
    base = with_backfill(**args).profile
    results = []
    for kind in (backfill.Backfill, _AskedOneByOne):
        plugin = backfill.new(args)
        plugin.__class__ = kind
        result = Scheduler(replace(base, backfill=plugin)).run_pass(snap, explain=False)
        results.append((placed_nodes(result.plan), [u for u in result.plan.updates]))
    assert results[0] == results[1]
    started = set(results[0][0])
    assert started and not started >= {21 + k for k in range(40)}


def test_a_resumed_job_is_planned_to_end_after_its_suspension() -> None:
    """Job 1 (limit 100 s) started 150 s ago and spent 100 s of that suspended: its
    agent lets it run until 50 s from now. The head, which needs its node, is planned to
    start then, not at once (counted from its start, the job looked overdue), so no job
    is backfilled into the 50 s the head would in fact wait."""
    resumed = make_job(1).limit(100).running_on("n0001", start=NOW - 150).build()
    resumed = resumed.evolve(extra={SUSPENDED_S: "100.0"})
    snap = (
        cluster(NOW)
        .uniform_nodes(1, cpus=1)
        .running(resumed)
        .pending(make_job(10).limit(100))
        .build()
    )
    result = with_backfill(mode="easy").run_pass(snap)
    assert result.reservations[10][0] == NOW + 50


def test_kept_user_predictions_outlast_a_full_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs asked every pass (the running jobs of a large cluster), as many as a
    generation holds, among others that come and go: each is worked out once; a job not
    asked for two generations is let go."""
    from hal.scheduler.plugins.backfill import plugin as module

    monkeypatch.setattr(module, "_FIXED_KEPT", 4)
    worked: list[int] = []

    def counted(predictor: Any, job: Job, elapsed_s: float = 0.0) -> float:
        worked.append(job.id)
        return planned_runtime(predictor, job, elapsed_s)

    monkeypatch.setattr(module, "planned_runtime", counted)
    plugin = backfill.new({"mode": "easy"})
    running = [make_job(i).limit(60 * i).build() for i in range(1, 5)]
    fresh = [make_job(i).limit(30).build() for i in range(10, 15)]
    for new in fresh:  # a pass: the running jobs, and a job not asked before
        assert [plugin.runtime(j) for j in running] == [60.0 * i for i in range(1, 5)]
        assert plugin.runtime(new) == 30.0
    assert worked == [1, 2, 3, 4, 10, 11, 12, 13, 14]
    for job in [make_job(i).limit(30).build() for i in range(20, 29)]:  # two generations
        plugin.runtime(job)
    plugin.runtime(running[0])
    assert worked[-1] == 1  # let go: worked out again
