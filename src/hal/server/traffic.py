"""``TrafficService``: the control plane's graph of who talks to whom (docs/harmonic.md).

What the agents measured reaches the scheduler in four steps:

1. **intake** (``received``, from each agent's sync, ``AgentSync.traffic``): each running
   job's listeners and TCP connections on the reporting node, with the bytes each
   connection sent since the agent's previous report. A report of a job that does not
   run on that node (or of another of its runs) is ignored, as job reports are.
2. **resolution** (``hal.server.traffic_resolve.EndpointIndex``): the far end of each
   connection is the job that reported the reverse connection, or that listens on its
   address and port, keyed across the cluster so that nodes sharing an address work.
   Each side counts the bytes it *sent*, so a connection measured at both ends is
   counted once per direction; a job's connections to one peer are added as one.
3. **the graph** (``hal.server.traffic_graph.DecayedGraph``, twice): between running jobs
   (an edge goes with either job's end; rebuilt from new reports after a restart) and
   between workload identities (``hal.core.traffic.identity``: ``user/NAME`` or the
   ``--comment=harmonic=LABEL`` label), decayed with ``[harmonic] half_life``, bounded by
   ``max_peers`` and ``max_identities``, and kept in the state store (``traffic_edges``)
   every ``SAVE_EVERY`` ticks and at stop, only the edges that changed.
4. **the view** (``view``): a ``hal.core.traffic.TrafficView`` of the identity graph and
   the identities of the unfinished jobs, rebuilt at a tick (every ``TICK_S``) when edges
   came or went, and every ``SLOW_EVERY`` ticks anyway as rates decay; its rates are
   worked out in a worker thread and the view swapped in with one assignment: the
   scheduler's thread reads it without a lock (``TrafficAwareRunner``, ``with_traffic``).

``hal_harmonic_bytes_total{distance}`` counts the bytes between jobs by how far apart
their nodes are (``distance``). Everything else runs on the event loop; a failure to
store the graph is logged and retried at the next save, never raised into the sync path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from hal.config.harmonic import HarmonicConfig
from hal.core.job import Job
from hal.core.node import Node
from hal.core.traffic import TrafficView, identity
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan
from hal.scheduler.service import PassRunner
from hal.server.observe.harmonicmetrics import DISTANCES, HarmonicStats
from hal.server.traffic_graph import DecayedGraph, Edge, K, rates
from hal.server.traffic_resolve import AMBIGUOUS, EndpointIndex, Flow, Key, Owner, key
from hal.state.cluster import Cluster
from hal.state.rows import TrafficEdgeRow
from hal.wire.agent import JobTraffic

log = logging.getLogger("hal.server.traffic")

TICK_S = 5.0  # ended jobs leave the job graph; the view is rebuilt if edges came or went
SLOW_EVERY = 6  # ticks: the endpoint index's expiry; every rate of the view again
SAVE_EVERY = 12  # ticks: the identity graph's changes are stored
PRUNE_EVERY = 120  # ticks: faded edges (hours under a byte) go, bounds checked again
SAVE_CHUNK = 4096  # edges stored in one transaction
# running jobs with edges at most (the job graph is rebuilt after a restart, not stored)
MAX_JOBS = 200_000


def distance(a: Node | None, b: Node | None) -> str:
    """How far apart two nodes are (``DISTANCES``): ``node`` (the same), ``leaf`` (the
    same leaf switch, base block or rack: the last element of their topology paths),
    ``site`` (different ``site`` labels), else ``switch``: nodes the topology does not
    place are taken as across leaves, as traffic between two hosts crosses a switch."""
    if a is None or b is None:
        return "switch"
    if a.name == b.name:
        return "node"
    site_a, site_b = a.labels.get("site"), b.labels.get("site")
    if site_a and site_b and site_a != site_b:
        return "site"
    if a.topology and b.topology and a.topology[-1] == b.topology[-1]:
        return "leaf"
    return "switch"


@dataclass(frozen=True, slots=True)
class EdgeNow:
    """An edge as ``graph`` answers it: ``a`` is the end the question asked about."""

    a: str | int
    b: str | int
    bytes_per_second: float
    since: float
    updated: float


@dataclass(frozen=True, slots=True)
class Graph:
    now: float
    half_life_s: float
    jobs: list[EdgeNow]
    identities: list[EdgeNow]


class TrafficService:
    def __init__(self, cluster: Cluster, config: HarmonicConfig) -> None:
        self.cluster = cluster
        self.config = config
        h, peers = config.half_life_s, config.max_peers
        self.jobs: DecayedGraph[int] = DecayedGraph(h, peers, MAX_JOBS, track_changes=False)
        self.identities: DecayedGraph[str] = DecayedGraph(h, peers, config.max_identities)
        self.index = EndpointIndex()
        self.bytes_by_distance = dict.fromkeys(DISTANCES, 0)
        self.ignored = 0  # reports of jobs not running on the reporting node
        # the unfinished jobs' identities (the cluster's job listener keeps it)
        self._identity_of: dict[int, str] = {}
        self._view = TrafficView()
        self._view_shape = -1  # the identity graph's ``shape`` the view was built at
        self._identities_changed = False  # since the view was built
        self._prune_due = False  # a reconfigure may have lowered the bounds
        cluster.on_jobs_changed(self._jobs_changed)

    def configure(self, config: HarmonicConfig) -> None:
        """``scontrol reconfigure``: new half-life and bounds (applied at the next tick)."""
        self.config = config
        self.jobs.configure(config.half_life_s, config.max_peers, MAX_JOBS)
        self.identities.configure(config.half_life_s, config.max_peers, config.max_identities)
        self._prune_due = True

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """After ``cluster.load()``: the stored identity graph, decayed to now."""
        for row in await self.cluster.db(self.cluster.store.traffic_edges):
            self.identities.put(row.a, row.b, Edge(row.decayed_bytes, row.at, row.since))
        for job in self.cluster.unfinished.values():
            self._identity_of[job.id] = _identity(job)
        now = self.cluster.clock.now()
        self.identities.prune(now)
        self._set_view(rates(self.identities.adjacency(), now, self.identities.half_life_s))

    async def run(self, stop: asyncio.Event) -> None:
        ticks = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
            if stop.is_set():
                break
            ticks += 1
            try:
                await self.tick(slow=ticks % SLOW_EVERY == 0, prune=ticks % PRUNE_EVERY == 0)
                if ticks % SAVE_EVERY == 0:
                    await self.save()
            except Exception:
                log.exception("traffic graph upkeep failed")

    async def stop(self) -> None:
        await self.save()

    async def tick(self, *, slow: bool = False, prune: bool = False) -> None:
        """Ended jobs leave the job graph. ``slow``: the index's expired entries go and
        every rate of the view is worked out again (in a worker thread: 65,536 edges
        take tens of milliseconds); otherwise the view is rebuilt only when edges came
        or went. ``prune``: faded edges go and the bounds are enforced again."""
        now = self.cluster.clock.now()
        running = self._running()
        for job_id in [j for j in self.jobs.nodes() if j not in running]:
            self.jobs.forget(job_id)
        if prune or self._prune_due:
            self.jobs.prune(now)
            self.identities.prune(now)
            self._prune_due = False
        if slow:
            self.index.expire(now, running)
        graph = self.identities
        if slow or graph.shape != self._view_shape:
            shape, adjacency = graph.shape, graph.adjacency()
            between = await asyncio.to_thread(rates, adjacency, now, graph.half_life_s)
            self._set_view(between, shape)
        elif self._identities_changed:
            self._set_view(self._view.between, self._view_shape)

    async def save(self) -> None:
        """Store the identity edges changed since the last save, ``SAVE_CHUNK`` in a
        transaction (the database's other writers get their turn between them); what
        could not be stored is handed over again at the next save."""
        written, dropped = self.identities.changes()
        rows = [TrafficEdgeRow(*edge) for edge in written]
        store = self.cluster.store
        while rows or dropped:
            some, gone = rows[:SAVE_CHUNK], dropped[:SAVE_CHUNK]
            try:
                await self.cluster.db(store.keep_traffic_edges, some, gone)
            except Exception as err:
                self.identities.restore([(r.a, r.b) for r in rows], dropped)
                log.warning("the traffic graph was not stored (%s); it is tried again later", err)
                return
            rows, dropped = rows[SAVE_CHUNK:], dropped[SAVE_CHUNK:]

    # -- intake --------------------------------------------------------------------------
    def received(self, node: str, traffic: Sequence[JobTraffic]) -> None:
        """One sync's traffic from ``node``'s agent."""
        now = self.cluster.clock.now()
        jobs = self.cluster.jobs
        flows: list[Flow] = []
        claimed: list[Key] = []
        for report in traffic:
            job = jobs.get(report.job_id)
            if (
                job is None
                or not job.state.is_active
                or job.restarts != report.attempt
                or job.allocation is None
                or node not in job.allocation.nodes
            ):
                self.ignored += 1
                continue
            found = self.index.learn(Owner(job.id, node), report, now)
            flows += found
            claimed += [f.local for f in found]
            claimed += [key(e) for e in report.listening]
        # a job's connections to one peer (a pool) are added to the graph as one
        sent: dict[tuple[Owner, Owner], list[float]] = {}
        for flow in [*flows, *self.index.waiting_for(claimed)]:
            peer = self._resolve(flow, now)
            if peer is not None:
                summed = sent.get((flow.owner, peer))
                if summed is None:
                    sent[flow.owner, peer] = [flow.bytes_sent, flow.interval_s]
                else:
                    summed[0] += flow.bytes_sent
                    summed[1] = max(summed[1], flow.interval_s)
        for (a, b), (nbytes, interval_s) in sent.items():
            self._count(a, b, nbytes, interval_s, now)

    def _resolve(self, flow: Flow, now: float) -> Owner | None:
        """The job at ``flow``'s far end, when it is another job's and bytes were sent;
        a flow whose far end is not known yet waits."""
        if flow.bytes_sent == 0:
            return None
        peer = self.index.resolve(flow, now)
        if peer is None:
            self.index.wait(flow)
        elif peer is AMBIGUOUS:
            self.index.ambiguous += 1
        elif isinstance(peer, Owner) and peer.job_id != flow.owner.job_id:
            return peer
        return None

    def _count(self, a: Owner, b: Owner, nbytes: float, interval_s: float, now: float) -> None:
        self.jobs.add(a.job_id, b.job_id, nbytes, now, interval_s)
        ia, ib = self._identity(a.job_id), self._identity(b.job_id)
        if ia is not None and ib is not None:
            self.identities.add(ia, ib, nbytes, now, interval_s)
        nodes = self.cluster.nodes
        self.bytes_by_distance[distance(nodes.get(a.node), nodes.get(b.node))] += int(nbytes)

    def _identity(self, job_id: int) -> str | None:
        found = self._identity_of.get(job_id)
        if found is None:
            job = self.cluster.jobs.get(job_id)
            found = None if job is None else _identity(job)
        return found

    def _jobs_changed(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            if job.state.is_terminal:
                self._identity_of.pop(job.id, None)
            else:
                self._identity_of[job.id] = _identity(job)
        if jobs:
            self._identities_changed = True

    def _running(self) -> set[int]:
        return set(self.cluster.active_ids)  # (kept per change: no walk of the queue)

    # -- reading -------------------------------------------------------------------------
    def view(self) -> TrafficView:
        """The graph for the scheduler, as of the last tick (immutable)."""
        return self._view

    def _set_view(self, between: Mapping[str, Mapping[str, float]], shape: int = -1) -> None:
        self._view = TrafficView(identities=dict(self._identity_of), between=between)
        self._view_shape = shape if shape >= 0 else self.identities.shape
        self._identities_changed = False

    def graph(
        self, jobs: Collection[Job] | None = None, user: str | None = None, limit: int = 1000
    ) -> Graph:
        """The edges now, strongest first, at most ``limit`` of each kind: all, or those
        of ``jobs`` (their job edges and their identities' edges) and/or of ``user``
        (edges with one of the user's jobs or workloads at an end)."""
        now = self.cluster.clock.now()
        h = self.identities.half_life_s
        ids = None if jobs is None else {j.id for j in jobs}
        names = None if jobs is None else {_identity(j) for j in jobs}
        owners = self.cluster.jobs

        def user_of_job(job_id: int) -> str | None:
            job = owners.get(job_id)
            return None if job is None else job.spec.user

        job_edges = _edges(
            self.jobs, now, h, lambda j: (ids is None or j in ids) and _mine(user_of_job(j), user)
        )
        identity_edges = _edges(
            self.identities,
            now,
            h,
            lambda i: (names is None or i in names) and _mine(i.split("/", 1)[0], user),
        )
        return Graph(now, h, job_edges[:limit], identity_edges[:limit])

    def stats(self) -> HarmonicStats:
        index = self.index
        return HarmonicStats(
            bytes_by_distance=dict(self.bytes_by_distance),
            unmatched={
                "ambiguous": index.ambiguous,
                "unresolved": index.unresolved,
                "overflow": index.overflow,
            },
            identities=len(self.identities),
            identity_edges=self.identities.edge_count(),
            job_edges=self.jobs.edge_count(),
        )


def _identity(job: Job) -> str:
    return identity(job.spec.user, job.spec.name, job.spec.comment)


def _mine(owner: str | None, user: str | None) -> bool:
    return user is None or owner == user


def _edges(
    graph: DecayedGraph[K], now: float, h: float, wanted: Callable[[K], bool]
) -> list[EdgeNow]:
    """``graph``'s edges with a ``wanted`` end (put first), strongest first."""
    found = []
    for a, b, edge in graph.edges():
        if not wanted(a):
            if not wanted(b):
                continue
            a, b = b, a
        found.append(EdgeNow(a, b, edge.rate(now, h), edge.since, edge.at))
    found.sort(key=lambda e: -e.bytes_per_second)
    return found


class TrafficAwareRunner:
    """A ``PassRunner`` whose passes see the traffic service's current view
    (``dataclasses.replace``, as ``hal.server.data.DataAwareRunner`` adds the data
    view), so the scheduler itself stays pure."""

    def __init__(self, inner: PassRunner, traffic: TrafficService) -> None:
        self.inner = inner
        self.traffic = traffic

    def run_pass(self, snapshot: ClusterSnapshot) -> PassResult:
        return self.inner.run_pass(dataclasses.replace(snapshot, traffic=self.traffic.view()))

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        return self.run_pass(snapshot).plan

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]:
        return self.inner.forecast(plan)


def with_traffic(snapshot: ClusterSnapshot, traffic: TrafficService | None) -> ClusterSnapshot:
    """``snapshot`` with the traffic view (what-if calls: ``--test-only``, explain)."""
    if traffic is None:
        return snapshot
    return dataclasses.replace(snapshot, traffic=traffic.view())
