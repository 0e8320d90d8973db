"""The hal_cloud_* series (hal.server.observe.cloudmetrics) from the autoscaler's status."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from hal.server.observe.cloudmetrics import cloud_metrics
from hal.wire.cloud import CloudGroupInfo, CloudNodeInfo, CloudStatus


def scrape(status: CloudStatus | None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    class Source(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            return cloud_metrics(status)

    registry = CollectorRegistry()
    registry.register(Source())
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def node(name: str, state: str) -> CloudNodeInfo:
    return CloudNodeInfo(node=name, instance=name, state=state, created_at=0.0)


def group(name: str, price: float, *nodes: CloudNodeInfo, **kw: object) -> CloudGroupInfo:
    return CloudGroupInfo(
        name=name,
        provider="local",
        nodes=[n.node for n in nodes] + [f"{name}-spare"],
        cpus=4,
        memory_bytes=1 << 30,
        price_per_hour=price,
        idle_seconds=300,
        boot_timeout_seconds=300,
        instances=list(nodes),
        **kw,  # type: ignore[arg-type]
    )


def test_nodes_by_state_cost_and_counters() -> None:
    burst = group(
        "burst",
        0.5,
        node("b1", "joined"),
        node("b2", "idle"),
        node("b3", "booting"),
        node("b4", "stopping"),
        created=6,
        removed=2,
        boot_failures=1,
        resting_until=123.0,
    )
    got = scrape(CloudStatus(groups=[burst, group("gpu", 3.0)]))
    for state, n in (("booting", 1), ("joined", 1), ("idle", 1), ("stopping", 1)):
        assert got[("hal_cloud_nodes", (("group", "burst"), ("state", state)))] == n
    assert got[("hal_cloud_nodes", (("group", "gpu"), ("state", "joined")))] == 0
    # the stopping node costs nothing more
    assert got[("hal_cloud_hourly_cost_dollars", (("group", "burst"),))] == 1.5
    assert got[("hal_cloud_hourly_cost_dollars", (("group", "gpu"),))] == 0
    assert got[("hal_cloud_group_resting", (("group", "burst"),))] == 1
    assert got[("hal_cloud_group_resting", (("group", "gpu"),))] == 0
    assert got[("hal_cloud_nodes_created_total", (("group", "burst"),))] == 6
    assert got[("hal_cloud_nodes_removed_total", (("group", "burst"),))] == 2
    assert got[("hal_cloud_boot_failures_total", (("group", "burst"),))] == 1


def test_no_groups_no_series() -> None:
    assert scrape(None) == {}
    assert scrape(CloudStatus()) == {}


def test_costs_by_account_and_user_and_each_budget() -> None:
    from hal.server.observe.cloudmetrics import cost_metrics
    from hal.wire.cloud import CloudBudgetInfo, CloudCost, CloudCosts

    costs = CloudCosts(
        since=0.0,
        until=1.0,
        costs=[CloudCost(account="physics", user="alice", cost=3.5, runs=2)],
        budgets=[CloudBudgetInfo(holder="QoS high", limit=50.0, period="day", since=0.0,
                                 spent=7.25)],
    )  # fmt: skip

    class Source(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            return cost_metrics(costs)

    registry = CollectorRegistry()
    registry.register(Source())
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert (
        found[("hal_cloud_cost_dollars_total", (("account", "physics"), ("user", "alice")))] == 3.5
    )
    assert found[("hal_cloud_budget_dollars", (("holder", "QoS high"), ("period", "day")))] == 50.0
    high = (("holder", "QoS high"), ("period", "day"))
    assert found[("hal_cloud_budget_spent_dollars", high)] == 7.25
    assert list(cost_metrics(None)) == []
