"""The server's side of the compute control plane: the autoscaler's loop.

Each pass (``[cloud] interval_seconds``) lists every group's instances from its
provider, then:

- an instance whose agent has not joined within the group's ``boot_timeout_seconds``
  is removed, and the group rests as long, twice as long after each failure in a row
  (at most an hour; Slurm's ResumeTimeout);
- a second instance for one node name is removed (the older one is kept);
- a joined node without a job for its group's ``idle_seconds`` is drained, removed
  from its provider and forgotten (Slurm's SuspendTime), unless an operator drained or
  downed it;
- a node of a group whose instance is gone, and whose agent no longer answers, is
  forgotten (its jobs ended NODE_FAIL, requeued where they may be, when the agent went
  silent: ``agents.check_nodes``);
- a node drained by its provider's interruption notice (``hal.state.interruptions``) is
  removed and forgotten as soon as its jobs are gone;
- the waiting jobs, in priority order, are packed into booting nodes and, where they
  do not fit and their expected start on the capacity there is later than a group's
  boot + their patience (``hal.cloud.burst``), into new nodes of the group where they
  are expected to cost least to finish (``hal.cloud.autoscaler``), at each group's
  current price; a job whose burst would pass its account's (an ancestor's, its
  QoS's) ``cloud_budget`` gets none and waits with reason ``CloudBudget``
  (``hal.cloud.budgets``); a group whose provider refuses (no capacity, or an error)
  rests, and its jobs are packed again, in the same pass, into the other groups.

A group whose provider fails or does not answer (a listing, a creation or a removal
raises ``ProviderError`` other than a capacity error) is unhealthy, with the reason in
``hal cloud``, and rests (the alert ``HalCloudGroupResting``) until a listing succeeds;
bursting goes to the other groups meanwhile.

Every ``price_interval_seconds`` the groups whose provider publishes prices
(``PricedProvider``) have them read; a price that cannot be read keeps the last one,
and the error shows in ``hal cloud prices``. Jobs starting from then on are charged the
new price (``Cluster.set_cloud_price``).

Nothing is remembered between passes that the providers and the cluster do not say
again, except how long each node has been idle and which groups rest; a restarted
server starts those afresh. Provider calls block and run in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

from hal.cloud.autoscaler import ScaleUp, Waiting, holds, idle_to_remove, plan_scale_up
from hal.cloud.budgets import Ask, Refusal, admit, burst_price
from hal.cloud.burst import Decision, decide, offer, patience
from hal.cloud.provider import (
    STOPPING,
    Instance,
    Launch,
    Price,
    PricedProvider,
    Provider,
    ProviderError,
)
from hal.cloud.providers import make_provider
from hal.config.cloud import CloudConfig
from hal.core.cloud_costs import CURRENCY, money, period_start
from hal.core.data import GB, DataView
from hal.core.errors import InvalidRequest
from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.node_groups import NodeGroup
from hal.core.resources import ResourceVector
from hal.core.states import JobState, NodeState, PendingReason
from hal.host.tls import ca_file
from hal.server import cloud_costs
from hal.server.cloud_costs import Holders, expected_cost, payer
from hal.server.cloud_token import agent_token, bind_nodes
from hal.server.room import job_partitions, nodes_with_room
from hal.state.advisory import set_pending_reasons
from hal.state.agents import forget_node, set_node_state
from hal.state.cluster import Cluster
from hal.state.interruptions import INTERRUPTION_REASON, REBALANCE_REASON
from hal.state.node_reasons import NOT_RESPONDING, server_user, set_down_by_operator
from hal.state.store import EventRow
from hal.wire.cloud import (
    CloudCosts,
    CloudGroupInfo,
    CloudNodeInfo,
    CloudPrice,
    CloudPrices,
    CloudStatus,
)
from hal.wire.priority import BurstInfo, BurstOffer

log = logging.getLogger(__name__)

# the reasons of a job waiting for nodes: no node has room, or none joined is big enough
# (not WaitingForScheduling: a job the scheduler has not looked at yet may start on a
# node that has room at its next pass, and a node made for it would go to waste)
DEMAND = {
    PendingReason.NONE,
    PendingReason.PRIORITY,
    PendingReason.RESOURCES,
    PendingReason.BAD_CONSTRAINTS,
    PendingReason.CLOUD_BUDGET,  # (this loop's own: looked at again each pass)
}
IDLE_REASON = "cloud: idle, being removed"
RETIRED_REASON = "cloud: group {group} left [cloud], being removed"
MAX_REST_S = 3600.0  # the longest a failing group rests
# with --signal a job checkpoints at an interruption's notice (EC2 gives two minutes):
# it loses up to that much of its run
NOTICE_S = 120.0
# a job's run time for its costs when nothing was learnt and it has no time limit
UNKNOWN_RUNTIME_S = 3600.0


@dataclass(slots=True)
class GroupState:
    """What the last pass saw of a group, for ``GET /v1/cloud`` and ``hal cloud``."""

    instances: list[Instance] = field(default_factory=list)
    resting_until: float = 0.0
    error: str = ""  # the last failure since the server started (kept until the next)
    created: int = 0  # nodes created since the server started
    removed: int = 0
    boot_failures: int = 0
    failing: int = 0  # boot failures since a node of the group last joined
    # how long its nodes took to join, on average (None: none seen since the start)
    boot_observed: float | None = None
    # its provider failed or did not answer (not a capacity answer): the reason, and
    # since when; cleared by the next listing that succeeds
    unhealthy: str = ""
    unhealthy_since: float = 0.0

    def failed(self, error: str, now: float, capacity: bool = False) -> None:
        """The provider failed: ``error`` is kept; unhealthy unless it only lacked
        capacity (it answered, and may have room later)."""
        self.error = error
        if not capacity:
            self.unhealthy_since = self.unhealthy_since if self.unhealthy else now
            self.unhealthy = error


@dataclass(slots=True)
class GroupPrice:
    """A group's price as the autoscaler uses it: its provider's latest, else its
    configured ``price_per_hour``."""

    price: Price
    error: str = ""  # the last reading failed (the price is the one before)


@dataclass(slots=True)
class Retiring:
    """A group taken out of ``[cloud]`` (``scontrol reconfigure``) whose instances are not
    all gone yet: its provider, kept to remove them, and what the last pass saw."""

    group: NodeGroup
    provider: Provider
    state: GroupState = field(default_factory=GroupState)


class CloudService:
    def __init__(
        self,
        cluster: Cluster,
        config: CloudConfig,
        providers: Mapping[str, Provider],
        url: str,
        token: str,
    ) -> None:
        self.cluster = cluster
        self.url = url  # the server's own, for nodes where [cloud] names no server_url
        self.token = token  # CLOUD_AGENT's, the nodes join with it
        self.config = config
        self.providers = dict(providers)
        self.idle_since: dict[str, float] = {}
        self.groups = {g.name: GroupState() for g in config.groups}
        self._by_name = {g.name: g for g in config.groups}
        # groups taken out of [cloud] whose nodes are being removed
        self.retiring: dict[str, Retiring] = {}
        self.started_at = cluster.clock.now()
        self._strangers: set[str] = set()  # group names taken by agents it did not start
        # node → the jobs it was made for (``hal explain``); since the server started
        self.made_for: dict[str, tuple[int, ...]] = {}
        # drops the token's cached caller once its nodes changed (the server's TokenCache)
        self.forget_token: Callable[[], None] = lambda: None
        self.prices = {g.name: self._configured(g) for g in config.groups}
        self.prices_read_at = -float("inf")  # read at the first pass
        # a job's expected run time (the predictor's, seconds; None: none), for budgets
        # and the burst decision
        self.estimate: Callable[[Job], float | None] = lambda job: None
        # waiting jobs kept from new nodes by a budget, and why (``hal explain``)
        self.held: dict[int, Refusal] = {}
        # budget holder → what the nodes being made for waiting jobs will cost (last pass)
        self.committed: dict[str, float] = {}
        self.ledger = cloud_costs.Ledger()  # the runs' costs this period (each pass)
        # the data plane's view, for the burst decision; set by the control plane
        self.data_view: Callable[[], DataView | None] = lambda: None
        # the last pass's burst decision of each waiting job (``hal explain``)
        self.decisions: dict[int, Decision] = {}
        self._timed: set[str] = set()  # instance ids whose join time was counted
        # the scheduler's bf_interval (None: no backfill stage, so no forecast), and when
        # this loop first saw each job waiting
        self.backfill_every: Callable[[], float | None] = lambda: 30.0
        self._waiting_since: dict[int, float] = {}

    def launch(self) -> Launch:
        """What new nodes join with; an https server's CA goes with it (``[cloud]
        ca_file``, else the server's ``HAL_CA_FILE``), read at each launch so a renewed CA
        is the one sent. One that cannot be read is logged and left out: the node may
        trust the CA through its image."""
        url = self.config.server_url or self.url
        ca_pem = ""
        path = ca_file(self.config.ca_file or None)
        if path and "https://" in url:
            try:
                ca_pem = Path(path).read_text()
            except OSError as err:
                log.warning("cloud: cannot read the CA %s for new nodes: %s", path, err)
        return Launch(url, self.token, ca_pem)

    def configure(self, config: CloudConfig, providers: Mapping[str, Provider]) -> None:
        """Take a new ``[cloud]`` (``scontrol reconfigure``; ``providers``: its groups',
        made and checked by ``cloud_providers``). A group taken out retires: its nodes
        are drained, and each is removed once it has no job (``_retire``). A group that
        stays keeps what the passes saw of it; one put back before its nodes were gone
        takes them back."""
        names = {g.name for g in config.groups}
        for group in self.config.groups:
            if group.name not in names:
                kept = Retiring(group, self.providers[group.name], self.groups[group.name])
                self.retiring[group.name] = kept
        for name in names:
            self.retiring.pop(name, None)
        self.groups = {g.name: self.groups.get(g.name) or GroupState() for g in config.groups}
        self.config = config
        self.providers = dict(providers)
        self._by_name = {g.name: g for g in config.groups}
        before = self.prices
        self.prices = {g.name: self._configured(g) for g in config.groups}
        for group in config.groups:  # a published price stays: the next reading is due
            last = before.get(group.name)
            if last and last.price.source != "config" and _priced(providers[group.name]):
                self.prices[group.name] = last
                self.cluster.set_cloud_price(group.nodes, last.price.price_per_hour)
        self.prices_read_at = -float("inf")

    def _configured(self, group: NodeGroup) -> GroupPrice:
        return GroupPrice(Price(group.name, group.price_per_hour, "config", self.started_at))

    def price(self, group: NodeGroup) -> float:
        """The group's price an hour now (its provider's latest, else its configured)."""
        found = self.prices.get(group.name)
        return group.price_per_hour if found is None else found.price.price_per_hour

    async def read_prices(self) -> None:
        """Each group whose provider publishes prices: its price read (in a worker
        thread); one that cannot be read keeps the last, with the error."""
        self.prices_read_at = self.cluster.clock.now()
        for group in self.config.groups:
            provider = self.providers[group.name]
            if not _priced(provider):
                continue
            found = self.prices[group.name]
            try:
                listed = await asyncio.to_thread(cast(PricedProvider, provider).prices)
                mine = [p for p in listed if p.group == group.name]
                if not mine:
                    raise ProviderError("it published no price for the group")
            except ProviderError as err:
                found.error = f"reading its price: {err}"
                log.warning("cloud group %s: %s", group.name, found.error)
                continue
            # the latest it gave; of several at once (zones), the highest: a budget errs safe
            latest = max(mine, key=lambda p: (p.observed_at, p.price_per_hour))
            self.prices[group.name] = GroupPrice(latest)
            self.cluster.set_cloud_price(group.nodes, latest.price_per_hour)

    def price_list(self) -> CloudPrices:
        now = self.cluster.clock.now()
        return CloudPrices(
            price_interval_seconds=self.config.price_interval_seconds,
            prices=[
                CloudPrice(
                    group=name,
                    price_per_hour=p.price.price_per_hour,
                    currency=p.price.currency,
                    source=p.price.source,
                    observed_at=p.price.observed_at,
                    age_seconds=max(0.0, now - p.price.observed_at),
                    error=p.error,
                )
                for name, p in self.prices.items()
            ],
        )

    async def costs(self, since: float | None) -> CloudCosts:
        """``hal cloud costs``: since ``since`` (None: the start of this month, UTC)."""
        now = self.cluster.clock.now()
        policy = self.cluster.config.priority
        start = period_start("month", now) if since is None else since
        earliest = cloud_costs.earliest_start(policy, now)
        if start >= earliest:  # what the passes keep
            found = await self.ledger.current(self.cluster, earliest)
        else:
            found = await cloud_costs.charges(self.cluster, start)
        held = [r.budget.holder for r in self.held.values()]
        return cloud_costs.report(policy, found, start, now, self.committed, held.count)

    def month_costs(self) -> CloudCosts:
        """This month's costs and the budgets, as the last pass found them (``/metrics``)."""
        now = self.cluster.clock.now()
        held = [r.budget.holder for r in self.held.values()]
        return cloud_costs.report(
            self.cluster.config.priority,
            self.ledger.latest,
            period_start("month", now),
            now,
            self.committed,
            held.count,
        )

    def budget_wait(self, job_id: int) -> str:
        """Why a job gets no new nodes (``hal explain``); "" where no budget holds it."""
        refusal = self.held.get(job_id)
        if refusal is None:
            return ""
        b = refusal.budget
        cost = (
            "of unknown cost (give it a --time)"
            if refusal.cost == float("inf")
            else (f"would cost about {money(refusal.cost)} {CURRENCY}")
        )
        return (
            f"[cloud] makes no nodes for it: {b.holder}'s cloud_budget is {money(b.limit)} "
            f"{CURRENCY}/{b.period}, {money(b.spent)} spent or committed this {b.period}, "
            f"and its nodes {cost}; it starts on owned nodes when they free up"
        )

    def agent_nodes(self) -> list[str]:
        """The node names the nodes' token serves: every group's, the retiring too (their
        agents report their last jobs' ends)."""
        groups = [*self.config.groups, *(r.group for r in self.retiring.values())]
        return sorted({n for g in groups for n in g.nodes})

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if await self.cluster.database_ok():
                    await self.step()
            except Exception:
                log.exception("the autoscaler's pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.interval_seconds)

    async def step(self) -> None:
        if self.cluster.clock.now() - self.prices_read_at >= self.config.price_interval_seconds:
            await self.read_prices()
        policy = self.cluster.config.priority
        now = self.cluster.clock.now()
        await self.ledger.current(self.cluster, cloud_costs.earliest_start(policy, now))
        listed = await self._list()
        booting: dict[str, str] = {}
        joined: dict[str, str] = {}
        for name, instances in listed.items():
            group = self._by_name.get(name)
            if group is None:  # a reconfigure took it out while this pass listed it
                continue  # (``_retire_groups`` drains and removes its nodes)
            names = set(group.nodes)
            b, j = await self._sort(group, [i for i in instances if i.node in names])
            booting.update(b)
            joined.update(j)
            # names the group no longer has (a reconfigure shortened its list)
            await self._retire(group, [i for i in instances if i.node not in names])
            await self._forget_lost(group, instances)
            for gone in await self._remove_interrupted(group, j):
                joined.pop(gone, None)
        await self._retire_groups()
        await self._scale_down(joined)
        await self._scale_up(listed, self._spare(booting, joined))

    def _spare(
        self, booting: Mapping[str, str], joined: Mapping[str, str]
    ) -> dict[str, tuple[str, ResourceVector]]:
        """node → (group, room) of the group nodes made: a booting node's whole size,
        a joined schedulable node's room left (a job that fits it still waits only
        until the scheduler's next pass)."""
        spare = {n: (g, self._group(g).resources) for n, g in booting.items()}
        for node, group in joined.items():
            current = self.cluster.nodes.get(node)
            usage = self.cluster.usage.get(node)
            if current is None or not current.schedulable or (usage and usage.exclusive):
                continue
            used = usage.allocated if usage else ResourceVector()
            spare[node] = (group, current.resources - used)
        return spare

    def stop_local_nodes(self) -> None:
        """Stop the local provider's agent processes (``hal up`` does as it stops: its
        nodes are this machine's processes, and end with it). Blocks."""
        groups = [(g, self.providers[g.name]) for g in self.config.groups]
        for group, provider in [*groups, *((r.group, r.provider) for r in self.retiring.values())]:
            if group.provider == "local":
                provider.remove(provider.instances())

    def status(self) -> CloudStatus:
        now = self.cluster.clock.now()
        return CloudStatus(
            interval_seconds=self.config.interval_seconds,
            pending_seconds=self.config.pending_seconds,
            groups=[
                *(self._group_info(g, self.groups[g.name], now) for g in self.config.groups),
                *(self._group_info(r.group, r.state, now, True) for r in self.retiring.values()),
            ],
        )

    def _group_info(
        self, group: NodeGroup, state: GroupState, now: float, retiring: bool = False
    ) -> CloudGroupInfo:
        return CloudGroupInfo(
            name=group.name,
            provider=group.provider,
            nodes=list(group.nodes),
            cpus=group.resources.cpus,
            memory_bytes=group.resources.memory_bytes,
            gpus=group.resources.gpus,
            gpu_type=group.gpu_model,
            features=list(group.features),
            price_per_hour=self.price(group),
            idle_seconds=group.idle_seconds,
            boot_timeout_seconds=group.boot_timeout_seconds,
            instances=[self._node_info(i) for i in state.instances],
            resting_until=state.resting_until if state.resting_until > now else None,
            last_error=state.error,
            healthy=not state.unhealthy,
            unhealthy_since=state.unhealthy_since if state.unhealthy else None,
            created=state.created,
            removed=state.removed,
            boot_failures=state.boot_failures,
            retiring=retiring,
        )

    def _node_info(self, inst: Instance) -> CloudNodeInfo:
        idle = self.idle_since.get(inst.node)
        if inst.state == STOPPING:
            state = "stopping"
        elif not self._joined(inst):
            state = "booting"
        else:
            state = "joined" if idle is None else "idle"
        return CloudNodeInfo(
            node=inst.node,
            instance=inst.id,
            state=state,
            created_at=inst.created_at,
            idle_since=idle,
        )

    def making_for(self, job_id: int) -> list[tuple[str, str, float]]:
        """(node, group, when asked) of each node being made for the job: created for
        it, its agent not heard from yet (``hal explain``)."""
        return [
            (inst.node, name, inst.created_at)
            for name, state in self.groups.items()
            for inst in state.instances
            if inst.state != STOPPING
            and job_id in self.made_for.get(inst.node, ())
            and not self._joined(inst)
        ]

    def _joined(self, inst: Instance) -> bool:
        """Its agent has been heard from since the instance began."""
        session = self.cluster.agent_sessions.get(inst.node)
        return session is not None and session.last_seen >= inst.created_at

    def _group(self, name: str) -> NodeGroup:
        return self._by_name[name]

    async def _list(self) -> dict[str, list[Instance]]:
        listed: dict[str, list[Instance]] = {}
        for group in self.config.groups:
            state = self.groups[group.name]
            try:
                found = await asyncio.to_thread(self.providers[group.name].instances)
            except ProviderError as err:
                now = self.cluster.clock.now()
                state.failed(f"listing instances: {err}", now, err.capacity)
                state.resting_until = max(
                    state.resting_until, now + max(2 * self.config.interval_seconds, 120.0)
                )
                log.warning("cloud group %s: %s", group.name, state.error)
                continue
            state.instances = found
            state.unhealthy = ""  # it answers
            listed[group.name] = found
        return listed

    async def _sort(
        self, group: NodeGroup, instances: list[Instance]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """(booting, joined): node → group; removes second instances of a name and
        instances that did not join in time."""
        now = self.cluster.clock.now()
        seen: set[str] = set()
        booting: dict[str, str] = {}
        joined: dict[str, str] = {}
        doomed: list[Instance] = []
        for inst in sorted(instances, key=lambda i: (i.created_at, i.id)):
            if inst.state == STOPPING:
                continue
            if inst.node in seen:
                doomed.append(inst)
                continue
            seen.add(inst.node)
            node = self.cluster.nodes.get(inst.node)
            if self._joined(inst):
                joined[inst.node] = group.name
                self.groups[group.name].failing = 0
                self._time_join(group, inst, now)
            elif node is not None and node.last_heartbeat >= inst.created_at:
                # it joined, and its agent is silent: a restarted server's node not yet
                # back, or a dead one, removed once down past the group's boot timeout
                if _down_since(node) + group.boot_timeout_seconds < now:
                    doomed.append(inst)
                    await self._event("cloud.node_lost", inst.node, group, instance=inst.id)
            elif max(inst.created_at, self.started_at) + group.boot_timeout_seconds < now:
                doomed.append(inst)  # (the boot clock starts again with the server)
                await self._boot_failed(group, inst, now)
            else:
                booting[inst.node] = group.name
        if doomed:
            await self._remove(group, doomed)
        return booting, joined

    def _time_join(self, group: NodeGroup, inst: Instance, now: float) -> None:
        """Counts how long a node made since the server started took to join (the first
        pass that sees it joined: up to an interval late) into its group's boot time."""
        if inst.id in self._timed or inst.created_at < self.started_at:
            return
        if len(self._timed) > 10_000:
            self._timed.clear()  # (ids of long-gone instances; a few may be counted twice)
        self._timed.add(inst.id)
        state = self.groups[group.name]
        took = max(now - inst.created_at, 0.0)
        old = state.boot_observed
        state.boot_observed = took if old is None else 0.7 * old + 0.3 * took

    async def _boot_failed(self, group: NodeGroup, inst: Instance, now: float) -> None:
        """The group rests its boot timeout, twice as long after each failure in a row
        (at most an hour), as the cluster autoscaler backs off a failing node group."""
        state = self.groups[group.name]
        state.boot_failures += 1
        state.failing += 1
        rest = min(group.boot_timeout_seconds * 2 ** (state.failing - 1), MAX_REST_S)
        state.resting_until = now + rest
        state.error = (
            f"node {inst.node} (instance {inst.id}) did not join within "
            f"{group.boot_timeout_seconds:g} s; the group makes no nodes for {rest:g} s"
        )
        log.warning("cloud group %s: %s", group.name, state.error)
        await self._event("cloud.boot_failed", inst.node, group, instance=inst.id)

    def _parts(self, name: str) -> tuple[Provider, GroupState]:
        """A group's provider and state, a retiring one's too."""
        if name in self.retiring:
            return self.retiring[name].provider, self.retiring[name].state
        return self.providers[name], self.groups[name]

    async def _remove(self, group: NodeGroup, instances: Sequence[Instance]) -> bool:
        provider, state = self._parts(group.name)
        try:
            await asyncio.to_thread(provider.remove, instances)
        except ProviderError as err:
            state.failed(f"removing instances: {err}", self.cluster.clock.now(), err.capacity)
            log.warning("cloud group %s: %s", group.name, state.error)
            return False
        state.removed += len(instances)
        gone = {i.id for i in instances}  # stopping until the next listing says otherwise
        state.instances = [
            replace(i, state=STOPPING) if i.id in gone else i for i in state.instances
        ]
        return True

    async def _retire_groups(self) -> None:
        """Each pass, the groups taken out of ``[cloud]``: their instances removed as
        their nodes free up; a group is forgotten once none is left, and the nodes'
        token stops serving its names."""
        for name, retiring in list(self.retiring.items()):
            try:
                found = await asyncio.to_thread(retiring.provider.instances)
            except ProviderError as err:
                retiring.state.error = f"listing instances: {err}"
                log.warning("cloud group %s (retiring): %s", name, retiring.state.error)
                continue
            retiring.state.instances = found
            await self._retire(retiring.group, found)
            await self._forget_lost(retiring.group, found)
            if not found:
                del self.retiring[name]
                log.info("cloud group %s: its last node is gone", name)
                await self.rebind()

    async def _retire(self, group: NodeGroup, instances: Sequence[Instance]) -> None:
        """Instances whose names no group of ``[cloud]`` has any more: each node drained
        (it takes no new job) and, once it runs none, removed and forgotten."""
        doomed = []
        for inst in instances:
            if inst.state == STOPPING:
                continue
            node = self.cluster.nodes.get(inst.node)
            if node is not None and node.state is not NodeState.DRAIN:
                reason = RETIRED_REASON.format(group=group.name)
                await set_node_state(self.cluster, inst.node, "DRAIN", reason, user=server_user())
            usage = self.cluster.usage.get(inst.node)
            if usage is None or not usage.jobs:
                doomed.append(inst)
        if doomed and await self._remove(group, doomed):
            for inst in doomed:
                await forget_node(self.cluster, inst.node, RETIRED_REASON.format(group=group.name))
                self.idle_since.pop(inst.node, None)
                self.made_for.pop(inst.node, None)
                await self._event(
                    "cloud.node_removed", inst.node, group, instance=inst.id, retired=True
                )

    async def rebind(self) -> None:
        """The nodes' token serves the groups' names as they are now (``agent_nodes``)."""
        await asyncio.to_thread(bind_nodes, self.cluster, self.agent_nodes())
        self.forget_token()

    async def _forget_lost(self, group: NodeGroup, instances: Sequence[Instance]) -> None:
        """Forget the nodes of a group whose instance is gone and whose agent is silent
        (a node a person started by hand under such a name, and that answers, stays)."""
        now = self.cluster.clock.now()
        timeout = self.cluster.config.node_timeout_seconds
        have = {i.node for i in instances}
        for node in group.nodes:
            if node in have or node not in self.cluster.nodes:
                continue
            session = self.cluster.agent_sessions.get(node)
            silent = session is None or now - session.last_seen > timeout
            if silent and await forget_node(self.cluster, node, "cloud: its instance is gone"):
                self.idle_since.pop(node, None)
            elif not silent and node not in self._strangers:
                self._strangers.add(node)  # (said once per node and server)
                log.warning(
                    "node %s answers under a name of cloud group %s but is none of its "
                    "instances (an agent started by hand?): the group will not make it, "
                    "nor remove it; give the group other names",
                    node,
                    group.name,
                )

    async def _remove_interrupted(self, group: NodeGroup, joined: Mapping[str, str]) -> list[str]:
        """Remove the joined nodes the provider is taking back once their jobs are gone
        (the machine goes anyway; on EC2 its last minutes are not paid for); their names."""
        removed = []
        for name in joined:
            node = self.cluster.nodes.get(name)
            usage = self.cluster.usage.get(name)
            if node is None or not node.reason.startswith(INTERRUPTION_REASON):
                continue
            if node.state is not NodeState.DRAIN or (usage is not None and usage.jobs):
                continue
            inst = next(i for i in self.groups[group.name].instances if i.node == name)
            if await self._remove(group, [inst]):
                await forget_node(self.cluster, name, node.reason)
                self.idle_since.pop(name, None)
                removed.append(name)
                await self._event(
                    "cloud.node_removed", name, group, instance=inst.id, interrupted=True
                )
        return removed

    async def _scale_down(self, joined: Mapping[str, str]) -> None:
        now = self.cluster.clock.now()
        for node in list(self.idle_since):
            if node not in joined:
                del self.idle_since[node]
        for node in joined:
            usage = self.cluster.usage.get(node)
            if (usage is not None and usage.jobs) or _kept_by_operator(self.cluster.nodes[node]):
                self.idle_since.pop(node, None)
            else:  # idle since this pass saw it so, or its last job ended (even between two)
                since = self.idle_since.setdefault(node, now)
                if usage is not None and usage.released_at > since:
                    self.idle_since[node] = usage.released_at
        for node in idle_to_remove(self.idle_since, self.config.groups, now):
            await self._remove_idle(node, self._group(joined[node]))

    async def _remove_idle(self, node: str, group: NodeGroup) -> None:
        current = self.cluster.nodes.get(node)
        if current is None:
            return
        if current.state is not NodeState.DRAIN:
            await set_node_state(self.cluster, node, "DRAIN", IDLE_REASON, user=server_user())
        usage = self.cluster.usage.get(node)
        if usage is not None and usage.jobs:
            return  # a job started before the drain: removed once it ends and idles
        inst = next(i for i in self.groups[group.name].instances if i.node == node)
        if await self._remove(group, [inst]):
            await forget_node(self.cluster, node, IDLE_REASON)
            self.idle_since.pop(node, None)
            await self._event("cloud.node_removed", node, group, instance=inst.id)

    async def _scale_up(
        self,
        listed: Mapping[str, list[Instance]],
        spare: Mapping[str, tuple[str, ResourceVector]],
    ) -> None:
        now = self.cluster.clock.now()
        groups = [
            replace(g, price_per_hour=self.price(g))  # the choice of group: at current prices
            for g in self.config.groups
            if g.name in listed and self.groups[g.name].resting_until <= now
        ]
        if not groups:
            return
        waiting = await self._within_budgets(self._waiting(now), groups, now)
        if not waiting:
            return
        existing = set(self.cluster.nodes) | {i.node for v in listed.values() for i in v}
        plans = plan_scale_up(waiting, groups, existing, spare)
        while plans:
            up = plans.pop(0)
            if any(g.name == up.group for g in groups) and await self._create(up, now):
                existing.update(up.names)
                continue
            # the group failed (it rests now): its jobs are packed into the others
            groups = [g for g in groups if g.name != up.group]
            again = [w for w in waiting if w.job_id in up.jobs]
            taken = existing | {n for p in plans for n in p.names}
            plans += plan_scale_up(again, groups, taken, spare)

    async def _create(self, up: ScaleUp, now: float) -> bool:
        """Create ``up``'s nodes; False where the provider failed (the group rests; it
        is unhealthy unless it only lacked capacity)."""
        group = self._group(up.group)
        state = self.groups[group.name]
        try:
            made = await asyncio.to_thread(
                self.providers[group.name].create, up.names, self.launch()
            )
        except ProviderError as err:
            state.resting_until = now + min(group.boot_timeout_seconds, 300.0)
            state.failed(f"creating {', '.join(up.names)}: {err}", now, err.capacity)
            log.warning("cloud group %s: %s", group.name, state.error)
            await self._event(
                "cloud.create_failed", None, group, error=str(err), capacity=err.capacity
            )
            return False
        state.created += len(made)
        state.instances.extend(made)
        for inst in made:
            self.made_for[inst.node] = up.per_node.get(inst.node, ())
            await self._event(
                "cloud.node_created", inst.node, group, instance=inst.id, jobs=list(up.jobs)
            )
        return True

    def _waiting(self, now: float) -> list[Waiting]:
        """The waiting jobs that new nodes may be made for, each with the groups it may
        get them from and their expected costs (``hal.cloud.burst``)."""
        jobs = [
            j
            for j in self.cluster.unfinished.values()
            if j.state is JobState.PENDING and j.reason in DEMAND
        ]
        jobs.sort(key=lambda j: (-j.priority, j.submit_time, j.id))
        waiting = []
        decisions: dict[int, Decision] = {}
        view = self.data_view() if any(j.spec.data for j in jobs) else None
        for job in jobs:
            partitions = job_partitions(self.cluster, job)
            others = self._others(job, partitions) if job.spec.nodes_min > 1 else 0
            decision = decisions[job.id] = self._decide(job, others, now, view)
            if decision.group is not None:
                waiting.append(Waiting(job.id, job.spec, partitions, others, decision.costs))
        self.decisions = decisions
        for gone in self._waiting_since.keys() - decisions.keys():
            del self._waiting_since[gone]
        return waiting

    def _forecast_due(self, job: Job, now: float) -> bool:
        """A waiting job without an expected start that a node already there could hold,
        and that has not waited a backfill interval (and a pass) since this loop first
        saw it waiting: the scheduler's forecast (``squeue --start``, worked out by its
        backfill stage) may not have come yet, so its "none known" is not yet "none
        fits". (A job the nodes there can never hold has no start to wait for.)"""
        if job.expected_start is not None:
            return False
        since = self._waiting_since.setdefault(job.id, now)
        every = self.backfill_every()
        if every is None or now - since >= every + self.config.interval_seconds:
            return False
        return self._owned_could_hold(job)

    def _owned_could_hold(self, job: Job) -> bool:
        """Enough nodes there (not a group's) of its partitions are big enough for the
        job's share of a node, busy or not, to make up its count."""
        partitions = job_partitions(self.cluster, job)
        templates = self.cluster.cloud_templates
        spec = job.spec
        need = max(1, spec.nodes_min)
        found = 0
        for name, node in self.cluster.nodes.items():
            if name in templates or name in spec.exclude:
                continue
            if any(p.contains(name) for p in partitions) and holds(spec, node):
                found += 1
                if found >= need:
                    return True
        return False

    def _decide(self, job: Job, others: int, now: float, view: DataView | None) -> Decision:
        """Whether ``job`` is worth new nodes, and each group's expected cost."""
        spec = job.spec
        runtime = self.estimate(job)
        if runtime is None or runtime <= 0:
            runtime = float(job.time_limit_s) if job.time_limit_s else UNKNOWN_RUNTIME_S
        nodes = max(max(1, spec.nodes_min) - others, 1)
        checkpoint = NOTICE_S if spec.signal is not None else 0.0
        offers = [
            offer(
                replace(g, price_per_hour=self.price(g)),  # (its provider's latest)
                nodes,
                runtime,
                now,
                boot_s=self.groups[g.name].boot_observed,
                checkpoint_s=checkpoint,
                data_cost=_data_cost(g, spec.data, view) * nodes,
                risk_s=float(job.time_limit_s) if job.time_limit_s else None,
            )
            for g in self.config.groups
            if holds(spec, g.template(g.name))
        ]
        cfg = self.config
        return decide(
            job.id,
            now,
            waited_s=now - job.submit_time,
            forecast_due=self._forecast_due(job, now),
            expected_start=job.expected_start,
            patience_s=patience(
                spec.burst_after,
                spec.qos,
                job.partition,
                cfg.burst_after_by_qos,
                cfg.burst_after_by_partition,
                cfg.burst_after,
            ).at(job.time_limit_s),
            floor_s=cfg.pending_seconds,
            runtime_s=runtime,
            offers=offers,
        )

    async def _within_budgets(
        self, waiting: list[Waiting], groups: Sequence[NodeGroup], now: float
    ) -> list[Waiting]:
        """``waiting`` less the jobs whose burst would pass a ``cloud_budget``; those
        wait with reason ``CloudBudget`` (``hal.cloud.budgets``). The nodes being made
        for waiting jobs count as spent: those jobs pass without asking again."""
        policy = self.cluster.config.priority
        holders = Holders(policy)
        asks: list[Ask] = []
        committed: dict[str, float] = {}
        for w in waiting:
            job = self.cluster.jobs[w.job_id]
            mine = holders.of(payer(job, policy))
            if not mine:
                continue
            cost = self._expected(job, w, groups)
            if self.making_for(w.job_id):
                for holder in mine:
                    committed[holder] = committed.get(holder, 0.0) + cost
            else:
                asks.append(Ask(w.job_id, cost, mine))
        self.committed = committed
        refused: dict[int, Refusal] = {}
        if asks:
            found = await self.ledger.current(self.cluster, cloud_costs.earliest_start(policy, now))
            budgets = cloud_costs.spent(policy, found, now, committed)
            refused = admit(asks, budgets)[1]
        await self._mark_budget_waits(refused)
        return [w for w in waiting if w.job_id not in refused]

    def _expected(self, job: Job, w: Waiting, groups: Sequence[NodeGroup]) -> float:
        """What new nodes for ``job`` would cost (``burst_price``), for its predicted run
        time (within its time limit), else its time limit."""
        price = burst_price(job.spec, groups)
        if price is None:
            return 0.0  # no group holds it: it asks for nothing
        limit = job.time_limit_s or None
        predicted = self.estimate(job)
        seconds = limit if predicted is None else min(predicted, limit or predicted)
        nodes = max(0, max(1, job.spec.nodes_min) - w.others)  # (others: nodes there)
        return expected_cost(price, None if seconds is None else seconds / 3600, nodes)

    async def _mark_budget_waits(self, refused: dict[int, Refusal]) -> None:
        """The reasons: ``CloudBudget`` for the jobs refused, Resources again for those
        a budget held and no longer does (the scheduler's next pass says better)."""
        before, self.held = self.held, refused
        changes = {i: PendingReason.CLOUD_BUDGET for i in refused} | {
            i: PendingReason.RESOURCES for i in before if i not in refused
        }
        if changes:
            await set_pending_reasons(self.cluster, changes)

    def _others(self, job: Job, partitions: tuple[Partition, ...]) -> int:
        """The joined nodes outside the groups that have room for a multi-node job's
        share now: the groups make up the rest of its count. (Not worked out for a
        single-node job: it starts on such a node at the scheduler's next pass.)"""
        skip = self.cluster.cloud_templates
        return nodes_with_room(self.cluster, job.spec, partitions, holds, skip)

    async def _event(self, kind: str, node: str | None, group: NodeGroup, **data: object) -> None:
        await self.cluster.record_events(
            [
                EventRow(
                    self.cluster.clock.now(), kind, node=node, data={"group": group.name, **data}
                )
            ]
        )


def burst_info(decision: Decision | None) -> BurstInfo | None:
    """A burst decision as ``hal explain`` shows it (None: none)."""
    if decision is None:
        return None
    return BurstInfo(
        decided_at=decision.now,
        expected_start=decision.expected_start,
        patience_seconds=None if math.isinf(decision.patience_s) else decision.patience_s,
        runtime_seconds=decision.runtime_s,
        group=decision.group,
        why=decision.why,
        offers=[
            BurstOffer(
                group=o.group,
                nodes=o.nodes,
                ready_at=o.ready_at,
                expected_cost=_finite(o.total),
                run_cost=o.run_cost,
                interruption_cost=_finite(o.interruption_cost),
                data_cost=o.data_cost,
                p_interruption=o.p_interruption,
                soon_enough=o.soon_enough,
            )
            for o in decision.offers
        ],
    )


def _finite(x: float) -> float:
    """JSON has no infinity: a cost that never ends is shown as -1."""
    return x if math.isfinite(x) else -1.0


def _data_cost(group: NodeGroup, keys: Sequence[str], view: DataView | None) -> float:
    """Moving a job's ``--data`` inputs to one of ``group``'s nodes: the data plane's
    per-edge costs from where they are to the group's cache (``data_cache``; none: from
    the origin), plus ``egress_per_gb`` for each GB moved."""
    if not keys or view is None:
        return 0.0
    moved = view.transfer_at(keys, group.data_cache or None)
    return moved.cost + group.egress_per_gb * moved.moved_bytes / GB


def _priced(provider: Provider) -> bool:
    """The provider publishes prices (``PricedProvider``)."""
    return callable(getattr(provider, "prices", None))


def _kept_by_operator(node: Node) -> bool:
    """Drained or downed by someone (``scontrol update``), not by the autoscaler or its
    provider's notices: kept until resumed, as Slurm leaves such a cloud node alone."""
    if node.state is NodeState.DRAIN:
        return node.reason != IDLE_REASON and not node.reason.startswith(
            (INTERRUPTION_REASON, REBALANCE_REASON)
        )
    return set_down_by_operator(node)


def _down_since(node: Node) -> float:
    """When the server declared ``node`` not responding (infinity: it has not)."""
    if node.state is NodeState.DOWN and node.reason == NOT_RESPONDING:
        return node.reason_time or 0.0
    return float("inf")


def cloud_providers(
    config: CloudConfig,
    cluster: str,
    data_dir: Path | None,
    running: Mapping[str, Provider] | None = None,
) -> dict[str, Provider]:
    """Each group's provider, its settings checked (``InvalidRequest``): made when the
    server is built, so a mistake stops it before it serves, and again at ``scontrol
    reconfigure`` (a group unchanged keeps its ``running`` provider). Their records live
    under ``data_dir/cloud``."""
    if not config.groups:
        return {}
    if data_dir is None:
        raise InvalidRequest(
            "[cloud] needs a data directory for its nodes' token and records: start the "
            "server with --data-dir"
        )
    folder = data_dir / "cloud"
    running = running or {}
    return {
        g.name: p
        if (p := running.get(g.name)) is not None and p.group == g
        else make_provider(g, cluster, folder)
        for g in config.groups
    }


def cloud_service(
    cluster: Cluster, providers: Mapping[str, Provider], data_dir: Path, url: str
) -> CloudService:
    """The autoscaler over ``providers`` (``cloud_providers``). The agent token its
    nodes join with is kept in ``data_dir/cloud``, so that a restarted server's nodes
    still join. Blocks (the token is read or written)."""
    config = cluster.config.cloud
    folder = data_dir / "cloud"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = agent_token(cluster, folder / "agent-token", sorted(cluster.cloud_templates))
    return CloudService(cluster, config, providers, url, token)
