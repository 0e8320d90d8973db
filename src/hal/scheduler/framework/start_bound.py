"""``StartBound``: where the head's reservation could start, without screening every row
again.

EASY's head asks for a reservation at every pass, and on a busy machine it is the same job
asking on a profile that changed only a little: a job or two ended or started. Its start
row comes from ``AvailabilityProfile.screen``: per row, how many nodes the request fits
all through the window from there; the first row with enough that the framework confirms
is the start. On a profile without reservation starts (no dips: every event a release),
those counts only grow from row to row.

So once a full screen has found the start ``S`` with at most ``before`` fitting nodes at
any earlier instant, a later profile of the same node list can only have more fitting
nodes before ``S`` on the nodes that changed in between: those whose free arrays now
differ, and those of the releases that are not the same (a job started or gone, an end
moved). Every other node has the same level at every instant, so fits where it did. When
``before`` plus the changed nodes is still short of the request, no row before ``S``
passes the screen, and ``S`` (if still a row) is the first row the full search would try:
the caller asks the framework there and, if it succeeds, has the very reservation the
full search would make. If it fails, the caller searches as before.

Kept in the ``ReleaseLedger`` (one node list, across passes); releases are named by their
ledger slots, which are valid within one ``epoch``. So is ``StartRowsMemo``: the head's
last screen itself, for a profile equal in everything it was computed from.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hal.scheduler.framework.request import NodeRequest

if TYPE_CHECKING:
    from hal.scheduler.framework.availability import AvailabilityProfile, ReleaseLedger
    from hal.scheduler.framework.node_table import BoolArray

_Key = tuple[int, NodeRequest, float, object]
# (ledger epoch, first slots, their counts, their event times): ``ledger.planned``
Planned = tuple[int, npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.float64]]


class StartBound:
    """The last full screen's start for one job, and what it rested on (module doc)."""

    __slots__ = ("_base", "_before", "_cap", "_epoch", "_first", "_key", "_mask", "_start", "_t")

    def __init__(self) -> None:
        self._key: _Key | None = None
        self._start = math.inf
        self._before = 0
        self._mask: npt.NDArray[np.bool_] = np.empty(0, dtype=np.bool_)
        self._cap: object = None
        self._base: npt.NDArray[np.int64] = np.empty((0, 0), dtype=np.int64)
        # the releases the screen saw (ledger epoch, first slots sorted, event times)
        self._epoch = 0
        self._first: npt.NDArray[np.intp] = np.empty(0, dtype=np.intp)
        self._t: npt.NDArray[np.float64] = np.empty(0)

    def remember(
        self,
        profile: AvailabilityProfile,
        ledger: ReleaseLedger,
        job_id: int,
        request: NodeRequest,
        mask: npt.NDArray[np.bool_],
        duration: float,
        start_row: int,
        counts: npt.NDArray[np.int64],
    ) -> None:
        """A full screen of ``profile`` (``counts`` per row, made while it had no dips)
        put job ``job_id``'s reservation at ``start_row``."""
        planned = _current(profile, ledger)
        self._key = None
        if planned is None:
            return
        self._epoch, first, _, t = planned
        order = np.argsort(first)  # by slot, for ``row``'s lookups
        self._first, self._t = first[order], t[order]
        self._key = _key_of(profile, job_id, request, duration)
        self._start = profile.times[start_row]
        self._before = int(counts[start_row - 1])
        self._mask = mask.copy()
        self._cap = profile.table.cap_memory
        self._base = profile.base.copy()

    def row(
        self,
        profile: AvailabilityProfile,
        ledger: ReleaseLedger,
        job_id: int,
        request: NodeRequest,
        mask: npt.NDArray[np.bool_],
        duration: float,
    ) -> int | None:
        """The row of the remembered start when no earlier row of ``profile`` can pass
        the screen for the same job; None when that cannot be told."""
        if self._key != _key_of(profile, job_id, request, duration):
            return None
        planned = _current(profile, ledger)
        if planned is None or profile.has_dips or planned[0] != self._epoch:
            return None
        times = profile.times
        k = bisect.bisect_left(times, self._start)
        if k == 0 or k == len(times) or times[k] != self._start:
            return None
        allowed = request.n_nodes - 1 - self._before  # changed nodes that cannot reach it
        if allowed < 0 or profile.table.cap_memory is not self._cap:
            return None
        if not np.array_equal(mask, self._mask):
            return None
        changed = (profile.base != self._base).any(axis=0)
        _, first, count, t = planned
        old_first, old_t = self._first, self._t
        if len(old_first):
            pos = np.minimum(np.searchsorted(old_first, first), len(old_first) - 1)
            same = (old_first[pos] == first) & (old_t[pos] == t)
        else:
            same = np.zeros(len(first), dtype=np.bool_)
        for f, c in zip(first[~same].tolist(), count[~same].tolist(), strict=True):
            changed[ledger.nodes_at(f, c)] = True
        if int(np.count_nonzero(changed & mask)) > allowed:
            return None
        return k


def _key_of(
    profile: AvailabilityProfile, job_id: int, request: NodeRequest, duration: float
) -> _Key:
    """What a remembered screen is for: the job, its request and run, the node list."""
    return (job_id, request, duration, profile.table.names)


def _current(profile: AvailabilityProfile, ledger: ReleaseLedger) -> Planned | None:
    """The releases of the ledger's last gather, which built ``profile``, when the bound
    can rest on them: no slot moved since (same epoch) and no horizon left some out."""
    planned = ledger.planned
    if planned is None or planned[0] != ledger.epoch or profile.horizon < math.inf:
        return None
    return planned


class StartRowsMemo:
    """The last ``start_rows`` answer of a profile without dips, with everything it was
    computed from (the free arrays now, the events, the rows, the request, the nodes and
    the duration): a profile equal in all of these gets the same rows without the work.
    Kept from one pass to the next: EASY's head asks the same question again after a
    pass that started nothing when only arrivals happened since. The node list is
    compared by identity (tables built on the same one share their memory caps)."""

    __slots__ = ("_arrays", "_key", "_names", "_rows")

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._key: tuple[object, ...] | None = None
        self._arrays: tuple[np.ndarray[Any, Any], ...] = ()
        self._rows: list[int] = []

    @staticmethod
    def _parts(
        profile: AvailabilityProfile, request: NodeRequest, duration: float
    ) -> tuple[tuple[object, ...], tuple[np.ndarray[Any, Any], ...]]:
        # not ``times[0]`` (now): without dips, whether a node fits from a row on does
        # not depend on where the first row starts
        return (request, duration, tuple(profile.times[1:])), (
            profile._base,
            *profile._events.view(),
        )

    def get(
        self, profile: AvailabilityProfile, request: NodeRequest, mask: BoolArray, duration: float
    ) -> list[int] | None:
        key, arrays = self._parts(profile, request, duration)
        if profile.table.names is not self._names or key != self._key:
            return None
        if not np.array_equal(mask, self._arrays[0]):
            return None
        if not all(np.array_equal(a, b) for a, b in zip(arrays, self._arrays[1:], strict=True)):
            return None
        return list(self._rows)

    def put(
        self,
        profile: AvailabilityProfile,
        request: NodeRequest,
        mask: BoolArray,
        duration: float,
        rows: list[int],
    ) -> None:
        key, arrays = self._parts(profile, request, duration)
        self._names = profile.table.names
        self._key = key
        # the events written so far never change (``_Events`` only appends), the free
        # arrays now do (a job started now) and the mask is the caller's
        base, *events = arrays
        self._arrays = (mask.copy(), base.copy(), *events)
        self._rows = list(rows)
