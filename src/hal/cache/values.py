"""``ValueStore``: the node's keys and values, with Redis's TTL and maxmemory semantics.

Held in the node process (ADR 0004). An ``OrderedDict`` keeps least-recently-used first, so
``allkeys-lru`` is exact rather than sampled. Memory is accounted as key + value + a fixed
per-entry overhead, which is close enough to Redis's ``used_memory`` growth for limits given
in bytes to behave as users expect.

The store never reports anything itself: every call that drops keys returns them, and the
node turns them into ``key_evicted`` events.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

ENTRY_OVERHEAD = 64
POLICIES = (
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
)
OOM_MESSAGE = "OOM command not allowed when used memory > 'maxmemory'."


class OutOfMemory(Exception):
    """The write does not fit under maxmemory and the policy may not (or cannot) evict.

    ``evicted`` lists keys already dropped while trying; they must still be reported."""

    def __init__(self, evicted: list[bytes] | None = None) -> None:
        super().__init__(OOM_MESSAGE)
        self.evicted = evicted or []


@dataclass(slots=True)
class Item:
    value: bytes
    deadline: float | None = None
    pulled: bool = False  # a copy taken from another node (else written here: the origin)


def cost(key: bytes, value: bytes) -> int:
    return len(key) + len(value) + ENTRY_OVERHEAD


class ValueStore:
    def __init__(
        self, now: Callable[[], float], maxmemory: int = 0, policy: str = "noeviction"
    ) -> None:
        self.now = now
        self.items: OrderedDict[bytes, Item] = OrderedDict()
        self.used = 0
        self.maxmemory = maxmemory
        self.policy = policy
        self._deadlines: list[tuple[float, bytes]] = []
        self.evicted_total = 0
        self.expired_total = 0

    # -- reads ---------------------------------------------------------------------------

    def get(self, key: bytes) -> Item | None:
        """The live item (expired ones are left for ``expire_due`` to report)."""
        item = self.items.get(key)
        if item is None:
            return None
        if item.deadline is not None and item.deadline <= self.now():
            return None
        self.items.move_to_end(key)
        return item

    def pttl(self, item: Item) -> int:
        if item.deadline is None:
            return -1
        return max(0, int((item.deadline - self.now()) * 1000))

    def __len__(self) -> int:
        return len(self.items)

    # -- writes --------------------------------------------------------------------------

    def set(
        self, key: bytes, value: bytes, deadline: float | None, pulled: bool = False
    ) -> tuple[bool, list[bytes]]:
        """Store; returns (was_new, keys evicted to make room). Raises ``OutOfMemory``."""
        old = self.items.get(key)
        if old is not None and old.deadline is not None and old.deadline <= self.now():
            old = None
        delta = cost(key, value) - (cost(key, self.items[key].value) if key in self.items else 0)
        evicted = self._make_room(delta, keep=key)
        previous = self.items.pop(key, None)
        if previous is not None:
            self.used -= cost(key, previous.value)
        self.items[key] = Item(value, deadline, pulled)
        self.used += cost(key, value)
        if deadline is not None:
            self._push_deadline(deadline, key)
        return old is None, evicted

    def set_deadline(self, key: bytes, deadline: float | None) -> bool:
        item = self.get(key)
        if item is None:
            return False
        item.deadline = deadline
        if deadline is not None:
            self._push_deadline(deadline, key)
        return True

    def _push_deadline(self, deadline: float, key: bytes) -> None:
        """Queue a deadline. A key whose TTL is set again and again leaves its old ones in
        the heap: past twice the keys held, it is rebuilt from the live deadlines."""
        heap = self._deadlines
        heapq.heappush(heap, (deadline, key))
        if len(heap) > 2 * len(self.items) + 1024:
            heap[:] = [(i.deadline, k) for k, i in self.items.items() if i.deadline is not None]
            heapq.heapify(heap)

    def delete(self, key: bytes) -> bool:
        if self.get(key) is None:
            return False  # absent, or expired: ``expire_due`` drops and reports it
        item = self.items.pop(key)
        self.used -= cost(key, item.value)
        return True

    def clear(self) -> list[bytes]:
        keys = list(self.items)
        self.items.clear()
        self._deadlines.clear()
        self.used = 0
        return keys

    def expire_due(self, limit: int = 10_000) -> list[bytes]:
        """Remove keys whose deadline passed (at most ``limit`` per call)."""
        now = self.now()
        gone: list[bytes] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now and len(gone) < limit:
            _, key = heapq.heappop(heap)
            item = self.items.get(key)
            # the heap may hold outdated deadlines of overwritten keys: check the live one
            if item is not None and item.deadline is not None and item.deadline <= now:
                self.items.pop(key)
                self.used -= cost(key, item.value)
                gone.append(key)
        self.expired_total += len(gone)
        return gone

    def configure(self, maxmemory: int | None = None, policy: str | None = None) -> list[bytes]:
        """Change limits; never fails because current use is above a new limit (as Redis).
        An evicting policy trims down at once; ``noeviction`` only refuses later writes."""
        if maxmemory is not None:
            self.maxmemory = maxmemory
        if policy is not None:
            self.policy = policy
        try:
            return self._make_room(0, keep=None)
        except OutOfMemory as err:
            return err.evicted

    def _make_room(self, delta: int, keep: bytes | None) -> list[bytes]:
        limit = self.maxmemory
        if limit <= 0 or self.used + delta <= limit:
            return []
        if self.policy == "noeviction":
            raise OutOfMemory()
        evicted: list[bytes] = []
        while self.used + delta > limit:
            victim = self._victim(keep)
            if victim is None:
                # nothing left to evict: the write alone is bigger than the limit
                self.evicted_total += len(evicted)
                raise OutOfMemory(evicted)
            item = self.items.pop(victim)
            self.used -= cost(victim, item.value)
            evicted.append(victim)
        self.evicted_total += len(evicted)
        return evicted

    def _victim(self, keep: bytes | None) -> bytes | None:
        volatile = self.policy.startswith("volatile-")
        if self.policy.endswith("-random"):
            pool = [
                k
                for k, i in self.items.items()
                if k != keep and (not volatile or i.deadline is not None)
            ]
            return random.choice(pool) if pool else None
        if self.policy == "volatile-ttl":
            timed = [
                (i.deadline, k)
                for k, i in self.items.items()
                if k != keep and i.deadline is not None
            ]
            return min(timed)[1] if timed else None
        # lru (and lfu, approximated by recency): oldest first
        for k, i in self.items.items():
            if k != keep and (not volatile or i.deadline is not None):
                return k
        return None
