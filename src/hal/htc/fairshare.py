"""How many workers each session should hold (pure; Symphony's ownership and sharing).

The pool is shared in two levels: first between *users* (equal weights, so one user's many
sessions do not crowd out another user), then between each user's sessions in proportion
to their ``priority``. Within that:

- a session's ``min_workers`` is *owned*: it is granted first, whatever the shares say
  (when the owned minimums alone exceed the pool, higher priority wins);
- no session gets more than its ``max_workers`` or its demand (tasks waiting + running:
  a worker with nothing to do is better lent to someone else);
- what a session cannot use is lent to the others (water-filling), which is how workers
  move between sessions as demand changes.

``allocate`` is a pure function of its inputs; ``ReleasePolicy`` adds the time dimension
(when a surplus worker is actually taken away) with an injected clock value.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SessionDemand:
    session: str
    user: str
    priority: int  # >= 1, a weight
    min_workers: int
    max_workers: int
    demand: int  # tasks waiting + in flight


def allocate(sessions: list[SessionDemand], pool: int) -> dict[str, int]:
    """Target worker count per session for a pool of ``pool`` workers."""
    target = {s.session: 0 for s in sessions}
    if pool <= 0 or not sessions:
        return target
    left = pool
    # 1. Owned minimums, highest priority first (ties: session id, for determinism).
    for s in sorted(sessions, key=lambda s: (-s.priority, s.session)):
        grant = min(s.min_workers, s.max_workers, left)
        target[s.session] = grant
        left -= grant
    # 2. Share the rest by weight, capped by max and demand; repeat while some session
    # is capped so its unused share is lent to the others.
    cap = {s.session: max(target[s.session], min(s.max_workers, s.demand)) for s in sessions}
    weight = _weights(sessions)
    while left > 0:
        hungry = [s for s in sessions if target[s.session] < cap[s.session]]
        if not hungry:
            break
        total = sum(weight[s.session] for s in hungry)
        exact = {s.session: left * weight[s.session] / total for s in hungry}
        given = 0
        for s in hungry:
            grant = min(int(exact[s.session]), cap[s.session] - target[s.session])
            target[s.session] += grant
            given += grant
        # Whole workers left over go by largest remainder (Hamilton's method), so a
        # user with many small sessions is not rounded out of its share.
        by_remainder = sorted(
            (s for s in hungry if target[s.session] < cap[s.session]),
            key=lambda s: (-(exact[s.session] % 1), -weight[s.session], s.session),
        )
        for s in by_remainder[: left - given]:
            target[s.session] += 1
            given += 1
        if given == 0:
            break
        left -= given
    return target


def _weights(sessions: list[SessionDemand]) -> dict[str, float]:
    users: dict[str, list[SessionDemand]] = defaultdict(list)
    for s in sessions:
        users[s.user].append(s)
    weight: dict[str, float] = {}
    for own in users.values():
        total = sum(max(1, s.priority) for s in own)
        for s in own:
            weight[s.session] = max(1, s.priority) / total
    return weight


class ReleasePolicy:
    """Decides when a session's surplus workers are taken away.

    Growing is immediate, but shrinking waits: a worker is warm capital (its service is
    loaded), and demand flickers between a client's batches. A surplus is released after
    ``idle_s`` with no demand at all, or after ``reclaim_s`` while another session is
    short of its target (someone needs the slot)."""

    def __init__(self, *, idle_s: float = 10.0, reclaim_s: float = 1.0) -> None:
        self.idle_s = idle_s
        self.reclaim_s = reclaim_s
        self._surplus_since: dict[str, float] = {}

    def releasable(
        self, session: str, surplus: int, *, idle: bool, others_short: bool, now: float
    ) -> int:
        """How many of ``surplus`` workers to release now."""
        if surplus <= 0:
            self._surplus_since.pop(session, None)
            return 0
        since = self._surplus_since.setdefault(session, now)
        waited = now - since
        if (idle and waited >= self.idle_s) or (others_short and waited >= self.reclaim_s):
            self._surplus_since.pop(session, None)
            return surplus
        return 0

    def forget(self, session: str) -> None:
        self._surplus_since.pop(session, None)
