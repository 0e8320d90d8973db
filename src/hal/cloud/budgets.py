"""The budget gate, as a pure function: which waiting jobs may have new nodes made for
them without their account's (an ancestor's, their QoS's) ``cloud_budget`` being passed.

``hal.server.cloud`` calls it each pass before ``hal.cloud.autoscaler.plan_scale_up``:
a budget's ``spent`` is what its period's runs cost so far plus what the nodes already
being made for waiting jobs are expected to cost; each job, in priority order, is
admitted only if its own expected cost (price × expected run time × nodes) keeps every
one of its budgets within its limit, and what it is admitted for counts against them
for the jobs after it. A job refused waits (``CloudBudget``) and still starts on owned
nodes; a job whose cost is unknown (no time limit, nothing predicted) is refused by any
budget it falls under. Lowering a limit below what is spent refuses new bursts only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hal.cloud.autoscaler import holds
from hal.core.job import JobSpec
from hal.core.node_groups import NodeGroup


@dataclass(frozen=True, slots=True)
class Budget:
    holder: str  # what it belongs to, as people read it: "account physics", "QoS high"
    limit: float  # in hal.core.cloud_costs.CURRENCY
    spent: float  # in its period so far, the nodes being made for jobs included
    period: str = "month"


@dataclass(frozen=True, slots=True)
class Ask:
    """A waiting job's burst: what its new nodes would cost, and the budgets (their
    ``holder``) it counts against."""

    job_id: int
    cost: float  # infinity: not known
    holders: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Refusal:
    budget: Budget  # the first budget it would pass, with what was spent before it
    cost: float


def burst_price(spec: JobSpec, groups: Sequence[NodeGroup]) -> float | None:
    """The price an hour a budget reckons each of a job's new nodes at: the dearest group
    that holds it, so that whichever group the autoscaler opens (the cheapest may have no
    names left) the burst costs no more than admitted. None: no group holds it."""
    prices = [g.price_per_hour for g in groups if holds(spec, g.template(g.name))]
    return max(prices) if prices else None


def admit(
    asks: Iterable[Ask], budgets: Mapping[str, Budget]
) -> tuple[list[int], dict[int, Refusal]]:
    """(admitted job ids in order, refused job → why). ``asks`` in priority order."""
    used = {name: b.spent for name, b in budgets.items()}
    admitted: list[int] = []
    refused: dict[int, Refusal] = {}
    for ask in asks:
        over = [h for h in ask.holders if not used[h] + ask.cost <= budgets[h].limit]
        if over:
            budget = budgets[over[0]]
            seen = Budget(budget.holder, budget.limit, used[over[0]], budget.period)
            refused[ask.job_id] = Refusal(seen, ask.cost)
            continue
        for holder in ask.holders:
            used[holder] += ask.cost
        admitted.append(ask.job_id)
    return admitted, refused
