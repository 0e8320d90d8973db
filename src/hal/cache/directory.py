"""``CacheDirectory``: the control plane's in-memory state and every operation on it.

All reads and writes of the API land here and run on the event loop without awaiting, so
requests are applied in arrival order and a read right after a 202 sees the write. Each
change is also recorded in ``journal``; the HTTP layer awaits ``GroupCommitter.commit`` before
answering, which makes the change durable (see ``hal.cache.committer``).
"""

from __future__ import annotations

import itertools
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from hal.cache.contentmap import Change, ContentMap, Entry
from hal.cache.errors import AlreadyExists, CacheBadRequest, CacheNotFound
from hal.cache.registry import Instance, LinkMetrics, Registry
from hal.cache.store import Journal
from hal.core.clock import Clock
from hal.host.clock import SystemClock

ORIGIN_EVENTS = ("key_added", "key_updated")


@dataclass(frozen=True, slots=True)
class DirectorySettings:
    heartbeat_interval_ms: int = 2000
    # an instance that has not sent a heartbeat for this long is reported inactive
    inactive_after_s: float = 15.0
    # eligible holders for ``nearest``: self and ancestors only, or the whole tree
    peer_sourcing: bool = False
    default_link: LinkMetrics = field(default_factory=LinkMetrics)
    local_bandwidth_mbps: float = 100_000.0
    # how many recent event fingerprints are kept to recognise replayed duplicates
    dedupe_window: int = 200_000


@dataclass(frozen=True, slots=True)
class EventItem:
    event_type: str
    timestamp: float
    key: str
    size: int
    source: str | None
    retrieval_ms: float | None


@dataclass(frozen=True, slots=True)
class InventoryPart:
    """One request of a full inventory sent in several (HAL nodes' ``halInventory``
    extension to the bulk update: a big node's key list would not fit one request body).
    Each part is applied as a partial update; the ``last`` one then removes the keys that
    no part of the sync listed, as one ``full`` request would."""

    sync_id: str
    index: int  # 0, 1, 2 ... in the order sent
    last: bool


@dataclass(slots=True)
class _Sync:
    """The parts of one instance's inventory received so far."""

    sync_id: str
    next_index: int
    listed: set[str]


@dataclass(frozen=True, slots=True)
class Holder:
    instance: Instance
    entry: Entry
    proximity: LinkMetrics | None


class CacheDirectory:
    def __init__(
        self, settings: DirectorySettings | None = None, clock: Clock | None = None
    ) -> None:
        self.settings = settings or DirectorySettings()
        self.clock = clock or SystemClock()
        self.registry = Registry(self.settings.default_link, self.settings.local_bandwidth_mbps)
        self.content = ContentMap()
        self.journal = Journal()
        self._seen: OrderedDict[tuple[object, ...], str] = OrderedDict()
        # inventories in several parts, by instance; in memory only: a part that finds its
        # sync gone (a restart) is refused, and the node sends its inventory again
        self._syncs: dict[str, _Sync] = {}
        self._batch_ids = itertools.count(1)

    # -- start-up ------------------------------------------------------------------------

    def restore(self, insts: list[Instance], rows: list[tuple[str, str, Entry]]) -> None:
        for inst in insts:
            self.registry.put(inst)
        for iid, key, entry in rows:
            self.content.put(iid, key, entry)

    # -- registry ------------------------------------------------------------------------

    def status_of(self, inst: Instance) -> str:
        if not inst.verified:
            return "unverified"
        seen = inst.last_heartbeat if inst.last_heartbeat is not None else inst.registered_at
        if not inst.healthy or self.clock.now() - seen > self.settings.inactive_after_s:
            return "inactive"
        return "active"

    def get(self, instance_id: str) -> Instance:
        inst = self.registry.instances.get(instance_id)
        if inst is None:
            raise CacheNotFound(f"cache instance {instance_id!r} is not registered")
        return inst

    def exists(self, instance_id: str) -> bool:
        return instance_id in self.registry.instances

    def find(self, status: str | None, region: str | None) -> list[Instance]:
        out = [
            inst
            for _, inst in sorted(self.registry.instances.items())
            if (status is None or self.status_of(inst) == status)
            and (region is None or inst.region == region)
        ]
        return out

    def register(self, inst: Instance) -> None:
        if self.exists(inst.id):
            raise AlreadyExists(
                f"cache instance {inst.id!r} is already registered; deregister it first"
            )
        inst.registered_at = self.clock.now()
        inst.last_heartbeat = inst.registered_at
        self.registry.put(inst)
        self.journal.instances[inst.id] = inst

    def heartbeat(
        self,
        instance_id: str,
        hit_rate: float | None,
        healthy: bool | None,
        hal_stats: dict[str, Any] | None = None,
    ) -> int:
        inst = self.get(instance_id)
        if hal_stats is not None:
            inst.hal_stats = hal_stats
        inst.last_heartbeat = self.clock.now()
        inst.verified = True
        if hit_rate is not None:
            inst.hit_rate = hit_rate
        if healthy is not None:
            inst.healthy = healthy
        self.journal.instances[inst.id] = inst
        return self.settings.heartbeat_interval_ms

    def deregister(self, instance_id: str) -> None:
        self.get(instance_id)
        self.registry.remove(instance_id)
        self.content.drop_instance(instance_id)
        self._syncs.pop(instance_id, None)
        self.journal.drop_instance(instance_id)

    # -- content queries -----------------------------------------------------------------

    def locate(self, key: str, source: str | None) -> list[Holder]:
        """Fresh copies at registered instances, nearest to ``source`` first, ties by id."""
        reg = self.registry
        fresh = [
            (iid, e)
            for iid, e in self.content.holders(key).items()
            if not e.stale and iid in reg.instances
        ]
        if source is None or source not in reg.instances:
            fresh.sort(key=lambda h: h[0])
            return [Holder(reg.instances[i], e, None) for i, e in fresh]
        hops = reg.distances_from(source)
        ranked: list[tuple[float, str, Entry]] = []
        for iid, entry in fresh:
            d = reg.distance(hops, iid)
            ranked.append((float("inf") if d is None else d, iid, entry))
        ranked.sort(key=lambda r: (r[0], r[1]))
        return [
            Holder(
                reg.instances[iid], entry, None if d == float("inf") else reg.proximity(source, iid)
            )
            for d, iid, entry in ranked
        ]

    def nearest(self, key: str, source: str) -> Holder | None:
        reg = self.registry
        if source not in reg.instances:
            raise CacheBadRequest(
                f"sourceInstanceId {source!r} is not a registered instance",
                field="sourceInstanceId",
            )
        holders = self.content.holders(key)
        if not holders:
            return None
        if not self.settings.peer_sourcing:
            # the requester first, then its ancestors, nearest first
            for iid in reg.chain(source):
                entry = holders.get(iid)
                if entry is not None and not entry.stale:
                    return Holder(reg.instances[iid], entry, reg.proximity(source, iid))
            return None
        for h in self.locate(key, source):
            return h if h.proximity is not None else None
        return None

    def keys(
        self, instance_id: str, after: str | None, limit: int
    ) -> tuple[list[tuple[str, Entry]], bool, int]:
        self.get(instance_id)
        page, more = self.content.page(instance_id, after, limit)
        return page, more, self.content.key_count(instance_id)

    # -- content changes -----------------------------------------------------------------

    def _journal(self, changes: list[Change]) -> None:
        for iid, key, entry in changes:
            self.journal.content[(iid, key)] = entry

    def inventory(
        self,
        instance_id: str,
        keys: list[tuple[str, int, float | None]],
        full: bool,
        part: InventoryPart | None = None,
    ) -> tuple[int, int, int]:
        self.get(instance_id)
        if part is None:
            updated, added, removed, changes = self.content.inventory(instance_id, keys, full)
            self._journal(changes)
            return updated, added, removed
        sync = self._syncs.get(instance_id)
        if part.index == 0:
            sync = self._syncs[instance_id] = _Sync(part.sync_id, 0, set())
        elif sync is None or sync.sync_id != part.sync_id or sync.next_index != part.index:
            # a part lost (the control plane restarted) or out of order: removing what the
            # parts so far did not list would drop keys the node holds
            expected = "part 0" if sync is None else f"part {sync.next_index} of {sync.sync_id}"
            raise CacheBadRequest(
                f"inventory part {part.index} of {part.sync_id} does not follow the parts "
                f"received (expected {expected}); send the inventory again from part 0",
                field="halInventory.part",
            )
        sync.next_index += 1
        sync.listed.update(key for key, _, _ in keys)
        updated, added, _, changes = self.content.inventory(instance_id, keys, False)
        removed = 0
        if part.last:
            del self._syncs[instance_id]
            gone = self.content.remove_unlisted(instance_id, sync.listed)
            removed = len(gone)
            changes += gone
        self._journal(changes)
        return updated, added, removed

    def apply_events(self, instance_id: str, items: list[EventItem]) -> list[str]:
        """Apply in order; a replayed duplicate changes nothing and gets its first id back.
        The caller checks first that ``instance_id`` is registered (``exists``)."""
        ids: list[str] = []
        seen = self._seen
        for item in items:
            fp = (instance_id, item.event_type, item.timestamp, item.key, item.size, item.source)
            known = seen.get(fp)
            if known is not None:
                ids.append(known)
                continue
            event_id = self.new_event_id()
            seen[fp] = event_id
            if len(seen) > self.settings.dedupe_window:
                seen.popitem(last=False)
            ids.append(event_id)
            if item.event_type == "key_evicted":
                if self.content.remove(instance_id, item.key):
                    self.journal.content[(instance_id, item.key)] = None
            else:
                self._journal(
                    self.content.record_write(
                        instance_id, item.key, item.size, item.source, item.timestamp
                    )
                )
        return ids

    def new_event_id(self) -> str:
        return uuid.uuid4().hex

    def new_batch_id(self) -> str:
        return f"b-{uuid.uuid4().hex[:16]}-{next(self._batch_ids)}"

    # -- topology ------------------------------------------------------------------------

    def route(self, src: str, dst: str) -> tuple[list[str], LinkMetrics]:
        reg = self.registry
        for iid in (src, dst):
            if iid not in reg.instances:
                raise CacheNotFound(f"cache instance {iid!r} is not registered")
        hops = reg.path(src, dst)
        if hops is None:
            raise CacheNotFound(
                f"no route between {src!r} and {dst!r}: they are in different cache trees"
            )
        return hops, reg.path_metrics(hops)

    def roots(self) -> list[str]:
        reg = self.registry
        return sorted({r for iid in reg.instances if (r := reg.root_of(iid)) is not None})
