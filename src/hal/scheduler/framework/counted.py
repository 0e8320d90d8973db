"""``CountsOverTime``: one counted resource's counters held over time, for backfill
planning (Slurm's ``bf_licenses``, for any ``CountedResourcePlugin``).

The ``AvailabilityProfile`` plans nodes; this plans cluster-wide counters a job holds
while it runs, on no node (a ``CountedResourcePlugin``'s: licenses, ``-L matlab:2``).
Each use holds some of a counter over ``[start, end)``: a running job from now until its
planned end, a job backfilled now until its planned end, a reservation from its start
until its planned end (ends rounded as the availability profile rounds them, so every
instant a counter comes back is also one of its rows; ``math.inf``: held past the
planning horizon, for ever as far as planning is concerned)::

    time ─►   now           1090 (job 1 ends)         1190 (job 10's planned end)
    matlab    ├─ job 1: 2 ───┤
              ├─ job 3: 2 ──────────────────────────────────┤ (beyond the horizon)
                             ├─ reservation job 10: 2 ──────┤

It holds no totals: the plugin, which knows them, asks ``earliest`` while backfill
tries a job (``keys.COUNTS_OVER_TIME``). Built only in a backfill stage that plans a
job holding some counter; uses are few (the jobs holding counters), so queries are
plain loops.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Counts = Sequence[tuple[str, int]]  # (counter name, count) pairs: a job's ``-L`` licenses


class CountsOverTime:
    __slots__ = ("_uses",)

    def __init__(self) -> None:
        # counter name → its uses: (start, end, count)
        self._uses: dict[str, list[tuple[float, float, int]]] = {}

    def hold(self, counts: Counts, start: float, end: float) -> None:
        """``counts`` held over ``[start, end)`` (``end`` ``math.inf``: for ever)."""
        if end <= start:
            return
        for name, count in counts:
            self._uses.setdefault(name, []).append((start, end, count))

    def most_held(self, name: str, start: float, end: float) -> int:
        """The most of ``name`` held at any instant of ``[start, end)``. The count only
        rises where a use starts, so it is highest at ``start`` or at such an instant."""
        uses = self._uses.get(name)
        if not uses:
            return 0
        points = [start, *(s for s, _, _ in uses if start < s < end)]
        return max(sum(c for s, e, c in uses if s <= t < e) for t in points)

    def earliest(
        self, wanted: Counts, totals: Mapping[str, int], start: float, duration: float
    ) -> float | None:
        """The first instant from ``start`` on from which ``wanted`` is free for
        ``duration`` seconds (``start`` itself when it is free now), or None when no
        instant is (counters held for ever). Held counts only fall where a use ends, so
        only those instants are tried."""
        candidates = {start}
        for name, _ in wanted:
            candidates.update(e for _, e, _ in self._uses.get(name, ()) if start < e < math.inf)
        for t in sorted(candidates):
            if all(
                self.most_held(name, t, t + duration) + count <= totals.get(name, 0)
                for name, count in wanted
            ):
                return t
        return None

    def instants(self) -> list[float]:
        """Every instant a use ends (before for ever), sorted."""
        return sorted({e for uses in self._uses.values() for _, e, _ in uses if e < math.inf})
