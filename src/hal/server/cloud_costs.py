"""What cloud capacity has cost, by account and user, and where each budget stands.

A run's cost is its rate (its cloud nodes' prices at its start, ``hal.core.cloud_costs``)
times its run time. ``charges`` gathers them from ``since`` on: the runs that ended since
(jobs from the store, and the runs requeues ended, ``job_runs``) and the cost so far of
those running (from the mirror, read first, so a job ending meanwhile counts twice
rather than not at all: a budget errs on the safe side). A run counts in the period it
ends in; a running one in the current period. ``hal cloud costs``, ``/metrics`` and the
autoscaler's budget gate read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hal.cloud.budgets import Budget
from hal.core.cloud_costs import RATE, CloudBudget, period_start, rate_of, run_cost
from hal.core.job import Job
from hal.core.priority import DEFAULT_QOS, PriorityPolicy, account_chains, charged_account
from hal.core.states import JobState
from hal.state.cluster import Cluster
from hal.wire.cloud import CloudBudgetInfo, CloudCost, CloudCosts


@dataclass(frozen=True, slots=True)
class Charge:
    """One run's cost, charged to its account, user and QoS."""

    account: str
    user: str
    qos: str
    cost: float
    end: float | None  # None: still running (its cost so far)
    run: tuple[int, int] = (0, 0)  # (job id, its restarts then): one charge per run


@dataclass(frozen=True, slots=True)
class Payer:
    """Who pays a job's cloud cost: the account charged, its user and QoS."""

    account: str
    user: str
    qos: str


def payer(job: Job, policy: PriorityPolicy) -> Payer:
    known = {a.name for a in policy.accounts}
    defaults = {u.user: u.account for u in policy.users if u.default}
    account = charged_account(job.spec.account, job.spec.user, known, defaults)
    return Payer(account, job.spec.user, job.spec.qos or DEFAULT_QOS)


def running_charges(cluster: Cluster, now: float) -> list[Charge]:
    policy = cluster.config.priority
    out = []
    for job in cluster.unfinished.values():
        if job.state is JobState.PENDING or job.start_time is None or RATE not in job.extra:
            continue
        who = payer(job, policy)
        cost = run_cost(rate_of(job.extra), job.start_time, now)
        out.append(Charge(who.account, who.user, who.qos, cost, None, (job.id, job.restarts)))
    return out


async def charges(cluster: Cluster, since: float) -> list[Charge]:
    """The runs' costs from ``since`` on (module docstring), read afresh."""
    return await Ledger().current(cluster, since)


async def ended_charges(cluster: Cluster, since: float) -> list[Charge]:
    """The runs that ended at or after ``since``, from the store."""
    policy = cluster.config.priority
    out: list[Charge] = []
    jobs, runs = await cluster.db(cluster.store.priced_since, since)
    for job in jobs:
        if job.end_time is None:
            continue
        who = payer(job, policy)
        cost = run_cost(rate_of(job.extra), job.start_time, job.end_time)
        run = (job.id, job.restarts)
        out.append(Charge(who.account, who.user, who.qos, cost, job.end_time, run))
    known = {j.id: j for j in jobs} | dict(cluster.jobs)
    missing = sorted({r.job_id for r in runs} - set(known))
    if missing:
        known |= {j.id: j for j in await cluster.db(cluster.store.jobs_by_id, missing)}
    for row in runs:
        owner = known.get(row.job_id)
        if owner is not None:
            who = payer(owner, policy)
            key = (row.job_id, row.attempt)
            out.append(Charge(who.account, who.user, who.qos, row.cost, row.end_time, key))
    return out


# a run ended this long before a reading may reach the store after it (the commit is
# under way): each reading goes back this far, and what it finds again counts once
OVERLAP_S = 300.0


class Ledger:
    """The runs ended since a start (the earliest budget period's), kept between passes:
    each pass reads only what ended since its last reading (``refresh``), so the budget
    gate and ``/metrics`` cost one small query a pass, not a month of jobs."""

    def __init__(self) -> None:
        self.since = -1.0
        self.read_to = 0.0
        self.ended: dict[tuple[int, int], Charge] = {}
        self.latest: list[Charge] = []  # what the last ``current`` found (``/metrics``)

    async def current(self, cluster: Cluster, since: float) -> list[Charge]:
        """Every run's charge since ``since``: the running ones read before the store,
        so that a run ending meanwhile is found as one or the other (or both: once)."""
        running = running_charges(cluster, cluster.clock.now())
        await self.refresh(cluster, since)
        self.latest = [*self.ended.values(), *(c for c in running if c.run not in self.ended)]
        return self.latest

    async def refresh(self, cluster: Cluster, since: float) -> None:
        now = cluster.clock.now()
        if since != self.since:  # the first reading, or a new period
            self.ended = {c.run: c for c in await ended_charges(cluster, since)}
        else:
            found = await ended_charges(cluster, max(since, self.read_to - OVERLAP_S))
            self.ended.update((c.run, c) for c in found)
        self.since, self.read_to = since, now


def budgets_of(policy: PriorityPolicy) -> dict[str, tuple[CloudBudget, str, str]]:
    """holder → (budget, "account"/"qos", name) of every configured ``cloud_budget``."""
    out: dict[str, tuple[CloudBudget, str, str]] = {}
    for account in policy.accounts:
        if account.cloud_budget is not None:
            out[f"account {account.name}"] = (account.cloud_budget, "account", account.name)
    for qos in policy.qos:
        if qos.cloud_budget is not None:
            out[f"QoS {qos.name}"] = (qos.cloud_budget, "qos", qos.name)
    return out


class Holders:
    """The budgets a job's burst counts against: its account's and every ancestor's
    that has one, then its QoS's."""

    def __init__(self, policy: PriorityPolicy) -> None:
        self.policy = policy
        self.chains = account_chains(policy.accounts, lambda a: a.cloud_budget is not None)
        self.qos = {q.name for q in policy.qos if q.cloud_budget is not None}

    def of(self, who: Payer) -> tuple[str, ...]:
        names = [f"account {a}" for a in self.chains.get(who.account, ())]
        if who.qos in self.qos:
            names.append(f"QoS {who.qos}")
        return tuple(names)


def earliest_start(policy: PriorityPolicy, now: float) -> float:
    """The earliest start of this month's and each budget's period (what the ledger
    keeps)."""
    starts = [period_start(b.period, now) for b, _, _ in budgets_of(policy).values()]
    return min([period_start("month", now), *starts])


def spent(
    policy: PriorityPolicy,
    found: Iterable[Charge],
    now: float,
    committed: Mapping[str, float] | None = None,
) -> dict[str, Budget]:
    """holder → its budget with what its period's charges (and ``committed``) come to."""
    holders = Holders(policy)
    configured = budgets_of(policy)
    sums = dict.fromkeys(configured, 0.0)
    starts = {h: period_start(b.period, now) for h, (b, _, _) in configured.items()}
    for charge in found:
        for holder in holders.of(Payer(charge.account, charge.user, charge.qos)):
            if charge.end is None or charge.end >= starts[holder]:
                sums[holder] += charge.cost
    extra = committed or {}
    return {
        h: Budget(h, b.amount, sums[h] + extra.get(h, 0.0), b.period)
        for h, (b, _, _) in configured.items()
    }


def expected_cost(price: float, hours: float | None, nodes: int) -> float:
    """What a burst of ``nodes`` nodes at ``price`` an hour for ``hours`` costs
    (infinity: its run time is not known)."""
    if hours is None or not math.isfinite(hours):
        return math.inf
    return price * hours * nodes


def report(
    policy: PriorityPolicy,
    found: Sequence[Charge],
    since: float,
    now: float,
    committed: Mapping[str, float],
    waiting: Callable[[str], int],
) -> CloudCosts:
    """``hal cloud costs``: per account and user since ``since``; every budget."""
    rows: dict[tuple[str, str], list[Charge]] = {}
    for charge in found:
        if charge.end is None or charge.end >= since:
            rows.setdefault((charge.account, charge.user), []).append(charge)
    costs = [
        CloudCost(
            account=account,
            user=user,
            cost=round(sum(c.cost for c in got), 6),
            runs=len(got),
            running=sum(1 for c in got if c.end is None),
        )
        for (account, user), got in sorted(rows.items())
    ]
    budgets = [
        CloudBudgetInfo(
            holder=holder,
            limit=budget.limit,
            period=budget.period,
            since=period_start(budget.period, now),
            spent=round(budget.spent, 6),
            committed=round(committed.get(holder, 0.0), 6),
            waiting=waiting(holder),
        )
        for holder, budget in spent(policy, found, now).items()
    ]
    return CloudCosts(
        since=since,
        until=now,
        total=round(sum(c.cost for c in costs), 6),
        costs=costs,
        budgets=budgets,
    )
