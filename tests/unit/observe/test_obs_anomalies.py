"""The anomaly detector on a real ``Cluster`` mirror with explicit times: the failure
window expires, an overrun needs a model's prediction, alerts come and go."""

from __future__ import annotations

import asyncio

from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import JobState
from hal.observe.config import ObserveConfig
from hal.server.observe.alerts import AlertEvaluator
from hal.server.observe.anomalies import NODE_FAILING, NODE_SLOW, OVERRUNNING, AnomalyDetector
from hal.state.cluster import Cluster
from hal.testing.builders import make_job

CONFIG = ObserveConfig(overrun_factor=3.0, overrun_margin_s=3600.0, node_fail_min_jobs=5,
                       node_fail_window_s=3600.0)  # fmt: skip


def ended(job_id: int, node: str, state: JobState, end: float) -> Job:
    """Job ``job_id`` that ended on ``node`` at ``end``, of user u0, u1 or u2 by its id."""
    job = make_job(job_id).user(f"u{job_id % 3}").running_on(node, start=end - 10).build()
    return job.evolve(state=state, end_time=end)


def test_failures_count_within_the_window_only(cluster: Cluster, clock: VirtualClock) -> None:
    async def scenario() -> None:
        await cluster.load()
        det = AnomalyDetector(cluster, CONFIG)
        ev = AlertEvaluator(cluster, CONFIG, last_start=lambda: 0.0, last_cycle_s=lambda: 0.0)
        ev.sources.append(det.findings)
        t = clock.now()
        det._on_jobs([ended(i, "bad", JobState.FAILED, t - 100 + i) for i in range(5)])
        det._on_jobs([ended(10 + i, "good", JobState.COMPLETED, t - 100 + i) for i in range(5)])
        det._on_jobs([ended(4, "bad", JobState.FAILED, t - 96)])  # the same run again
        await det.check(t)
        assert list(det.nodes) == ["bad"] and det.nodes["bad"].jobs == 5
        assert [(a.name, a.labels) for a in ev.evaluate(t)] == [(NODE_FAILING, {"node": "bad"})]
        assert [e.kind for e in cluster.recent_events] == ["node.anomalous"]
        await det.check(t + 1)  # still anomalous: no second event
        assert len(cluster.recent_events) == 1
        # an hour later the failures have left the window: resolved
        await det.check(t + 3600)
        assert det.nodes == {}
        assert [a.name for a in ev.evaluate(t + 3600)] == [NODE_FAILING]  # the resolution
        assert ev.firing() == []
        assert cluster.nodes == {}  # drain is off (and there are no node records)

    asyncio.run(scenario())


def test_an_overrun_needs_a_models_prediction(cluster: Cluster, clock: VirtualClock) -> None:
    t = clock.now()
    predictions = {1: (100.0, 3), 2: (100.0, 0)}  # job 2: a baseline's guess (no model)

    async def scenario() -> None:
        await cluster.load()
        for job_id in (1, 2):
            job = make_job(job_id).limit(86_400).running_on("n1", start=t - 3701).build()
            cluster.put(job)
        det = AnomalyDetector(cluster, CONFIG, predicted_at_start=predictions.get)
        await det.check(t)
        assert list(det.overruns) == [1]  # 3701 s > max(300, 100 + 3600)
        (event,) = cluster.recent_events
        assert (event.kind, event.job_id, event.data["predicted_s"]) == (
            "job.overrunning",
            1,
            100.0,
        )
        (finding,) = det.findings(t)
        assert finding.name == OVERRUNNING and finding.labels == {"job_id": "1", "node": "n1"}
        await det.check(t + 10)
        assert len(cluster.recent_events) == 1  # reported once per run
        cluster.put(cluster.jobs[1].evolve(state=JobState.COMPLETED, end_time=t + 15))
        await det.check(t + 20)
        assert det.overruns == {} and list(det.findings(t + 20)) == []

    asyncio.run(scenario())


def test_time_spent_suspended_is_not_an_overrun(cluster: Cluster, clock: VirtualClock) -> None:
    """A job predicted at 100 s, suspended for two hours (``scontrol suspend``, or a
    preemptor in mode suspend) and resumed, has run 150 s: not a hang. Its agent does not
    count the suspension toward its limit either."""
    from hal.state.suspension import suspension

    t = clock.now()

    async def scenario() -> None:
        await cluster.load()
        job = make_job(1).limit(86_400).running_on("n1", start=t - 7350).build()
        extra = suspension(suspension(job.extra, t - 7300), t - 100)  # 7200 s suspended
        cluster.put(job.evolve(extra=extra))
        det = AnomalyDetector(cluster, CONFIG, predicted_at_start={1: (100.0, 3)}.get)
        await det.check(t)
        assert det.overruns == {} and list(cluster.recent_events) == []
        await det.check(t + 3700)  # 3850 s of running: now it is one
        assert det.overruns[1].elapsed_s == 3850.0

    asyncio.run(scenario())


def test_suspending_an_overrunning_job_neither_resolves_nor_repeats_it(
    cluster: Cluster, clock: VirtualClock
) -> None:
    """An overrunning job (100 s predicted, an hour and more run) that an administrator
    suspends to look at it (``scontrol suspend``) and resumes is the same run: its alert
    does not resolve and fire again (two more webhook posts) and ``job.overrunning`` is
    not recorded a second time."""
    from hal.state.suspension import suspension

    t = clock.now()

    async def scenario() -> None:
        await cluster.load()
        job = make_job(1).limit(86_400).running_on("n1", start=t - 3701).build()
        cluster.put(job)
        det = AnomalyDetector(cluster, CONFIG, predicted_at_start={1: (100.0, 3)}.get)
        ev = AlertEvaluator(cluster, CONFIG, last_start=lambda: t, last_cycle_s=lambda: 0.0)
        ev.sources.append(det.findings)
        await det.check(t)
        assert [a.name for a in ev.evaluate(t)] == [OVERRUNNING]
        suspended = job.evolve(state=JobState.SUSPENDED, extra=suspension(job.extra, t + 5))
        cluster.put(suspended)
        await det.check(t + 10)
        assert ev.evaluate(t + 10) == [] and [a.name for a in ev.firing()] == [OVERRUNNING]
        resumed = suspended.evolve(state=JobState.RUNNING,
                                   extra=suspension(suspended.extra, t + 100))  # fmt: skip
        cluster.put(resumed)
        await det.check(t + 110)
        assert ev.evaluate(t + 110) == []
        assert [e.kind for e in cluster.recent_events] == ["job.overrunning"]
        assert det.overruns[1].elapsed_s == 3716.0  # 3811 s since the start, 95 s suspended

    asyncio.run(scenario())


def test_a_node_running_jobs_four_times_slower_is_flagged_then_ages_out(
    cluster: Cluster, clock: VirtualClock
) -> None:
    """Jobs predicted at 100 s by a model: on "slow" eight of them ran 380-422 s, on two
    peers twenty each 80-120 s. Runs a baseline predicted and failed runs do not count;
    after the window the node is calm again."""
    t = clock.now()

    async def scenario() -> None:
        await cluster.load()
        det = AnomalyDetector(cluster, CONFIG)
        ev = AlertEvaluator(cluster, CONFIG, last_start=lambda: 0.0, last_cycle_s=lambda: 0.0)
        ev.sources.append(det.findings)
        for i in range(8):
            det.run_finished(ended(i, "slow", JobState.COMPLETED, t - 60), 100.0, 2, 380 + 6 * i)
        for i in range(20):
            for k, peer in enumerate(("a", "b")):
                job = ended(100 * (k + 1) + i, peer, JobState.COMPLETED, t - 60)
                det.run_finished(job, 100.0, 2, 80 + 2 * i)
        det.run_finished(ended(50, "a", JobState.COMPLETED, t - 60), 100.0, 0, 900)  # no model
        det.run_finished(ended(51, "b", JobState.FAILED, t - 60), 100.0, 2, 900)  # failed
        await det.check(t)
        (slow,) = det.slow.values()
        assert (slow.node, slow.jobs) == ("slow", 8)
        assert det.node_ratios["slow"] == 4.01 and det.node_ratios["a"] == 0.99
        assert slow.peer_ratio == 0.99  # the other 40 runs: 0.8 ... 1.18
        assert [(a.name, a.labels) for a in ev.evaluate(t)] == [(NODE_SLOW, {"node": "slow"})]
        (event,) = cluster.recent_events
        assert (event.kind, event.node, event.data["ratio"]) == (
            "node.runtime_inflated",
            "slow",
            4.01,
        )
        await det.check(t + 5)
        assert len(cluster.recent_events) == 1  # one event per episode
        await det.check(t + CONFIG.node_slow_window_s)  # the runs have left the window
        assert det.slow == {} and det.node_ratios == {}
        assert [a.name for a in ev.evaluate(t + CONFIG.node_slow_window_s)] == [NODE_SLOW]
        assert ev.firing() == []

    asyncio.run(scenario())
