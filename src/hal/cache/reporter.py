"""``EventReporter``: delivers a node's cache events to the control plane, in order.

One sender task owns the connection, so events reach the control plane in the order they
happened. A writer awaits ``wait(seq)`` for a bounded time before acknowledging its client;
while the control plane is unreachable the wait is skipped (the node keeps serving) and
events pile up in the buffer, to be replayed in order, in batches, once it answers again.

After an outage the control plane may have lost what it knew (a restart on a fresh
database), so the sender follows the replay with a ``full`` inventory. Inventories travel
through the same sender, after every event queued before them: an inventory can never be
overtaken by an older event, and one sent in several parts (a big node) is not interleaved
with newer ones either: they wait until its last part is in. A batch answered
``accepted: false`` (the control plane does not know this node: it applied nothing) makes
the node register again and resend it.

A node that finds the map lacking a copy it holds (it served that copy to a reader the map
did not send to it) asks for a *resync* of that key: a ``partial`` inventory of the keys
asked for, sent like an inventory (after every older event), describing them as they are
held at sending time, so a key deleted meanwhile is not brought back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from hal.cache.controlclient import (
    INVENTORY_PART_KEYS,
    ControlPlaneClient,
    ControlPlaneDown,
    ControlPlaneRejected,
)

log = logging.getLogger("hal.cache.reporter")
MAX_BATCH = 10_000
# past this many undelivered events the oldest are dropped and a full inventory repairs it
MAX_BUFFER = 1_000_000

Inventory = Callable[[], list[dict[str, Any]]]
Lookup = Callable[[list[bytes]], list[dict[str, Any]]]


class EventReporter:
    def __init__(
        self,
        client: ControlPlaneClient,
        inventory: Inventory,
        now: Callable[[], float],
        on_unknown: Callable[[], Awaitable[None]],
        inventory_part_keys: int = INVENTORY_PART_KEYS,
        lookup: Lookup | None = None,
    ) -> None:
        self.client = client
        self.inventory = inventory
        self.lookup = lookup  # the inventory entries of the keys given, those still held
        self.resync_keys: dict[bytes, None] = {}
        self.inventory_part_keys = inventory_part_keys
        self.now = now
        self.on_unknown = on_unknown
        self.buffer: deque[tuple[int, dict[str, Any]]] = deque()
        self.queued_seq = 0
        self.delivered_seq = 0
        self.down = False
        self.inventory_wanted = True  # a (re)started node always sends its inventory first
        self._wake = asyncio.Event()
        self._delivered = asyncio.Event()
        self._last_stamp = 0.0

    def report(
        self,
        event_type: str,
        key: bytes,
        size: int | None = None,
        source: str | None = None,
        retrieval_ms: float | None = None,
    ) -> int:
        stamp = self.now()
        # strictly increasing per node: two identical events must not look like a replay
        if stamp <= self._last_stamp:
            stamp = self._last_stamp + 1e-6
        self._last_stamp = stamp
        event: dict[str, Any] = {
            "eventType": event_type,
            "timestamp": dt.datetime.fromtimestamp(stamp, dt.UTC).isoformat(),
            "key": key.decode("utf-8", "surrogateescape"),
        }
        if size is not None:
            event["size"] = size
        if source is not None:
            event["sourceInstanceId"] = source
        if retrieval_ms is not None:
            event["retrievalTimeMs"] = round(retrieval_ms, 3)
        self.queued_seq += 1
        self.buffer.append((self.queued_seq, event))
        if len(self.buffer) > MAX_BUFFER:
            self.buffer.popleft()
            self.inventory_wanted = True
        self._wake.set()
        return self.queued_seq

    def resync(self, key: bytes) -> None:
        """Tell the control plane (again) that this node holds ``key``."""
        if self.lookup is not None and key not in self.resync_keys:
            self.resync_keys[key] = None
            self._wake.set()

    def request_inventory(self) -> None:
        self.inventory_wanted = True
        self._wake.set()

    async def wait(self, seq: int, timeout_s: float) -> bool:
        """True once event ``seq`` is delivered; False after ``timeout_s`` (then it is queued)."""
        if self.down:
            return False
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self.delivered_seq < seq:
            left = end - loop.time()
            if left <= 0 or self.down:
                return False
            try:
                await asyncio.wait_for(self._delivered.wait(), left)
            except TimeoutError:
                return False
        return True

    async def run(self) -> None:
        backoff = 0.1
        while True:
            if not self.buffer and not self.inventory_wanted and not self.resync_keys:
                self._wake.clear()
                await self._wake.wait()
            try:
                await self._send_once()
            except ControlPlaneDown as err:
                if not self.down:
                    log.warning("control plane unreachable; buffering events (%s)", err)
                self.down = True
                self.inventory_wanted = True
                await asyncio.sleep(backoff)
                backoff = min(2.0, backoff * 2)
                continue
            if self.down:
                log.info("control plane reachable again; replayed buffered events")
            self.down = False
            backoff = 0.1

    async def _send_once(self) -> None:
        if self.buffer:
            batch = [self.buffer[i] for i in range(min(MAX_BATCH, len(self.buffer)))]
            events = [e for _, e in batch]
            try:
                if not await self.client.post_batch(events):
                    # the control plane forgot us (deregistered, or it lost its database)
                    # and applied nothing: register again, send the same events once more,
                    # then the inventory (it dropped what it knew of us)
                    await self.on_unknown()
                    self.inventory_wanted = True
                    if not await self.client.post_batch(events):
                        log.warning("control plane refused the events of this unregistered node")
            except ControlPlaneRejected as err:
                # our own bug or a damaged event: drop it rather than block the queue forever
                log.error("control plane rejected an event batch: %s", err)
                self.inventory_wanted = True
            for _ in batch:
                self.buffer.popleft()
            self._mark_delivered(batch[-1][0])
            return
        if self.inventory_wanted:
            self.resync_keys.clear()  # the full inventory lists them
            self.inventory_wanted = False
            try:
                keys = self.inventory()
                sent = await self.client.post_inventory(keys, self.inventory_part_keys)
                log.info("sent the full inventory: %d keys in %d requests", len(keys), sent)
            except ControlPlaneRejected as err:
                if err.status == 404:
                    # the control plane forgot us: register again, then resend
                    self.inventory_wanted = True
                    await self.on_unknown()
                else:
                    log.error("control plane rejected the inventory: %s", err)
            except ControlPlaneDown:
                self.inventory_wanted = True
                raise
            return
        if self.resync_keys and self.lookup is not None:
            asked = list(self.resync_keys)
            self.resync_keys.clear()
            held = self.lookup(asked)
            if not held:
                return
            try:
                await self.client.post_keys(held)
            except ControlPlaneRejected as err:
                log.error("control plane rejected a resync of %d keys: %s", len(held), err)
                self.inventory_wanted = True  # the full inventory repairs it (404 included)
            except ControlPlaneDown:
                self.resync_keys.update(dict.fromkeys(asked))
                raise

    def _mark_delivered(self, seq: int) -> None:
        self.delivered_seq = seq
        self._delivered.set()
        self._delivered = asyncio.Event()
