"""Budgets are never passed by the autoscaler's decisions: over random queues, group
prices, account trees with budgets and spend already made, one pass's gate
(``hal.cloud.budgets``) and plan (``hal.cloud.autoscaler``) together make nodes only for
jobs whose cost, at the price of the group each new node really comes from, keeps every
budget the job falls under (its account's, an ancestor's, its QoS's) within its limit.
A limit already below what is spent makes nothing for the jobs under it."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.cloud.autoscaler import Waiting, plan_scale_up
from hal.cloud.budgets import Ask, Budget, admit, burst_price
from hal.core.cloud_costs import CloudBudget
from hal.core.node import Partition
from hal.core.node_groups import NodeGroup
from hal.core.priority import Account, PriorityPolicy, Qos
from hal.core.resources import GiB, ResourceVector
from hal.server.cloud_costs import Charge, Holders, Payer, expected_cost, spent
from hal.testing import make_job
from hal.testing.examples import examples

EVERY = (Partition(name="batch"),)
NOW = 1_790_000_000.0
ACCOUNTS = ("org", "phys", "chem")  # phys and chem under org


@st.composite
def situations(
    draw: st.DrawFn,
) -> tuple[PriorityPolicy, list[NodeGroup], list[Waiting], list[Charge]]:
    def budget() -> CloudBudget | None:
        amount = draw(st.one_of(st.none(), st.floats(0, 40).map(lambda x: round(x, 2))))
        period = draw(st.sampled_from(("day", "week", "month")))
        return None if amount is None else CloudBudget(amount, "USD", period)

    policy = PriorityPolicy(
        accounts=(
            Account("org", cloud_budget=budget()),
            Account("phys", parent="org", cloud_budget=budget()),
            Account("chem", parent="org", cloud_budget=budget()),
        ),
        qos=(Qos("normal", cloud_budget=budget()), Qos("high", priority=1)),
    )
    groups = [
        NodeGroup(
            name=f"g{i}",
            provider="local",
            nodes=tuple(f"g{i}n{k}" for k in range(draw(st.integers(1, 4)))),
            resources=ResourceVector(draw(st.sampled_from((2, 4, 8))), 16 * GiB),
            price_per_hour=draw(st.floats(0.01, 5).map(lambda x: round(x, 3))),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    waiting = []
    for job_id in range(1, draw(st.integers(1, 12)) + 1):
        spec = (
            make_job(job_id)
            .cpus(draw(st.sampled_from((1, 2, 4, 8))))
            .nodes(draw(st.integers(1, 3)))
            .account(draw(st.sampled_from(ACCOUNTS)))
            .qos(draw(st.sampled_from(("normal", "high"))))
            .build()
            .spec
        )
        waiting.append(Waiting(job_id, spec, EVERY))
    charges = [
        Charge(
            draw(st.sampled_from(ACCOUNTS)),
            "u",
            draw(st.sampled_from(("normal", "high"))),
            draw(st.floats(0, 20)),
            draw(st.one_of(st.none(), st.floats(NOW - 40 * 86400, NOW))),
        )
        for _ in range(draw(st.integers(0, 6)))
    ]
    return policy, groups, waiting, charges


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(situations(), st.lists(st.integers(1, 10), min_size=12, max_size=12))
def test_the_spend_never_passes_a_budget(
    situation: tuple[PriorityPolicy, list[NodeGroup], list[Waiting], list[Charge]],
    hours: list[int],
) -> None:
    policy, groups, waiting, charges = situation
    holders = Holders(policy)
    budgets = spent(policy, charges, NOW)
    time_of = {w.job_id: hours[w.job_id - 1] for w in waiting}
    asks = []
    for w in waiting:
        price = burst_price(w.spec, groups)
        cost = 0.0 if price is None else expected_cost(price, time_of[w.job_id], w.spec.nodes_min)
        who = Payer(w.spec.account or "", "u", w.spec.qos or "normal")
        asks.append(Ask(w.job_id, cost, holders.of(who)))
    admitted, refused = admit(asks, budgets)
    assert sorted([*admitted, *refused]) == [w.job_id for w in waiting]
    plan = plan_scale_up([w for w in waiting if w.job_id in admitted], groups, (), {})
    # what each job's new nodes will cost, at their own group's price
    price_of = {n: g.price_per_hour for g in groups for n in g.nodes}
    cost: dict[int, float] = {}
    for up in plan:
        for node, jobs in up.per_node.items():
            for job_id in jobs:
                cost[job_id] = cost.get(job_id, 0.0) + price_of[node] * time_of[job_id]
    assert not set(cost) & set(refused)
    for holder, budget in budgets.items():
        mine = [a.job_id for a in asks if holder in a.holders and a.job_id in cost]
        burst = sum(cost[j] for j in mine)
        if mine:
            assert budget.spent + burst <= budget.limit + 1e-9, (holder, budget, burst)


def test_a_limit_lowered_below_the_spend_refuses_new_bursts_only() -> None:
    """A reconfigure that lowers the budget under what is spent: nothing new is made for
    the account's jobs (the running ones are another matter: they are not touched)."""
    budgets = {"account phys": Budget("account phys", 10.0, 12.0)}
    admitted, refused = admit([Ask(1, 0.5, ("account phys",)), Ask(2, 1.0, ())], budgets)
    assert admitted == [2] and refused[1].budget.spent == 12.0
