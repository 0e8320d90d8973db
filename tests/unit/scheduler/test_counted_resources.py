"""The framework's counted resources (``CountedResourcePlugin``) with counters that are
not licenses: two fake plugins (``FakeCounted``), ``tokens`` and ``seats``, each with a
counter named ``a``. One-CPU nodes; job 1 runs on n0001 from 990 to 1090 (its time
limit, what backfill plans with); bf_resolution 1 s, so planned times are exact."""

from __future__ import annotations

from hal.core.states import PendingReason
from hal.scheduler.framework import Scheduler
from hal.scheduler.framework.main_loop import QUEUE
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import FakeCounted, JobBuilder, cluster, make_job, placed_nodes

NOW = 1000.0


def _scheduler(*counted: FakeCounted) -> Scheduler:
    registry = default_registry()
    for plugin in counted:
        registry.register(plugin.name, lambda args, plugin=plugin: plugin)
    prof = default_profile(backfill=False)
    plugins = prof["plugins"]
    assert isinstance(plugins, list)
    plugins.extend([*(c.name for c in counted), "backfill"])
    plugin_args = prof["plugin_args"]
    assert isinstance(plugin_args, dict)
    plugin_args["backfill"] = {"resolution_s": 1}
    return build_scheduler(prof, registry)


def _snapshot(nodes: int, *pending: JobBuilder):  # type: ignore[no-untyped-def]
    return (
        cluster(NOW)
        .uniform_nodes(nodes, cpus=1)
        .running(make_job(1).limit(100).running_on("n0001", start=NOW - 10))
        .pending(*pending)
        .build()
    )


def test_a_job_asking_a_counter_waits_behind_the_one_short_of_it_and_no_other() -> None:
    """Job 1 holds one of two ``tokens`` a. Job 10 asks both: short, it waits (the
    plugin's reason). Job 11 asks one, which is free now, but waits behind job 10 (the
    gate's verdict, naming it): taking it would leave job 10 short again. Job 12 asks
    ``seats``' counter ``a`` (another plugin's: nobody waits for it) and starts, as does
    job 13, asking none. With the backfill stage (the main pass alone first, as between
    two bf_intervals), job 10 is reserved for when job 1 gives its one back (1090), and
    job 11 still does not start: it would hold its one past 1090."""
    tokens = FakeCounted("tokens", {"a": 2}, {1: (("a", 1),), 10: (("a", 2),), 11: (("a", 1),)})
    seats = FakeCounted("seats", {"a": 1}, {12: (("a", 1),)})
    sched = _scheduler(tokens, seats)
    snap = _snapshot(
        4,
        make_job(10).limit(100),
        make_job(11).limit(100),
        make_job(12).limit(100),
        make_job(13).limit(100),
    )
    main = sched.run_pass(snap, backfill=False)
    assert set(placed_nodes(main.plan)) == {12, 13}
    short, behind = main.statuses[10], main.statuses[11]
    assert (short.reason, short.plugin) == (PendingReason.LICENSES, "tokens")
    assert (behind.reason, behind.plugin) == (PendingReason.LICENSES, QUEUE)
    assert behind.message == "a: job 10 ahead in the queue waits for it"
    result = sched.run_pass(snap)
    assert set(placed_nodes(result.plan)) == {12, 13}
    assert result.reservations[10][0] == 1090
    assert (result.statuses[11].plugin, result.statuses[11].message) == (
        "tokens",
        "short over its run",
    )


def test_backfill_plans_counters_over_time_for_any_counted_resource() -> None:
    """Job 1 holds one of two ``tokens`` a until 1090; job 10 asks two (short now) and
    is reserved from 1090 on four of eight nodes. Job 11 asks one for 150 s: free now,
    but it would still hold it at 1090, when job 10 needs both, so it does not start,
    though nodes are free for it all through: the plugin judged its whole planned run.
    Job 12 asks one for 50 s: back by 1050, it starts now."""
    holds = {1: (("a", 1),), 10: (("a", 2),), 11: (("a", 1),), 12: (("a", 1),)}
    sched = _scheduler(FakeCounted("tokens", {"a": 2}, holds))
    snap = _snapshot(
        8, make_job(10).nodes(4).limit(100), make_job(11).limit(150), make_job(12).limit(50)
    )
    result = sched.run_pass(snap)
    assert set(placed_nodes(result.plan)) == {12}
    assert result.reservations[10][0] == 1090
    refused = result.statuses[11]
    assert (refused.plugin, refused.message) == ("tokens", "short over its run")
