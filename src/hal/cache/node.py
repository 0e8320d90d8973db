"""``CacheNode``: a Redis-protocol cache that pulls misses through the cache tree.

    client ──RESP──▶ Connection ──▶ commands ──▶ CacheNode ──▶ ValueStore (values, TTL, LRU)
                                                   │  miss: read() ─▶ pull()
                                                   │     locate (control plane) ─▶ candidates
                                                   │     parents / peers ──HAL.FETCH──▶ nodes
                                                   └─ writes, deletes, expiry, eviction
                                                         ─▶ EventReporter ─▶ control plane

Reads: a local hit answers at once (the fast path never leaves ``Connection``). A miss asks
the control plane for fresh holders; ancestors are reached *through the parent* (each
intermediate does its own pull-through, so a branch ends up holding what its leaves read:
fan-in), peers (with peer sourcing) by a local-only read. With no candidate, the control
plane down, or every candidate failing, the node falls back to its parent chain, bypassing
dead parents. A miss at the root is nil. Concurrent misses for one key share one pull.

Freshness: a copy written here (the origin) is always served. A pulled copy the map does
not list is either stale or unknown to a lagging map; the control plane's ``halStale``
(on locate answers and heartbeats) tells them apart: a stale copy is dropped and fetched
again, a copy the map merely lacks is served and reported again (a resync) so the map
catches up. Heartbeats name the stale copies held here, which are dropped even when no
read asks the control plane (local hits never do).

Writes: stored, then reported; the client's ``OK`` waits for the control plane's 202 for at
most ``ack_wait_s`` (not at all while it is known to be down), after which the event stays
queued and is delivered in order later.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hal.cache import commands, resp
from hal.cache.controlclient import (
    INVENTORY_PART_KEYS,
    ControlPlaneClient,
    ControlPlaneDown,
    ControlPlaneRejected,
)
from hal.cache.membership import Membership, Registration
from hal.cache.nodestats import NodeStats
from hal.cache.peers import PeerFetcher, PeerUnavailable
from hal.cache.reporter import EventReporter
from hal.cache.values import OutOfMemory, ValueStore

log = logging.getLogger("hal.cache.node")
MAX_HOPS = 16
EXPIRY_TICK_S = 0.1
_GET = (b"GET", b"get", b"Get")


@dataclass(slots=True)
class NodeSettings:
    instance_id: str
    listen_host: str
    listen_port: int
    control_plane_url: str
    advertise_address: str | None = None
    max_bytes: int = 0
    policy: str = "noeviction"
    tier: str | None = None
    parent_id: str | None = None
    region: str | None = None
    state_dir: Path | None = None
    peer_sourcing: bool = False
    pull_timeout_s: float = 3.0
    ack_wait_s: float = 1.0
    reconcile_every_s: float = 30.0
    inventory_part_keys: int = INVENTORY_PART_KEYS  # keys per request of a full inventory
    metadata: dict[str, Any] = field(default_factory=dict)
    metrics_listen: str = ""  # HOST:PORT of the node's own /metrics ("": none)


class Connection(asyncio.Protocol):
    """One client. Replies leave in request order even when a command has to wait."""

    ids = itertools.count(1)

    def __init__(self, node: CacheNode) -> None:
        self.node = node
        self.id = next(Connection.ids)
        self.resp3 = False
        self.name = b""
        self.closing = False
        self.parser = resp.RequestParser()
        self.pending: deque[list[bytes]] = deque()
        self.busy = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; both have what we use
        self.transport = transport  # type: ignore[assignment]
        self.node.clients += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.node.clients -= 1
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is None:
            return
        try:
            cmds = self.parser.feed(data)
        except resp.ProtocolError as err:
            transport.write(resp.error(f"ERR Protocol error: {err}"))
            transport.close()
            return
        if self.busy:
            self.pending.extend(cmds)
            return
        node = self.node
        store_get = node.store.get
        out: list[bytes] = []
        hits = served = 0  # added to node.stats once per batch, not per hit
        for i, cmd in enumerate(cmds):
            # the hot path: a GET hit is answered without leaving this loop
            if cmd[0] in _GET and len(cmd) == 2:
                item = store_get(cmd[1])
                if item is not None:
                    value = item.value
                    size = len(value)
                    hits += 1
                    served += size
                    out.append(b"$%d\r\n%s\r\n" % (size, value))
                    continue
            reply = node.run_sync(self, cmd)
            if reply is None:
                self.pending.extend(cmds[i:])
                self.busy = True
                node.spawn(self._drain())
                break
            out.append(reply)
            if self.closing:
                break
        if hits:
            stats = node.stats
            stats.hits += hits
            stats.bytes_served += served
        if out:
            transport.write(b"".join(out))
        if self.closing and not self.busy:
            transport.close()

    async def _drain(self) -> None:
        try:
            while self.pending and not self.closing:
                cmd = self.pending.popleft()
                reply = self.node.run_sync(self, cmd)
                if reply is None:
                    reply = await self.node.run_async(self, cmd)
                if self.transport is None or self.transport.is_closing():
                    return
                self.transport.write(reply)
            if self.closing and self.transport is not None:
                self.transport.close()
        finally:
            self.busy = False


class CacheNode:
    def __init__(self, settings: NodeSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.id = settings.instance_id
        self.clock = clock
        self.store = ValueStore(clock, settings.max_bytes, settings.policy)
        self.cp = ControlPlaneClient(settings.control_plane_url, self.id)
        self.reporter = EventReporter(
            self.cp,
            self.inventory,
            clock,
            self._rejoin,
            settings.inventory_part_keys,
            self.inventory_of,
        )
        address = settings.advertise_address or f"{settings.listen_host}:{settings.listen_port}"
        link = {k: v for k, v in settings.metadata.items() if v is not None}
        self.membership = Membership(
            self.cp,
            Registration(
                address=address,
                tier=settings.tier,
                parent_id=settings.parent_id,
                region=settings.region,
                max_size=settings.max_bytes or None,
                metadata=link,
            ),
            settings.state_dir,
            self.heartbeat_stats,
            self.reporter.request_inventory,
            settings.reconcile_every_s,
            self.drop_stale,
        )
        self.peers = PeerFetcher()
        self.stats = NodeStats()
        self.clients = 0
        self._window = (0, 0)
        self._inflight: dict[bytes, asyncio.Future[tuple[bytes, int, str] | None]] = {}
        self._addresses: dict[str, tuple[str, float]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self),
            self.settings.listen_host,
            self.settings.listen_port,
            reuse_address=True,
            backlog=1024,
        )
        try:
            await asyncio.wait_for(self.membership.join(), 3.0)
        except (ControlPlaneDown, ControlPlaneRejected, TimeoutError) as err:
            log.warning("control plane unavailable at start (%s); using the saved chain", err)
        for coro in (self.reporter.run(), self.membership.run(), self._expire_loop()):
            self.spawn(coro)

    async def stop(self, deregister: bool = True) -> None:
        if self._server is not None:
            self._server.close()
        # give queued events a moment to leave; they are lost otherwise
        with contextlib.suppress(TimeoutError):
            await self.reporter.wait(self.reporter.queued_seq, 1.0)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if deregister:
            with contextlib.suppress(ControlPlaneDown, ControlPlaneRejected):
                await self.cp.deregister()
        await self.cp.close()

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_TICK_S)
            for key in self.store.expire_due():
                self.reporter.report("key_evicted", key)

    async def _rejoin(self) -> None:
        with contextlib.suppress(ControlPlaneDown, ControlPlaneRejected):
            await self.membership.join()

    # -- commands ------------------------------------------------------------------------

    def run_sync(self, conn: Connection, cmd: list[bytes]) -> bytes | None:
        name = cmd[0].upper()
        handler = commands.SYNC.get(name)
        if handler is not None:
            return handler(self, conn, cmd)
        if name in commands.ASYNC:
            return None
        args = " ".join(f"'{a.decode(errors='replace')}'" for a in cmd[1:4])
        return resp.error(
            f"ERR unknown command '{cmd[0].decode(errors='replace')}', "
            f"with args beginning with: {args}"
        )

    async def run_async(self, conn: Connection, cmd: list[bytes]) -> bytes:
        try:
            return await commands.ASYNC[cmd[0].upper()](self, conn, cmd)
        except Exception:
            log.exception("command failed")
            return resp.error("ERR internal error in the cache node; see its log")

    async def read(self, key: bytes) -> bytes | None:
        """The value here, else pulled through the tree (None: nowhere). Counts the read;
        the caller counts the bytes it sends (``served``)."""
        item = self.store.get(key)
        if item is not None:
            self.stats.hits += 1
            return item.value
        self.stats.misses += 1
        loop = asyncio.get_running_loop()
        found = await self.pull(key, loop.time() + self.settings.pull_timeout_s, 0, None)
        if found is None:
            self.stats.not_found += 1
            return None
        return found[0]

    def served(self, value: bytes) -> bytes:
        self.stats.bytes_served += len(value)
        return value

    async def write(self, key: bytes, value: bytes, deadline: float | None) -> None:
        try:
            new, evicted = self.store.set(key, value, deadline)
        except OutOfMemory as err:
            self._report_evicted(err.evicted)
            raise
        self._report_evicted(evicted)
        seq = self.reporter.report("key_added" if new else "key_updated", key, len(value))
        await self.reporter.wait(seq, self.settings.ack_wait_s)

    async def remove(self, keys: list[bytes]) -> int:
        gone = [k for k in keys if self.store.delete(k)]
        seq = 0
        for key in gone:
            seq = self.reporter.report("key_evicted", key)
        if seq:
            await self.reporter.wait(seq, self.settings.ack_wait_s)
        return len(gone)

    async def flush(self) -> None:
        await self.remove(self.store.clear())

    def _report_evicted(self, keys: list[bytes]) -> None:
        for key in keys:
            self.reporter.report("key_evicted", key)

    def configure(self, changes: dict[str, str]) -> None:
        maxmemory = changes.get("maxmemory")
        policy = changes.get("maxmemory-policy")
        evicted = self.store.configure(
            commands.parse_memory(maxmemory) if maxmemory is not None else None,
            policy.lower() if policy is not None else None,
        )
        self._report_evicted(evicted)

    def config_params(self) -> dict[str, str]:
        return {
            "maxmemory": str(self.store.maxmemory),
            "maxmemory-policy": self.store.policy,
            "save": "",
            "appendonly": "no",
            "databases": "1",
        }

    def reset_stats(self) -> None:
        self.stats.reset()
        self._window = (0, 0)

    # -- pull-through ----------------------------------------------------------------------

    async def pull(
        self, key: bytes, deadline: float, hops: int, fresh: list[str] | None
    ) -> tuple[bytes, int, str] | None:
        """Fetch ``key`` from the tree, store it here, report it. Shared by concurrent misses."""
        running = self._inflight.get(key)
        if running is not None:
            return await asyncio.shield(running)
        fut: asyncio.Future[tuple[bytes, int, str] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._inflight[key] = fut
        try:
            found = await self._pull(key, deadline, hops)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception:
            log.exception("pull of %r failed", key)
            found = None
        finally:
            del self._inflight[key]
        fut.set_result(found)
        return found

    async def _pull(self, key: bytes, deadline: float, hops: int) -> tuple[bytes, int, str] | None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        if not self.membership.chain_complete and not self.reporter.down:
            # an ancestor registered after we last looked: learn it now rather than miss
            with contextlib.suppress(ControlPlaneDown, ControlPlaneRejected, TimeoutError):
                await asyncio.wait_for(self.membership.join(), max(0.05, deadline - started))
        ancestors = self.membership.ancestor_ids
        fresh: list[str] | None = None
        stale: list[str] = []
        candidates: list[str] = []
        if not self.reporter.down:
            try:
                holders, stale = await self.cp.locate_all(
                    key, min(1.0, max(0.05, deadline - started))
                )
                fresh = [str(h.get("instanceId")) for h in holders]
                for h in holders:
                    iid = str(h.get("instanceId"))
                    if iid != self.id and (
                        iid in ancestors or (self.settings.peer_sourcing and "proximity" in h)
                    ):
                        candidates.append(iid)
            except (ControlPlaneDown, ControlPlaneRejected) as err:
                log.debug("locate failed, using the parent chain: %s", err)
        own = self._own_copy(key, fresh, stale, last_resort=False)
        if own is not None:
            return own
        found: tuple[bytes, int, str] | None = None
        tried_chain = False
        for iid in candidates:
            if iid in ancestors:
                if tried_chain:
                    continue
                tried_chain = True
                found = await self._pull_chain(key, deadline, hops, fresh)
            else:
                found = await self._read_peer(iid, key, deadline)
            if found is not None:
                break
        if found is None and not tried_chain:
            found = await self._pull_chain(key, deadline, hops, fresh)
        if found is None:
            # nothing upstream: a copy here that nothing calls stale is the freshest there is
            return self._own_copy(key, fresh, stale, last_resort=True)
        value, pttl, source = found
        self.stats.pulled("parent" if source in ancestors else "peer", len(value))
        if pttl != 0:
            seq = self._keep(key, value, pttl, source, (loop.time() - started) * 1000)
            if seq:
                # the asker may report a copy taken from us next: the control plane must
                # know ours is fresh first, or it would mark that copy stale
                await self.reporter.wait(seq, self.settings.ack_wait_s)
        return found

    def _own_copy(
        self, key: bytes, fresh: list[str] | None, stale: list[str], last_resort: bool
    ) -> tuple[bytes, int, str] | None:
        """The copy held here, to pass on to a child whose map did not list us, unless
        it may be stale. ``fresh``/``stale``: our own locate's answer (None: it failed).
        Served at once: our own write (an origin copy is never stale), a copy the map lists
        as fresh, or one it does not list while it lists no holder at all (it lost them).
        With other fresh holders listed (or no answer), ours may predate their write: the
        caller pulls first, and serves ours only as the ``last_resort``, when nothing came.
        A copy the map calls stale is dropped."""
        item = self.store.get(key)
        if item is None:
            return None
        if self.id in stale:
            self.store.delete(key)
            self.reporter.report("key_evicted", key)
            return None
        listed = fresh is not None and self.id in fresh
        if not (last_resort or listed or not item.pulled or fresh == []):
            return None
        if fresh is not None and not listed:
            self.reporter.resync(key)  # the map lost or has not yet heard of our copy
        return item.value, self.store.pttl(item), self.id

    def drop_stale(self, keys: list[str]) -> None:
        """The control plane's list of copies here that an origin write made stale."""
        for name in keys:
            key = name.encode("utf-8", "surrogateescape")
            item = self.store.get(key)
            if item is not None and item.pulled:
                self.store.delete(key)
                self.reporter.report("key_evicted", key)

    def inventory_of(self, keys: list[bytes]) -> list[dict[str, Any]]:
        out = []
        for key in keys:
            item = self.store.get(key)
            if item is not None:
                out.append({"key": key.decode("utf-8", "surrogateescape"), "size": len(item.value)})
        return out

    def _keep(self, key: bytes, value: bytes, pttl: int, source: str, took_ms: float) -> int:
        deadline = None if pttl < 0 else self.clock() + pttl / 1000
        try:
            _, evicted = self.store.set(key, value, deadline, pulled=True)
        except OutOfMemory as err:
            # the reader still gets the value; it just is not cached here
            self._report_evicted(err.evicted)
            return 0
        self._report_evicted(evicted)
        return self.reporter.report("key_added", key, len(value), source, took_ms)

    async def _pull_chain(
        self, key: bytes, deadline: float, hops: int, fresh: list[str] | None
    ) -> tuple[bytes, int, str] | None:
        """Ask the parent to pull; bypass dead ancestors. A reachable ancestor's nil is final."""
        loop = asyncio.get_running_loop()
        for iid, address in self.membership.chain:
            left = deadline - loop.time()
            if left <= 0.02:
                return None
            # leave the parent time to answer before our own timeout fires
            budget_ms = int(max(10.0, left * 1000 * 0.8 - 20))
            known = b"1" if fresh is not None else b"0"
            args = [
                key,
                b"PULL",
                str(budget_ms).encode(),
                str(hops + 1).encode(),
                known,
                *(f.encode() for f in (fresh or [])),
            ]
            try:
                got = await self.peers.fetch(address, args, left)
            except PeerUnavailable as err:
                log.info("ancestor %s unavailable, trying the next: %s", iid, err)
                continue
            return None if got is None else (got[0], got[1], iid)
        return None

    async def _read_peer(
        self, iid: str, key: bytes, deadline: float
    ) -> tuple[bytes, int, str] | None:
        address = await self._address_of(iid)
        left = deadline - asyncio.get_running_loop().time()
        if address is None or left <= 0.02:
            return None
        try:
            got = await self.peers.fetch(address, [key, b"LOCAL"], min(left, 1.0))
        except PeerUnavailable:
            return None
        return None if got is None else (got[0], got[1], iid)

    async def _address_of(self, iid: str) -> str | None:
        for aid, address in self.membership.chain:
            if aid == iid:
                return address
        cached = self._addresses.get(iid)
        now = time.monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            info = await self.cp.get_instance(iid)
        except (ControlPlaneDown, ControlPlaneRejected):
            return None
        if info is None:
            return None
        address = str(info.get("address", ""))
        self._addresses[iid] = (address, now + 30.0)
        return address

    async def serve_fetch(self, args: list[bytes]) -> tuple[bytes, int] | None:
        """``HAL.FETCH`` from another node (see ``hal.cache.peers``)."""
        if len(args) < 2:
            return None
        key, mode = args[0], args[1].upper()
        item = self.store.get(key)
        stats = self.stats
        if mode == b"LOCAL":
            if item is None:
                return None  # a peer's probe, not a read: no miss
            stats.hits += 1
            return self.served(item.value), self.store.pttl(item)
        if len(args) < 5:
            return None
        budget_ms, hops, known = int(args[2]), int(args[3]), args[4] == b"1"
        fresh = [a.decode(errors="replace") for a in args[5:]]
        if item is not None and (not known or self.id in fresh or not item.pulled):
            # an origin copy is never stale: serve it even when the map does not list it
            if known and self.id not in fresh:
                self.reporter.resync(key)
            stats.hits += 1
            return self.served(item.value), self.store.pttl(item)
        if hops > MAX_HOPS:
            return None
        loop = asyncio.get_running_loop()
        found = await self.pull(key, loop.time() + budget_ms / 1000, hops, fresh)
        if found is not None and found[2] == self.id:
            stats.hits += 1  # our own copy after all (the map lagged)
        else:
            stats.misses += 1
        if found is None:
            stats.not_found += 1
            return None
        return self.served(found[0]), found[1]

    # -- reporting -------------------------------------------------------------------------

    def inventory(self) -> list[dict[str, Any]]:
        now = self.clock()
        return [
            {"key": k.decode("utf-8", "surrogateescape"), "size": len(i.value)}
            for k, i in list(self.store.items.items())
            if i.deadline is None or i.deadline > now
        ]

    def heartbeat_stats(self) -> dict[str, Any]:
        st = self.stats
        hits, misses = st.hits - self._window[0], st.misses - self._window[1]
        self._window = (st.hits, st.misses)
        out: dict[str, Any] = {
            "keyCount": len(self.store),
            "totalSize": self.store.used,
            "healthy": True,
            "halStats": st.as_json(self.store.evicted_total, self.store.expired_total),
        }
        if hits + misses:
            out["hitRate"] = hits / (hits + misses)
        return out

    def info_text(self, section: str) -> str:
        s = self.store
        lines = {
            "server": [
                f"redis_version:{commands.REDIS_VERSION}",
                "redis_mode:standalone",
                f"hal_instance_id:{self.id}",
                f"tcp_port:{self.settings.listen_port}",
                "hal_parent_chain:" + ",".join(i for i, _ in self.membership.chain),
                f"hal_chain_complete:{int(self.membership.chain_complete)}",
            ],
            "clients": [f"connected_clients:{self.clients}"],
            "memory": [
                f"used_memory:{s.used}",
                f"maxmemory:{s.maxmemory}",
                f"maxmemory_policy:{s.policy}",
            ],
            "stats": [
                f"keyspace_hits:{self.stats.hits}",
                f"keyspace_misses:{self.stats.misses}",
                f"evicted_keys:{s.evicted_total}",
                f"expired_keys:{s.expired_total}",
                *self.stats.info_lines(),
                f"hal_events_buffered:{len(self.reporter.buffer)}",
                f"hal_control_plane_down:{int(self.reporter.down)}",
            ],
            "keyspace": [
                f"db0:keys={len(s)},expires="
                f"{sum(1 for i in s.items.values() if i.deadline is not None)},"
                "avg_ttl=0"
            ]
            if len(s)
            else [],
        }
        wanted = list(lines) if section in ("default", "all", "everything") else [section]
        out = []
        for name in wanted:
            if name in lines:
                out.append(f"# {name.capitalize()}")
                out.extend(lines[name])
                out.append("")
        return "\r\n".join(out)


async def run_node(settings: NodeSettings, stop: asyncio.Event) -> None:
    node = CacheNode(settings)
    await node.start()
    log.info("cache node serving", extra={"instance": node.id, "port": settings.listen_port})
    metrics: asyncio.Server | None = None
    try:
        if settings.metrics_listen:
            from hal.cache.metrics import node_registry
            from hal.observe.listener import start_metrics_server

            metrics = await start_metrics_server(settings.metrics_listen, node_registry(node))
        await stop.wait()
    finally:
        if metrics is not None:
            metrics.close()
        await node.stop()
