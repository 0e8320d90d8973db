"""The ``hal_cloud_*`` series: the autoscaler's nodes by group and state, what it made,
removed and failed to start, what its running nodes cost an hour, what jobs cost this
month by account and user, and where each ``cloud_budget`` stands. Read from
``hal.server.cloud.CloudService.status`` and ``month_costs`` at each scrape (the costs
as the autoscaler's last pass found them); nothing without [cloud] groups."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hal.wire.cloud import CloudCosts, CloudStatus

STATES = ("booting", "joined", "idle", "stopping")


def cloud_metrics(status: CloudStatus | None) -> Iterable[Metric]:
    if status is None or not status.groups:
        return
    nodes = GaugeMetricFamily(
        "hal_cloud_nodes",
        "Nodes the autoscaler made, by group and state (booting: its agent has not joined).",
        labels=["group", "state"],
    )
    cost = GaugeMetricFamily(
        "hal_cloud_hourly_cost_dollars",
        "What the group's nodes not being removed cost an hour, at its current price.",
        labels=["group"],
    )
    resting = GaugeMetricFamily(
        "hal_cloud_group_resting",
        "1 while a group makes no nodes after a failure (a node that did not join, or a "
        "provider's refusal).",
        labels=["group"],
    )
    counters = {
        name: CounterMetricFamily(f"hal_cloud_{name}", text, labels=["group"])
        for name, text in (
            ("nodes_created", "Nodes created since the server started."),
            ("nodes_removed", "Nodes removed since the server started (idle, or failed)."),
            ("boot_failures", "Nodes whose agent did not join within boot_timeout_seconds."),
        )
    }
    for g in status.groups:
        states = Counter(i.state for i in g.instances)
        for state in STATES:
            nodes.add_metric([g.name, state], states[state])
        live = len(g.instances) - states["stopping"]
        cost.add_metric([g.name], live * g.price_per_hour)
        resting.add_metric([g.name], 0 if g.resting_until is None else 1)
        counters["nodes_created"].add_metric([g.name], g.created)
        counters["nodes_removed"].add_metric([g.name], g.removed)
        counters["boot_failures"].add_metric([g.name], g.boot_failures)
    yield nodes
    yield cost
    yield resting
    yield from counters.values()


def cost_metrics(costs: CloudCosts | None) -> Iterable[Metric]:
    if costs is None:
        return
    total = CounterMetricFamily(
        "hal_cloud_cost_dollars",
        "What jobs' cloud nodes cost this month (UTC; it starts again at 0 each month), "
        "by account and user: the runs ended, and so far of those running.",
        labels=["account", "user"],
    )
    for c in costs.costs:
        total.add_metric([c.account, c.user], c.cost)
    yield total
    limit = GaugeMetricFamily(
        "hal_cloud_budget_dollars",
        "A cloud_budget's limit for its period, by holder (account NAME or QoS NAME).",
        labels=["holder", "period"],
    )
    spent = GaugeMetricFamily(
        "hal_cloud_budget_spent_dollars",
        "What a cloud_budget's period has spent so far (committed bursts not included).",
        labels=["holder", "period"],
    )
    for b in costs.budgets:
        limit.add_metric([b.holder, b.period], b.limit)
        spent.add_metric([b.holder, b.period], b.spent)
    yield limit
    yield spent
