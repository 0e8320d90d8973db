"""The built-in alert evaluator, driven with explicit times, and its webhook payload."""

from __future__ import annotations

from hal.core.clock import VirtualClock
from hal.core.states import PendingReason
from hal.observe.config import ObserveConfig
from hal.server.observe.alerts import AlertEvaluator, webhook_payload
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.testing.builders import make_job, make_node

CONFIG = ObserveConfig(node_down_s=60, flap_count=3, flap_window_s=600, queue_stuck_s=900,
                       cycle_slow_s=5)  # fmt: skip


def evaluator(cluster: Cluster, last_start: float = 0.0, cycle_s: float = 0.0) -> AlertEvaluator:
    return AlertEvaluator(cluster, CONFIG, last_start=lambda: last_start,
                          last_cycle_s=lambda: cycle_s)  # fmt: skip


def names(ev: AlertEvaluator) -> list[str]:
    return [a.name for a in ev.firing()]


def test_a_silent_node_pages_after_the_threshold_and_resolves_when_back(
    cluster: Cluster, clock: VirtualClock
) -> None:
    ev = evaluator(cluster)
    t = clock.now()
    down = make_node("n1").down().build().evolve(reason="Not responding")
    cluster.nodes["n1"] = down
    cluster.nodes["n2"] = make_node("n2").down().build().evolve(reason="disk swap")
    assert ev.evaluate(t) == []
    changed = ev.evaluate(t + 61)
    assert [(a.name, a.labels) for a in changed] == [("HalNodeDown", {"node": "n1"})]
    assert ev.evaluate(t + 62) == []  # still firing: not announced twice
    cluster.nodes["n1"] = make_node("n1").build()
    resolved = ev.evaluate(t + 70)
    assert resolved[0].ends_at == t + 70 and names(ev) == []
    assert ev.resolved[0].name == "HalNodeDown"


def test_an_agent_that_keeps_re_registering_is_flapping(
    cluster: Cluster, clock: VirtualClock
) -> None:
    seen: list[str] = []
    ev = AlertEvaluator(cluster, CONFIG, last_start=lambda: 0.0, last_cycle_s=lambda: 0.0,
                        on_registration=seen.append)  # fmt: skip
    t = clock.now()
    cluster.nodes["n1"] = make_node("n1").build()
    for i in range(3):
        cluster.agent_sessions["n1"] = AgentSession(node="n1")
        ev.evaluate(t + 60 * i)
    assert seen == ["n1"] * 3
    assert names(ev) == ["HalAgentFlapping"]
    ev.evaluate(t + 2000)
    assert names(ev) == []


def test_a_removed_node_of_that_name_is_a_new_machine_not_a_flapping_agent(
    cluster: Cluster, clock: VirtualClock
) -> None:
    """The autoscaler removes an idle cloud node and makes it again for the next job:
    each registration follows the node's removal."""
    forgotten: list[str] = []
    ev = AlertEvaluator(cluster, CONFIG, last_start=lambda: 0.0, last_cycle_s=lambda: 0.0,
                        on_forgotten=forgotten.append)  # fmt: skip
    t = clock.now()
    for i in range(3):
        cluster.nodes["burst1"] = make_node("burst1").build()
        cluster.agent_sessions["burst1"] = AgentSession(node="burst1")
        ev.evaluate(t + 60 * i)
        del cluster.nodes["burst1"], cluster.agent_sessions["burst1"]  # forget_node
        ev.evaluate(t + 60 * i + 30)
    assert names(ev) == []
    assert forgotten == ["burst1"] * 3


def test_runnable_jobs_idle_cpus_and_no_start_make_a_stuck_queue(
    cluster: Cluster, clock: VirtualClock
) -> None:
    t = clock.now()
    cluster.nodes["n1"] = make_node("n1").cpus(8).build()
    cluster.put(make_job(1).submitted(t).reason(PendingReason.RESOURCES).build())
    cluster.put(make_job(2).submitted(t).reason(PendingReason.DEPENDENCY).build())
    ev = evaluator(cluster)
    ev.evaluate(t)
    assert names(ev) == []
    ev.evaluate(t + 901)
    assert names(ev) == ["HalQueueStuck"]
    assert "1 runnable job(s)" in ev.firing()[0].summary


def test_a_queue_that_moved_recently_is_not_stuck(cluster: Cluster, clock: VirtualClock) -> None:
    t = clock.now()
    cluster.nodes["n1"] = make_node("n1").cpus(8).build()
    cluster.put(make_job(1).submitted(t).reason(PendingReason.PRIORITY).build())
    ev = evaluator(cluster, last_start=t + 800)
    ev.evaluate(t)
    ev.evaluate(t + 1000)
    assert names(ev) == []


def test_a_slow_scheduling_pass_fires(cluster: Cluster) -> None:
    ev = evaluator(cluster, cycle_s=7.5)
    ev.evaluate(1.0)
    assert names(ev) == ["HalSchedulerSlow"]


def test_the_webhook_body_is_alertmanager_version_4(cluster: Cluster) -> None:
    ev = evaluator(cluster, cycle_s=7.5)
    alert = ev.evaluate(0.0)[0]
    body = webhook_payload(alert, "lab", "http://hal:8470")
    assert body["version"] == "4" and body["status"] == "firing"
    first = body["alerts"][0]  # type: ignore[index]
    assert first["labels"] == {"alertname": "HalSchedulerSlow", "severity": "warning",
                               "cluster": "lab"}  # fmt: skip
    assert first["startsAt"] == "1970-01-01T00:00:00Z"
    assert first["endsAt"] == "0001-01-01T00:00:00Z"
