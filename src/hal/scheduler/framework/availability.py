"""``AvailabilityProfile``: the cluster's free resources over time, for backfill planning.

Row ``k`` holds, per node, what is free from ``times[k]`` until ``times[k + 1]`` (the last
row lasts for ever)::

    time ─►  now        t1 (job 7 ends)     t2 (job 9 ends)     t3 (reservation ends)
    row       0           1                   2                   3
    free    [table]   [+job 7's nodes]    [+job 9's nodes]     [...]
                       ├─── reservation for job 12: subtracted from rows 1..2 ───┤

It starts from the pass's ``NodeTable`` (running jobs and this pass's placements taken
out), gives back each running job's nodes at its *expected* end (a prediction, rounded up
to the resolution), and every reservation made while planning is subtracted from the rows
it covers. Five arrays per row mirror the table's free arrays; a window's view is the
least free (most jobs) over its rows, which is what a job running through the whole
window can count on.

Breakpoints past the planning horizon (``bf_window``) are dropped: a job that ends after
the horizon holds its nodes for ever as far as planning is concerned, as in Slurm.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

import numpy as np

from hal.scheduler.framework.node_table import AllocationRows, BoolArray, IntArray, NodeTable
from hal.scheduler.framework.request import NodeRequest

# The arrays of one row, in this order everywhere: free cpus, memory, gpus (the least over
# a window), and jobs_on, exclusive_on (the most over a window).
_N_ARRAYS = 5


def round_up(t: float, resolution: float) -> float:
    """``t`` rounded up to a multiple of ``resolution`` (Slurm's bf_resolution)."""
    if resolution <= 1e-9:
        return t
    return math.ceil(t / resolution - 1e-9) * resolution


class AvailabilityProfile:
    __slots__ = ("_prefix", "_totals", "arrays", "horizon", "now", "resolution", "table", "times")

    def __init__(
        self,
        table: NodeTable,
        now: float,
        releases: Iterable[tuple[float, AllocationRows, bool]],
        *,
        resolution: float = 1.0,
        horizon: float = math.inf,
    ) -> None:
        """``releases``: (expected end, allocation, exclusive) of every job holding
        resources in ``table``. Ends at or before ``now`` count as ending one resolution
        step from now: the job is overdue and about to be killed or to finish."""
        self.table = table
        self.now = now
        self.resolution = resolution
        self.horizon = horizon
        step = max(resolution, 1.0)
        by_time: dict[float, list[tuple[AllocationRows, bool]]] = {}
        for end, rows, exclusive in releases:
            t = round_up(max(end, now + step), resolution)
            if t >= horizon:
                continue
            by_time.setdefault(t, []).append((rows, exclusive))
        self.times: list[float] = [now, *sorted(by_time)]
        n_rows, n_nodes = len(self.times), len(table)
        # Deltas per row, then a running sum. All releases are scattered at once
        # (bincount over flat row*nodes indices): one call per array, not one per job.
        delta = np.zeros((_N_ARRAYS, n_rows, n_nodes), dtype=np.int64)
        if n_rows > 1:
            flat: list[np.ndarray] = []
            amounts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
            excl: list[np.ndarray] = []
            for k, t in enumerate(self.times[1:], start=1):
                for ar, exclusive in by_time[t]:
                    idx = ar.rows + k * n_nodes
                    flat.append(idx)
                    amounts.append((ar.cpus, ar.memory, ar.gpus))
                    if exclusive:
                        excl.append(idx)
            idx_all = np.concatenate(flat)
            size = n_rows * n_nodes
            view = delta.reshape(_N_ARRAYS, size)
            for i in range(3):
                weights = np.concatenate([a[i] for a in amounts])
                view[i] = np.bincount(idx_all, weights=weights, minlength=size).astype(np.int64)
            view[3] = -np.bincount(idx_all, minlength=size)
            if excl:
                view[4] = -np.bincount(np.concatenate(excl), minlength=size)
        delta[0, 0] = table.free_cpus
        delta[1, 0] = table.free_memory
        delta[2, 0] = table.free_gpus
        delta[3, 0] = table.jobs_on
        delta[4, 0] = table.exclusive_on
        self.arrays = np.cumsum(delta, axis=1)
        # Least free (most held) over rows 0..k, built on first use and then kept up to
        # date by ``reserve`` and ``_split`` column by column: rebuilding it for every
        # backfilled job cost O(rows × nodes) each (most of a 10,000-job pass).
        self._prefix: np.ndarray | None = None
        # key → (partition mask, its free CPUs summed per row of ``_prefix``)
        self._totals: dict[str, tuple[BoolArray, IntArray]] = {}

    def __len__(self) -> int:
        return len(self.times)

    # -- windows ----------------------------------------------------------------------

    def last_row_before(self, end: float) -> int:
        """The last row that starts before ``end`` (a window ending at ``end`` covers
        rows up to it)."""
        return max(bisect.bisect_left(self.times, end) - 1, 0)

    def window(self, first: int, end: float) -> NodeTable:
        """What a job running from ``times[first]`` until ``end`` can count on, as a
        read-only table."""
        last = max(self.last_row_before(end), first)
        if first == 0:
            agg = self._prefix_rows()[:, last].copy()  # the prefix changes in place
        else:
            rows = self.arrays[:, first : last + 1]
            agg = np.concatenate((rows[:3].min(axis=1), rows[3:].max(axis=1)))
        return self.table.with_free(agg[0], agg[1], agg[2], agg[3], agg[4])

    def _prefix_rows(self) -> np.ndarray:
        if self._prefix is None:
            low = np.minimum.accumulate(self.arrays[:3], axis=1)
            high = np.maximum.accumulate(self.arrays[3:], axis=1)
            self._prefix = np.concatenate((low, high))
        return self._prefix

    def free_cpus_from_now(self, end: float, partition_mask: BoolArray, key: str) -> int:
        """Total CPUs free on ``partition_mask``'s nodes throughout ``[now, end)``: a cheap
        necessary condition before asking the framework (a job needing more cannot fit)."""
        found = self._totals.get(key)
        if found is None:
            totals = self._prefix_rows()[0][:, partition_mask].sum(axis=1)
            found = self._totals[key] = (partition_mask, totals)
        return int(found[1][self.last_row_before(end)])

    def start_rows(self, request: NodeRequest, mask: BoolArray, duration: float) -> list[int]:
        """Rows ``k`` at whose start ``request`` could hold its nodes for ``duration``,
        by resources alone, in time order.

        A screen, not the decision: a row missing here cannot work (too few nodes with
        enough free cpus, memory and GPUs all through the window); a row listed here is
        confirmed by the framework's Filter plugins. One vector pass over every row.
        """
        a = self.arrays
        ok = (a[0] >= request.cpus) & mask
        if request.memory_bytes is None:
            ok &= a[1] >= self.table.cap_memory
        elif request.memory_bytes:
            ok &= a[1] >= request.memory_bytes
        if request.gpus:
            ok &= a[2] >= request.gpus
        ok &= (a[3] == 0) if request.exclusive else (a[4] == 0)
        bad = np.zeros((len(self.times) + 1, ok.shape[1]), dtype=np.int32)
        np.cumsum(~ok, axis=0, out=bad[1:])
        starts = np.asarray(self.times)
        last = np.searchsorted(starts, starts + duration, side="left") - 1
        last = np.maximum(last, np.arange(len(starts)))
        free_through = (bad[last + 1] - bad[: len(starts)]) == 0
        enough = np.count_nonzero(free_through, axis=1) >= request.n_nodes
        return [int(k) for k in np.flatnonzero(enough)]

    # -- reservations -----------------------------------------------------------------

    def reserve(self, start: float, end: float, rows: AllocationRows, exclusive: bool) -> None:
        """Take ``rows`` out of every row in ``[start, end)``, splitting rows at both ends
        so the reservation starts and stops exactly there."""
        end = round_up(end, self.resolution)
        self._split([start, end] if end < self.horizon else [start])
        first = bisect.bisect_left(self.times, start)
        last = bisect.bisect_left(self.times, end) if end < self.horizon else len(self.times)
        sl = slice(first, last)
        idx = rows.rows
        a = self.arrays
        # a[i] first: a[i, sl, idx] would put the indexed axis first (numpy's rule for
        # advanced indices separated by a slice).
        a[0][sl, idx] -= rows.cpus
        a[1][sl, idx] -= rows.memory
        a[2][sl, idx] -= rows.gpus
        a[3][sl, idx] += 1
        if exclusive:
            a[4][sl, idx] += 1
        prefix = self._prefix
        if prefix is not None:
            # Only the reserved nodes' columns change: redo their running min/max.
            sub = a[:, :, idx]
            cols = np.concatenate(
                (np.minimum.accumulate(sub[:3], axis=1), np.maximum.accumulate(sub[3:], axis=1))
            )
            if self._totals:
                diff = cols[0] - prefix[0][:, idx]
                for mask, totals in self._totals.values():
                    totals += diff[:, mask[idx]].sum(axis=1)
            prefix[:, :, idx] = cols

    def _split(self, instants: list[float]) -> None:
        """Make rows start at each of ``instants`` (a new row is a copy of the row that
        covered it), with one array copy for all of them."""
        times = self.times
        new = sorted({t for t in instants if t > times[0] and t not in times})
        if not new:
            return
        positions = [bisect.bisect_left(times, t) for t in new]
        covering = [p - 1 for p in positions]
        self.arrays = np.insert(self.arrays, positions, self.arrays[:, covering], axis=1)
        if self._prefix is not None:
            # A new row copies the row covering it, so its prefix is that row's prefix.
            self._prefix = np.insert(self._prefix, positions, self._prefix[:, covering], axis=1)
            for key, (mask, totals) in self._totals.items():
                self._totals[key] = (mask, np.insert(totals, positions, totals[covering]))
        for t in new:
            bisect.insort(times, t)
