"""``DataService``: the server's link to the data plane (``[data]`` in ``hal.toml``).

The scheduler stays pure: it reads where data is from ``ClusterSnapshot.data`` (a
``hal.core.data.DataView``) and never talks to the cache. This service keeps that view
current and acts on the scheduler's decisions:

* **the view** — every ``refresh_seconds`` it reads the cache control plane
  (``hal/cache/spec/cache-control-plane.openapi.yaml``): ``GET /v1/topology`` (the tree and
  each link's latency/bandwidth/cost), ``GET /v1/instances`` (addresses, and each HAL
  cache node's read counters from its heartbeats — hits, misses, bytes moved:
  ``status()["caches"]``) and
  ``GET /v1/content/locate/{key}`` for the ``--data`` keys of the pending jobs (kept up
  to date from the cluster's job listener, so a refresh never scans the queue), at most
  ``LOCATE_CONCURRENCY`` at a time. Each refresh builds a new immutable ``DataView`` and
  swaps it in with one assignment: the scheduler's worker thread reads it without a lock
  (``hal.server.data_view`` turns the answers into the view).
  A control plane that cannot be reached leaves the last view in place (logged once,
  ``status()["stale"]`` and ``hal_data_view_age_seconds`` show it): scheduling never
  waits for the cache.
* **locate on submit** — ``prime(keys)`` (the submit routes await it, bounded by
  ``PRIME_TIMEOUT_S``) locates keys the view has not seen yet, so the first pass after a
  submission already knows where the inputs are. Skipped while the control plane is down.
* **the runner** — ``DataAwareRunner`` wraps the server's ``PassRunner``: each pass gets
  ``dataclasses.replace(snapshot, data=service.view())``, and its result goes to
  ``after_pass``.
* **pre-staging** — for each placement of a job with ``--data`` and each backfill
  reservation starting within ``PRESTAGE_HORIZON_S``, the job's keys are pulled into the
  leaf cache of each of its nodes with ``HAL.STAGE`` (``hal.cache.commands``), by
  ``STAGE_WORKERS`` tasks fed by a queue, off the scheduler's thread. Once per (job, node),
  unless a view refreshed after the staging shows a staged copy gone (evicted, expired):
  then once more. A staging that fails (leaf down) is retried after ``STAGE_RETRY_S``.
  A pair planned while its node read through no cache is staged by the first refresh
  whose view gives the node a leaf (its cache node registered since).

Everything here is best effort; a failure is counted and logged, never raised into the
scheduler or the submit path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from hal.cache.auth import auth_headers
from hal.config.model import DataConfig
from hal.core.data import CacheTree, DataView, Transfer
from hal.core.errors import InvalidRequest, NotFound, Unavailable
from hal.core.job import Job
from hal.core.states import JobState
from hal.core.tasks import cancel_tasks
from hal.host.tls import verify_for
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan
from hal.scheduler.service import PassRunner
from hal.server.artifact_tree import ArtifactTree
from hal.server.data_view import (
    StageTarget,
    build_view,
    cache_stats_from_instances,
    holders_from_locate,
    inactive_from_topology,
    stage_targets,
    tree_from_topology,
)
from hal.state.cluster import Cluster

log = logging.getLogger("hal.data")

HTTP_TIMEOUT_S = 2.0  # one control-plane request during a refresh
PRIME_TIMEOUT_S = 1.0  # what a submission may wait for its keys to be located
LOCATE_CONCURRENCY = 8
STAGE_WORKERS = 4  # HAL.STAGE requests in flight at once
STAGE_TIMEOUT_S = 60.0  # one HAL.STAGE (the node bounds each pull by its --pull-timeout)
STAGE_QUEUE = 10_000
# Keys located for a submission are kept this long even before their job shows up as
# pending in the mirror (the submit may still be committing).
PRIMED_KEEP_S = 30.0
# A (job, node) whose staging failed (leaf down) is not retried sooner than this: a
# reservation is re-planned on every backfill pass.
STAGE_RETRY_S = 30.0
STAGE_RESULTS = ("staged", "partial", "failed", "no_cache")


@dataclass(slots=True)
class _Staged:
    """What one staging left at a (job, node): the keys the leaf held afterwards."""

    leaf: str  # "": the node read through no cache when the pair was planned
    held: frozenset[str]
    at: float  # loop time the staging finished
    again: bool = False  # the once-more staging after a copy vanished: there is no third


@dataclass(frozen=True, slots=True)
class StageOutcome:
    node: str
    cache: str
    address: str
    keys: tuple[str, ...]
    held: frozenset[str]


@dataclass(frozen=True, slots=True)
class NodeEstimate:
    node: str
    cache: str | None
    source: str | None  # the holder the leaf would read from; None: the origin
    transfer: Transfer


@dataclass(frozen=True, slots=True)
class LocateAnswer:
    key: str
    size: int | None
    holders: Mapping[str, int]
    nodes: tuple[NodeEstimate, ...]
    fresh: bool  # the control plane answered this request


class DataService:
    def __init__(
        self,
        config: DataConfig,
        cluster: Cluster,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.clock = cluster.clock
        base = config.cache_url.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._tree = CacheTree(parent={})
        self._holders: dict[str, dict[str, int]] = {}
        self._inactive: frozenset[str] = frozenset()  # instances the control plane calls dead
        self._located_at: dict[str, float] = {}  # key → loop time its last locate was sent
        self._primed: dict[str, float] = {}  # key → loop time primed for a submission
        self._addresses: dict[str, str] = {}
        self._caches: list[dict[str, Any]] = []  # each cache node's read counters
        self._view = build_view(self._tree, {}, config.node_cache, (), peer_sourcing=False)
        # pending jobs with inputs (the job listener keeps it; refreshes read only this)
        self._wanted: dict[int, tuple[str, ...]] = {}
        # staging
        self._queue: asyncio.Queue[StageTarget] = asyncio.Queue(STAGE_QUEUE)
        self._queued: set[tuple[int, str]] = set()
        self._staged: dict[tuple[int, str], _Staged] = {}
        self._retry_at: dict[tuple[int, str], float] = {}  # after a failed staging
        self._redis: dict[str, aioredis.Redis] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # status
        self.down = False  # the last refresh could not reach the control plane
        self.last_error = ""
        self.last_ok: float | None = None  # clock time of the last complete refresh
        self.started_at = self.clock.now()
        self.refreshes = 0
        self.prestage: dict[str, int] = dict.fromkeys(STAGE_RESULTS, 0)
        self.bytes_staged = 0
        # artifacts through the tree (hal.server.artifact_tree): roots written, routes told
        self.artifacts = ArtifactTree(self.view, self._address)
        cluster.on_jobs_changed(self._on_jobs)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """After ``cluster.load()``: seed the pending jobs' keys, start refreshing and the
        staging workers. Returns at once (the first refresh runs in the background)."""
        self._loop = asyncio.get_running_loop()
        self.started_at = self.clock.now()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=HTTP_TIMEOUT_S,
            transport=self._transport,
            headers=auth_headers(),  # HAL_CACHE_TOKEN
            verify=verify_for(self.base_url),  # HAL_CA_FILE
        )
        self._on_jobs([j for j in self.cluster.jobs.values() if j.state is JobState.PENDING])
        self._tasks = [asyncio.create_task(self._refresh_loop(), name="hal-data-refresh")]
        if self.config.prestage:
            self._tasks += [
                asyncio.create_task(self._stage_worker(), name=f"hal-data-stage-{i}")
                for i in range(STAGE_WORKERS)
            ]

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        for client in self._redis.values():
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()
        self._redis = {}
        await self.artifacts.aclose()

    # -- the view ---------------------------------------------------------------------------

    def view(self) -> DataView:
        """The current view (any thread; never blocks)."""
        return self._view

    def status(self) -> dict[str, Any]:
        now = self.clock.now()
        return {
            "cache_url": self.config.cache_url,
            "stale": self.down or self.last_ok is None,
            "view_age_seconds": round(self.view_age(now), 3),
            "last_error": self.last_error,
            "instances": len(self._tree.parent),
            "keys": len(self._holders),
            "nodes_with_cache": len(self._view.node_cache),
            "refreshes": self.refreshes,
            "prestage": dict(self.prestage),
            "bytes_staged": self.bytes_staged,
            "staging_queued": len(self._queued),
            "caches": self._caches,
        }

    def view_age(self, now: float | None = None) -> float:
        """Seconds since the last complete refresh (since the service started if none)."""
        now = self.clock.now() if now is None else now
        return max(0.0, now - (self.last_ok if self.last_ok is not None else self.started_at))

    def _rebuild(self) -> None:
        # The node → leaf map is worked out again each time: a node that registered since
        # the last refresh must get its leaf before a job is placed on it.
        self._view = build_view(
            self._tree,
            self._holders,
            self.config.node_cache,
            self.cluster.nodes,
            peer_sourcing=self.config.peer_sourcing,
            inactive=self._inactive,
        )

    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        wanted = self._wanted
        for job in jobs:
            if job.spec.data and job.state is JobState.PENDING:
                wanted[job.id] = job.spec.data
            else:
                wanted.pop(job.id, None)

    def wanted_keys(self) -> set[str]:
        """The keys the next refresh locates: pending jobs' inputs and recent primes."""
        keys = {k for keys in self._wanted.values() for k in keys}
        return keys | set(self._primed)

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a bug here must not end the refreshes
                log.exception("refreshing the data view failed")
            await asyncio.sleep(self.config.refresh_seconds)

    async def refresh(self) -> None:
        """One refresh: topology, addresses, holders of the wanted keys. Never raises."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key, at in list(self._primed.items()):
            if now - at > PRIMED_KEEP_S:
                del self._primed[key]
        try:
            http = self._client()
            topo = await _get_json(http, "/topology")
            listed = await _get_json(http, "/instances")
            self._tree = tree_from_topology(topo)
            self._inactive = inactive_from_topology(topo)
            self._addresses = {
                str(i["id"]): str(i["address"])
                for i in listed.get("instances", ())
                if isinstance(i, Mapping) and "id" in i and "address" in i
            }
            self._caches = cache_stats_from_instances(listed)
            wanted = self.wanted_keys()
            for key in list(self._holders):
                if key not in wanted:
                    del self._holders[key]
                    self._located_at.pop(key, None)
            await self._locate_all(sorted(wanted))
        except (httpx.HTTPError, ValueError) as err:
            self._went_down(err)
            return
        finally:
            self._rebuild()
        self.refreshes += 1
        self.last_ok = self.clock.now()
        if self.down:
            log.info("cache control plane %s reachable again", self.base_url)
        self.down = False
        self.last_error = ""
        self._prune_staged()
        if self.config.prestage:
            self._stage_newly_cached()

    def _went_down(self, err: Exception) -> None:
        self.last_error = f"{err.__class__.__name__}: {err}"
        if not self.down:
            # once per outage: a refresh every few seconds must not flood the log
            log.warning(
                "cache control plane %s unreachable (%s); scheduling keeps the last data "
                "view until it is back",
                self.base_url,
                self.last_error,
            )
        self.down = True

    async def _locate_all(self, keys: Sequence[str]) -> None:
        """Locate ``keys`` (``LOCATE_CONCURRENCY`` at a time) into ``_holders``. Raises the
        first transport error (the caller treats the control plane as down)."""
        if not keys:
            return
        http = self._client()
        gate = asyncio.Semaphore(LOCATE_CONCURRENCY)
        loop = asyncio.get_running_loop()

        async def one(key: str) -> None:
            async with gate:
                sent = loop.time()
                body = await _get_json(http, f"/content/locate/{quote(key, safe='')}")
                self._holders[key] = holders_from_locate(body)
                self._located_at[key] = sent

        results = await asyncio.gather(*(one(k) for k in keys), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                if isinstance(r, httpx.HTTPError | ValueError):
                    raise r
                log.error("locating a data key failed", exc_info=r)

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise httpx.TransportError("the data service is not started")
        return self._http

    # -- locate on submit -------------------------------------------------------------------

    async def prime(self, keys: Iterable[str], timeout_s: float = PRIME_TIMEOUT_S) -> None:
        """Locate the keys the view has not seen, waiting at most ``timeout_s``; failures
        are ignored (the next refresh catches up). Skipped while the control plane is down,
        so a dead cache never slows submissions."""
        loop = asyncio.get_running_loop()
        new = [k for k in dict.fromkeys(keys) if k not in self._holders]
        if not new or self._http is None or self.down:
            return
        for key in new:
            self._primed[key] = loop.time()
        try:
            await asyncio.wait_for(self._locate_all(new), timeout_s)
        except (TimeoutError, httpx.HTTPError, ValueError) as err:
            log.debug("locate on submit failed: %s", err)
        self._rebuild()

    async def locate(self, key: str) -> LocateAnswer:
        """``GET /v1/data/locate/{key}``: the key's holders (asked afresh; the last view's
        when the control plane does not answer) and each HAL node's estimate."""
        fresh = False
        if self._http is not None:
            try:
                await asyncio.wait_for(self._locate_all([key]), HTTP_TIMEOUT_S)
                self._primed[key] = asyncio.get_running_loop().time()
                fresh = True
            except (TimeoutError, httpx.HTTPError, ValueError) as err:
                log.debug("locate %r failed: %s", key, err)
            self._rebuild()
        view = self._view
        nodes = sorted(set(self.cluster.nodes) | set(view.node_cache))
        estimates = []
        for node in nodes:
            leaf = view.node_cache.get(node)
            source, _ = view.source(key, leaf)
            estimates.append(NodeEstimate(node, leaf, source, view.transfer_at([key], leaf)))
        return LocateAnswer(
            key=key,
            size=view.size(key),
            holders=dict(view.holders.get(key, {})),
            nodes=tuple(estimates),
            fresh=fresh,
        )

    # -- pre-staging ------------------------------------------------------------------------

    def after_pass(self, result: PassResult, now: float) -> None:
        """Called on the scheduler's worker thread after each pass: hand the pass's
        placements and near reservations to the event loop for staging."""
        loop = self._loop
        if not self.config.prestage or loop is None:
            return
        if not result.plan.placements and not result.reservations:
            return
        # _wanted: pending jobs with inputs, kept by the job listener on the event loop;
        # membership tests from this thread are safe (a dict lookup under the GIL)
        targets = stage_targets(result, now, with_inputs=self._wanted)
        if targets:
            with contextlib.suppress(RuntimeError):  # the loop closed: shutting down
                loop.call_soon_threadsafe(self.enqueue, targets)

    def enqueue(self, targets: Iterable[StageTarget]) -> None:
        """Queue the targets whose job has inputs and that were not staged already (or
        whose staged copies a later view no longer shows). Event loop only."""
        view = self._view
        now = asyncio.get_running_loop().time()
        for t in targets:
            job = self.cluster.jobs.get(t.job_id)
            if job is None or not job.spec.data or job.state.is_terminal:
                continue
            ident = (t.job_id, t.node)
            if ident in self._queued:
                continue
            done = self._staged.get(ident)
            if done is not None and done.leaf and (done.again or not self._vanished(done, view)):
                continue  # (two jobs reserved on a leaf too small for both: no ping-pong)
            if self._retry_at.get(ident, 0.0) > now:
                continue
            if view.node_cache.get(t.node) is None:
                if done is None:
                    self.prestage["no_cache"] += 1
                    self._staged[ident] = _Staged("", frozenset(), 0.0)
                continue
            try:
                self._queue.put_nowait(t)
            except asyncio.QueueFull:
                self.prestage["failed"] += 1
                continue
            self._queued.add(ident)

    def _stage_newly_cached(self) -> None:
        """Stage the (job, node) pairs planned while the node read through no cache, now
        that the view gives it a leaf (it registered since): a placement is never planned
        again, and a reservation's next pass would find the pair already counted."""
        node_cache = self._view.node_cache
        late = [
            StageTarget(job_id, node)
            for (job_id, node), done in self._staged.items()
            if not done.leaf and node in node_cache
        ]
        if late:
            self.enqueue(late)

    def _vanished(self, done: _Staged, view: DataView) -> bool:
        """A key staged into ``done.leaf`` that a locate sent after the staging no
        longer finds there."""
        for key in done.held:
            if self._located_at.get(key, 0.0) > done.at and done.leaf not in view.holders.get(
                key, {}
            ):
                return True
        return False

    async def _stage_worker(self) -> None:
        while True:
            target = await self._queue.get()
            ident = (target.job_id, target.node)
            try:
                job = self.cluster.jobs.get(target.job_id)
                if job is not None and job.spec.data:
                    await self._stage_job(target, job.spec.data)
            except Exception:
                log.exception("pre-staging job %s on %s failed", target.job_id, target.node)
                self.prestage["failed"] += 1
            finally:
                self._queued.discard(ident)

    async def _stage_job(self, target: StageTarget, keys: tuple[str, ...]) -> None:
        view = self._view
        leaf = view.node_cache.get(target.node)
        if leaf is None:
            self.prestage["no_cache"] += 1
            return
        missing = {k for k in keys if leaf not in view.holders.get(k, {})}
        try:
            outcome = await self.stage(keys, target.node)
        except (Unavailable, NotFound, InvalidRequest) as err:
            self.prestage["failed"] += 1
            self._retry_at[(target.job_id, target.node)] = (
                asyncio.get_running_loop().time() + STAGE_RETRY_S
            )
            log.info("pre-staging job %s on %s failed: %s", target.job_id, target.node, err)
            return
        held = outcome.held
        ident = (target.job_id, target.node)
        before = self._staged.get(ident)
        self._staged[ident] = _Staged(
            leaf, held, asyncio.get_running_loop().time(), again=bool(before and before.leaf)
        )
        self.prestage["staged" if len(held) == len(keys) else "partial"] += 1
        self.bytes_staged += sum(view.size(k) or 0 for k in missing & held)
        log.info(
            "pre-staged job %s's inputs on %s (%s): %d/%d keys held",
            target.job_id,
            target.node,
            leaf,
            len(held),
            len(keys),
            extra={"job_id": target.job_id, "node": target.node},
        )

    async def stage(self, keys: Sequence[str], node: str) -> StageOutcome:
        """``HAL.STAGE`` ``keys`` on ``node``'s leaf cache; the keys it holds afterwards
        are recorded in the view at once (the next refresh confirms them)."""
        keys = tuple(dict.fromkeys(keys))
        view = self._view
        leaf = view.node_cache.get(node)
        if leaf is None:
            if node not in self.cluster.nodes:
                raise NotFound(f"node {node!r} is not a HAL node")
            raise InvalidRequest(
                f"node {node!r} reads through no cache instance: register a cache node with "
                f"--instance-id {node} or map it in [data.node_cache]",
                field="node",
            )
        address = await self._address(leaf)
        try:
            held = await self.hal_stage(address, keys)
        except (RedisError, OSError, TimeoutError) as err:
            raise Unavailable(
                f"cache instance {leaf} at {address} did not stage the keys "
                f"({err.__class__.__name__}: {err})"
            ) from err
        if held:
            for key in held:
                copies = self._holders.setdefault(key, {})
                copies.setdefault(leaf, self._view.size(key) or 0)
            self._rebuild()
        return StageOutcome(node, leaf, address, keys, held)

    async def hal_stage(self, address: str, keys: Sequence[str]) -> frozenset[str]:
        """The wire: ``HAL.STAGE keys`` on the cache node at ``address``; the keys it holds
        afterwards. Raises ``RedisError``/``OSError``/``TimeoutError``."""
        client = self._redis.get(address)
        if client is None:
            host, _, port = address.rpartition(":")
            client = aioredis.Redis(
                host=host.strip("[]"),
                port=int(port),
                socket_timeout=STAGE_TIMEOUT_S,
                socket_connect_timeout=HTTP_TIMEOUT_S,
            )
            self._redis[address] = client
        count = await asyncio.wait_for(
            client.execute_command("HAL.STAGE", *keys),  # type: ignore[no-untyped-call]
            STAGE_TIMEOUT_S,
        )
        if count == len(keys):
            return frozenset(keys)
        if not count:
            return frozenset()
        # which ones: EXISTS is local-only on a cache node
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.exists(key)
        flags = await asyncio.wait_for(pipe.execute(), STAGE_TIMEOUT_S)
        return frozenset(k for k, n in zip(keys, flags, strict=True) if n)

    async def _address(self, instance: str) -> str:
        found = self._addresses.get(instance)
        if found:
            return found
        try:
            body = await _get_json(self._client(), f"/instances/{quote(instance, safe='')}")
        except httpx.HTTPStatusError as err:
            if err.response.status_code == 404:
                raise NotFound(
                    f"cache instance {instance!r} is not registered with the control plane"
                ) from err
            raise Unavailable(f"cannot read cache instance {instance!r}: {err}") from err
        except (httpx.HTTPError, ValueError) as err:
            raise Unavailable(
                f"the cache control plane {self.base_url} is unreachable ({err}); "
                "the leaf's address is not known yet"
            ) from err
        address = body.get("address")
        if not isinstance(address, str) or ":" not in address:
            raise Unavailable(f"cache instance {instance!r} has no usable address")
        self._addresses[instance] = address
        return address

    def _prune_staged(self) -> None:
        for table in (self._staged, self._retry_at):
            for ident in list(table):
                job = self.cluster.jobs.get(ident[0])
                if job is None or job.state.is_terminal:
                    del table[ident]


async def _get_json(http: httpx.AsyncClient, path: str) -> Mapping[str, Any]:
    response = await http.get(path)
    response.raise_for_status()
    body = response.json()
    if not isinstance(body, Mapping):
        raise ValueError(f"{path}: expected a JSON object")
    return body


class DataAwareRunner:
    """A ``PassRunner`` whose passes see the data service's current view: the snapshot is
    taken by the state layer, the view added here (``dataclasses.replace``), so the
    scheduler itself stays pure. Each pass's result goes to ``DataService.after_pass``."""

    def __init__(self, inner: PassRunner, data: DataService) -> None:
        self.inner = inner
        self.data = data

    def run_pass(self, snapshot: ClusterSnapshot) -> PassResult:
        result = self.inner.run_pass(dataclasses.replace(snapshot, data=self.data.view()))
        self.data.after_pass(result, snapshot.now)
        return result

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        return self.run_pass(snapshot).plan

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]:
        return self.inner.forecast(plan)


def with_view(snapshot: ClusterSnapshot, data: DataService | None) -> ClusterSnapshot:
    """``snapshot`` with the data view (what-if calls: ``--test-only``)."""
    return snapshot if data is None else dataclasses.replace(snapshot, data=data.view())


__all__ = ["DataAwareRunner", "DataService", "LocateAnswer", "with_view"]
