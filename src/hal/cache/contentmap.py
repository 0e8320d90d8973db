"""The content map: which instance holds which key, and which copies are stale.

Two indexes over the same ``Entry`` objects: ``by_key`` (locate, nearest) and ``by_instance``
(listing, inventory, deregister). Both are plain dicts so the hot paths are a hash lookup.

Staleness (behaviour sheet, "Stale replicas"): an *origin write* is a key_added/key_updated
with no source or with the reporter itself as source. It makes every copy that
another instance *pulled* earlier (by event time) stale; origin holders are never marked.
A stale copy is hidden from locate/nearest until its instance reports a fresh pull (an
add with a source that is not itself stale). An inventory re-sync only adds keys and
refreshes sizes; it never clears the mark, because a node cannot know that its copy was
overwritten elsewhere. ``stale_keys`` indexes the marks per instance: the control plane
tells each node its stale copies (``halStale`` on heartbeat and locate answers), and the
node drops them instead of serving them from its local hits.
"""

from __future__ import annotations

import bisect
from collections.abc import Container, Iterator
from dataclasses import dataclass


@dataclass(slots=True)
class Entry:
    """One copy of one key at one instance."""

    size: int
    origin: bool = False
    stale: bool = False
    last_accessed: float | None = None


# a change the store must persist, in the order it happened: (instance, key, entry or None)
Change = tuple[str, str, Entry | None]


class ContentMap:
    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, Entry]] = {}
        self.by_instance: dict[str, dict[str, Entry]] = {}
        self._bytes: dict[str, int] = {}
        self._stale: dict[str, set[str]] = {}  # instance -> its keys marked stale
        # sorted key lists for paging, rebuilt lazily after an instance's key set changes
        self._sorted: dict[str, list[str]] = {}

    # -- reads ---------------------------------------------------------------------------

    def holders(self, key: str) -> dict[str, Entry]:
        return self.by_key.get(key, {})

    def stale_keys(self, instance_id: str, limit: int) -> list[str]:
        """Up to ``limit`` keys whose copy at ``instance_id`` is stale."""
        keys = self._stale.get(instance_id)
        return sorted(keys)[:limit] if keys else []

    def stale_holders(self, key: str) -> list[str]:
        return sorted(iid for iid, e in self.holders(key).items() if e.stale)

    def _mark(self, instance_id: str, key: str, stale: bool) -> None:
        if stale:
            self._stale.setdefault(instance_id, set()).add(key)
            return
        keys = self._stale.get(instance_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._stale[instance_id]

    def key_count(self, instance_id: str) -> int:
        return len(self.by_instance.get(instance_id, {}))

    def total_bytes(self, instance_id: str) -> int:
        return self._bytes.get(instance_id, 0)

    def page(
        self, instance_id: str, after: str | None, limit: int
    ) -> tuple[list[tuple[str, Entry]], bool]:
        """Keys in code-point order after ``after``; True when more remain."""
        keys = self.by_instance.get(instance_id, {})
        order = self._sorted.get(instance_id)
        if order is None:
            order = sorted(keys)
            self._sorted[instance_id] = order
        start = 0 if after is None else bisect.bisect_right(order, after)
        chunk = order[start : start + limit]
        return [(k, keys[k]) for k in chunk], start + limit < len(order)

    # -- changes (each returns what changed, for the store) ------------------------------

    def put(self, instance_id: str, key: str, entry: Entry) -> None:
        per_inst = self.by_instance.setdefault(instance_id, {})
        old = per_inst.get(key)
        if old is None:
            self._sorted.pop(instance_id, None)
        else:
            self._bytes[instance_id] -= old.size
        per_inst[key] = entry
        self.by_key.setdefault(key, {})[instance_id] = entry
        self._bytes[instance_id] = self._bytes.get(instance_id, 0) + entry.size
        self._mark(instance_id, key, entry.stale)

    def remove(self, instance_id: str, key: str) -> bool:
        per_inst = self.by_instance.get(instance_id)
        if per_inst is None or key not in per_inst:
            return False
        old = per_inst.pop(key)
        self._bytes[instance_id] -= old.size
        self._sorted.pop(instance_id, None)
        self._mark(instance_id, key, False)
        holders = self.by_key[key]
        del holders[instance_id]
        if not holders:
            del self.by_key[key]
        return True

    def drop_instance(self, instance_id: str) -> int:
        keys = self.by_instance.pop(instance_id, {})
        for key in keys:
            holders = self.by_key[key]
            del holders[instance_id]
            if not holders:
                del self.by_key[key]
        self._bytes.pop(instance_id, None)
        self._sorted.pop(instance_id, None)
        self._stale.pop(instance_id, None)
        return len(keys)

    def record_write(
        self, instance_id: str, key: str, size: int, source: str | None, now: float
    ) -> list[Change]:
        """A key_added/key_updated report. Returns every entry it changed."""
        changes: list[Change] = []
        holders = self.holders(key)
        if source is None or source == instance_id:
            # an origin write: copies pulled *earlier* are now stale. "Earlier" is judged by
            # the events' own times, because nodes replaying buffers after an outage arrive
            # in any order across nodes: a pull reported before the origin write it followed
            # must not be marked. Copies with no time (from an inventory) count as earlier.
            for other, entry in holders.items():
                if (
                    other != instance_id
                    and not entry.origin
                    and not entry.stale
                    and (entry.last_accessed is None or entry.last_accessed < now)
                ):
                    entry.stale = True
                    self._mark(other, key, True)
                    changes.append((other, key, entry))
            entry = Entry(size=size, origin=True, stale=False, last_accessed=now)
        else:
            src = holders.get(source)
            # a copy taken from a stale copy is no fresher than its source
            entry = Entry(
                size=size, origin=False, stale=src is not None and src.stale, last_accessed=now
            )
        self.put(instance_id, key, entry)
        changes.append((instance_id, key, entry))
        return changes

    def inventory(
        self, instance_id: str, keys: list[tuple[str, int, float | None]], full: bool
    ) -> tuple[int, int, int, list[Change]]:
        """Apply an inventory; returns (updated, added, removed, changes). ``updated``
        counts every key processed (each distinct key listed), as the contract's examples
        do; ``added`` those of them the map did not have."""
        current = self.by_instance.get(instance_id, {})
        updated = added = removed = 0
        changes: list[Change] = []
        listed: dict[str, tuple[int, float | None]] = {}
        for key, size, accessed in keys:
            listed[key] = (size, accessed)  # a key listed twice: its last entry
        for key, (size, accessed) in listed.items():
            old = current.get(key)
            if old is None:
                entry = Entry(size=size, last_accessed=accessed)
                added += 1
            else:
                # keep origin and the stale mark: a re-sync must not make a stale copy fresh
                entry = Entry(
                    size=size,
                    origin=old.origin,
                    stale=old.stale,
                    last_accessed=accessed if accessed is not None else old.last_accessed,
                )
            updated += 1
            self.put(instance_id, key, entry)
            changes.append((instance_id, key, entry))
        if full:
            gone = self.remove_unlisted(instance_id, listed)
            removed = len(gone)
            changes += gone
        return updated, added, removed, changes

    def remove_unlisted(self, instance_id: str, listed: Container[str]) -> list[Change]:
        """The end of a full inventory: drop the instance's keys it did not list."""
        current = self.by_instance.get(instance_id, {})
        changes: list[Change] = []
        for key in [k for k in current if k not in listed]:
            self.remove(instance_id, key)
            changes.append((instance_id, key, None))
        return changes

    def entries(self) -> Iterator[tuple[str, str, Entry]]:
        for iid, keys in self.by_instance.items():
            for key, entry in keys.items():
                yield iid, key, entry
