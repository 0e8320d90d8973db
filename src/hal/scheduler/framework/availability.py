"""``AvailabilityProfile``: the cluster's free resources over time, for backfill planning.

Row ``k`` stands for what is free from ``times[k]`` until ``times[k + 1]`` (the last row
lasts for ever)::

    time ─►  now        t1 (job 7 ends)     t2 (job 9 ends)     t3 (reservation ends)
    row       0           1                   2                   3
    free    [table]   [+job 7's nodes]    [+job 9's nodes]     [...]
                       ├─── reservation for job 12: subtracted from rows 1..2 ───┤

It starts from the pass's ``NodeTable`` (running jobs and this pass's placements taken
out), gives back each running job's nodes at its *expected* end (a prediction, rounded up
to the resolution), and every reservation made while planning is subtracted from the rows
it covers. A window's view is the least free (most jobs) over its rows, which is what a
job running through the whole window can count on.

Rows are not stored as rows × nodes arrays (1,440 rows a day at bf_resolution 60 s:
1.2 GB at 10,000 nodes). What is stored is *change points*: the free arrays at ``now``
(``_base``: five arrays over the nodes) and one event per node and instant where they
change (a release: +free; a reservation's start: −free, its end: +free). Row ``k`` of a
node is ``_base`` plus its events at or before ``times[k]``. Two facts keep every query
cheap:

* releases and reservation ends only add free; only a reservation's start takes some
  away. So the least free over a window is the free at its first row, lowered at the
  nodes where a reservation starts inside the window, to their level just after that
  start (a *dip*, kept with its level relative to ``_base``, updated as events arrive);
* a job started *now* takes from ``_base`` itself and gives back at its end (an event),
  exactly like a running job.

Breakpoints past the planning horizon (``bf_window``) are dropped: a job that ends after
the horizon holds its nodes for ever as far as planning is concerned, as in Slurm.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from hal.core.job import Allocation, Job
from hal.core.preemption import holding
from hal.scheduler.framework.node_table import AllocationRows, BoolArray, IntArray, NodeTable
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.start_bound import Planned, StartBound, StartRowsMemo

# ``start_rows`` materialises rows × nodes with events up to this many cells, else it
# works per stretch of rows (``_block``). Measured on profiles captured from simulations
# (SDSC-SP2 on 128 one-core nodes, KTH-SP2 conservative, CEA-Curie on 5,040 16-core
# nodes), the stretches were faster at every size (65 against 80 us; 180-100 against
# 300-270 us), so the dense form is kept only for the tests that compare the two.
_DENSE_CELLS = 0
# ``start_rows`` on a profile without dips counts each node from the first row it fits
# (``_first_fits``); off only in the tests that compare it with the stretches.
_RISING = True

# The arrays of one row, in this order everywhere: free cpus, memory, gpus (the least over
# a window), and jobs_on, exclusive_on (the most over a window).
_N_ARRAYS = 5
_LOW = 3  # arrays [0, _LOW) are "least over a window", the others "most"

Matrix = npt.NDArray[np.int64]  # (n, 5): one delta per node (or event) and array
Rows = npt.NDArray[np.intp]
_NO_ROWS: Rows = np.empty(0, dtype=np.intp)
_NO_LOW: Matrix = np.empty((_N_ARRAYS, 0), dtype=np.int64)


def round_up(t: float, resolution: float) -> float:
    """``t`` rounded up to a multiple of ``resolution`` (Slurm's bf_resolution)."""
    if resolution <= 1e-9:
        return t
    return math.ceil(t / resolution - 1e-9) * resolution


def round_up_many(t: npt.NDArray[np.float64], resolution: float) -> npt.NDArray[np.float64]:
    """``round_up`` element by element, with the same float operations."""
    if resolution <= 1e-9:
        return t
    return np.ceil(t / resolution - 1e-9) * resolution


_A = TypeVar("_A", bound=np.ndarray[Any, Any])


def _grown(arr: _A, rows: int, used: int) -> _A:
    """``arr`` with room for ``rows`` rows, its first ``used`` kept (``np.resize`` would
    also fill the rest by repeating the data: twice the work for nothing)."""
    out = np.empty((rows, *arr.shape[1:]), dtype=arr.dtype)
    out[:used] = arr[:used]
    return out  # type: ignore[return-value]


class _Events:
    """Change points: (instant, node, delta of the five arrays), in arrival order, in
    arrays that grow by doubling."""

    __slots__ = ("delta", "node", "size", "time")

    def __init__(self, capacity: int = 64) -> None:
        self.time = np.empty(capacity, dtype=np.float64)
        self.node: Rows = np.empty(capacity, dtype=np.intp)
        self.delta: Matrix = np.empty((capacity, _N_ARRAYS), dtype=np.int64)
        self.size = 0

    def add(self, time: float | npt.NDArray[np.float64], nodes: Rows, delta: Matrix) -> None:
        n, end = len(nodes), self.size + len(nodes)
        if end > len(self.time):
            grow = max(end, 2 * len(self.time))
            self.time = _grown(self.time, grow, self.size)
            self.node = _grown(self.node, grow, self.size)
            self.delta = _grown(self.delta, grow, self.size)
        self.time[self.size : end] = time
        self.node[self.size : end] = nodes
        self.delta[self.size : end] = delta
        self.size += n

    def add_columns(self, time: float, ar: AllocationRows, exclusive: bool) -> None:
        """``add`` for the release of ``ar`` (as ``_deltas(ar, exclusive, 1)``)."""
        end = self.size + len(ar.rows)
        if end > len(self.time):
            self.add(time, ar.rows, _deltas(ar, exclusive, 1))
            return
        at = slice(self.size, end)
        self.time[at] = time
        self.node[at] = ar.rows
        delta = self.delta
        delta[at, 0] = ar.cpus
        delta[at, 1] = ar.memory
        delta[at, 2] = ar.gpus
        delta[at, 3] = -1
        delta[at, 4] = -1 if exclusive else 0
        self.size = end

    def add_one(self, time: float, ar: AllocationRows, exclusive: bool) -> None:
        """``add_columns`` for an allocation of one node."""
        at = self.size
        if at >= len(self.time):
            self.add(time, ar.rows, _deltas(ar, exclusive, 1))
            return
        self.time[at] = time
        self.node[at] = ar.rows[0]
        self.delta[at] = (ar.cpus[0], ar.memory[0], ar.gpus[0], -1, -1 if exclusive else 0)
        self.size = at + 1

    def view(self) -> tuple[npt.NDArray[np.float64], Rows, Matrix]:
        n = self.size
        return self.time[:n], self.node[:n], self.delta[:n]


def _deltas(ar: AllocationRows, exclusive: bool, sign: int) -> Matrix:
    """The change a release (``sign`` +1) or a reservation's start (-1) makes on each of
    ``ar``'s nodes."""
    d = np.empty((len(ar.rows), _N_ARRAYS), dtype=np.int64)
    d[:, 0] = sign * ar.cpus
    d[:, 1] = sign * ar.memory
    d[:, 2] = sign * ar.gpus
    d[:, 3] = -sign
    d[:, 4] = -sign if exclusive else 0
    return d


def _positions(sorted_nodes: Rows, nodes: Rows) -> tuple[Rows, BoolArray]:
    """Where each of ``nodes`` is in ``sorted_nodes``, and whether it is there at all."""
    pos = np.searchsorted(sorted_nodes, nodes)
    pos = np.minimum(pos, len(sorted_nodes) - 1)
    return pos, sorted_nodes[pos] == nodes


class AvailabilityProfile:
    __slots__ = (
        "_base",
        "_below",
        "_dip_instants",
        "_dip_node",
        "_dip_rel",
        "_dip_time",
        "_dipped",
        "_dips_distinct",
        "_events",
        "_low_cpus",
        "_lows",
        "_memo",
        "_row_level",
        "_totals",
        "_windows",
        "horizon",
        "now",
        "resolution",
        "table",
        "times",
    )

    def __init__(
        self,
        table: NodeTable,
        now: float,
        releases: Iterable[tuple[float, AllocationRows, bool]],
        *,
        resolution: float = 1.0,
        horizon: float = math.inf,
        gathered: tuple[list[float], _Events] | None = None,
        memo: StartRowsMemo | None = None,
    ) -> None:
        """``releases``: (expected end, allocation, exclusive) of every job holding
        resources in ``table``. Ends at or before ``now`` count as ending one resolution
        step from now: the job is overdue and about to be killed or to finish.
        ``gathered``: the rows and release events made otherwise (``ReleaseLedger``);
        ``releases`` is then not read. ``memo``: kept from one profile to the next
        (``StartRowsMemo``), for ``table``'s node list only."""
        self._memo = memo
        # The last row level ``window`` made, as (instant, event count, level): still
        # true while no event is added and ``_base`` is not changed (a reservation there
        # starts from it)
        self._row_level: tuple[float, int, Matrix] | None = None
        self.table = table
        self.now = now
        self.resolution = resolution
        self.horizon = horizon
        if gathered is not None:
            self.times, self._events = gathered
        else:
            self.times, self._events = _gather_releases(now, releases, resolution, horizon)
        # (a new array: ``np.stack`` copies, so int64 columns need no second copy)
        self._base: Matrix = np.stack(
            (table.free_cpus, table.free_memory, table.free_gpus, table.jobs_on, table.exclusive_on)
        ).astype(np.int64, copy=False)
        # Dips: where a reservation starts (instant, node) and the node's level just
        # after it, relative to ``_base`` (the sum of its events up to that instant).
        self._dip_time = np.empty(0, dtype=np.float64)
        self._dip_instants: list[float] = []  # the distinct instants of the dips, sorted
        self._dip_node: Rows = np.empty(0, dtype=np.intp)
        self._dip_rel: Matrix = np.empty((0, _N_ARRAYS), dtype=np.int64)
        self._dipped = np.zeros(len(table), dtype=np.bool_)  # nodes with a dip
        self._dips_distinct = True  # no node has two dips
        # Until the dips change: per number of dip instants a window from now covers
        # (windows ending between two of them see the same dips), the dipped nodes and
        # how far below ``_base`` the window goes there; per (key, that number), that
        # for the key's CPUs in all.
        self._lows: dict[int, tuple[Rows, Matrix]] = {}
        self._below: dict[int, Matrix] = {}  # the same over every node (``_below_from_now``)
        self._low_cpus: dict[tuple[str, int], int] = {}
        # key → [partition mask, CPUs free now on it], kept up to date by ``reserve``
        self._totals: dict[str, tuple[BoolArray, list[int]]] = {}
        # windows from now, per number of dip instants covered, until ``_base`` or the
        # dips change (the backfill stage asks one per job it tries to start)
        self._windows: dict[int, NodeTable] = {}

    def __len__(self) -> int:
        return len(self.times)

    @property
    def base(self) -> Matrix:
        """The free arrays now, one row per array (not to be written)."""
        return self._base

    @property
    def dip_instants(self) -> list[float]:
        """The instants after now at which a reservation starts, sorted (not to be
        written): a window from now has less free only where it covers one."""
        return self._dip_instants

    @property
    def has_dips(self) -> bool:
        """Whether a reservation starts after now (else every event is a release)."""
        return bool(len(self._dip_time))

    # -- windows ----------------------------------------------------------------------

    def last_row_before(self, end: float) -> int:
        """The last row that starts before ``end`` (a window ending at ``end`` covers
        rows up to it)."""
        return max(bisect.bisect_left(self.times, end) - 1, 0)

    def window(self, first: int, end: float) -> NodeTable:
        """What a job running from ``times[first]`` until ``end`` can count on, as a
        read-only table, valid until the next ``reserve`` (a window from now with no
        reservation starting inside it shares the profile's arrays; windows from now are
        kept until then: the same table for every job whose window covers the same
        reservation starts)."""
        last = max(self.last_row_before(end), first)
        if first == 0:
            until = self.times[last]
            covered = bisect.bisect_right(self._dip_instants, until)
            window = self._windows.get(covered)
            if window is not None:
                return window
            below = self._below_from_now(covered, until)
            agg = self._base if below is None else self._base + below
            window = self._windows[covered] = self.table.with_free(*agg)
            return window
        agg = self._level(first)
        sel = self._dips_in(self.times[first], self.times[last])
        if not len(sel):
            self._row_level = (self.times[first], self._events.size, agg)
        else:
            nodes = self._dip_node[sel]
            values = self._base[:, nodes] + self._dip_rel[sel].T
            for i in range(_N_ARRAYS):
                at = np.minimum.at if i < _LOW else np.maximum.at
                at(agg[i], nodes, values[i])
        return self.table.with_free(agg[0], agg[1], agg[2], agg[3], agg[4])

    def _level(self, k: int) -> Matrix:
        """Row ``k`` (a fresh (5, nodes) array)."""
        level = self._base.copy()
        if k == 0:
            return level  # no event is at ``now``
        times, nodes, delta = self._events.view()
        sel = np.flatnonzero(times <= self.times[k])
        if len(sel):
            at = nodes[sel]
            for i in range(_N_ARRAYS):
                np.add.at(level[i], at, delta[sel, i])
        return level

    def _dips_in(self, after: float, until: float) -> Rows:
        """Indices of the dips at instants in ``(after, until]``."""
        t = self._dip_time
        if not len(t):
            return _NO_ROWS
        return np.flatnonzero((t > after) & (t <= until))

    def _low_from_now(self, until: float) -> tuple[Rows, Matrix]:
        """The nodes with a dip in ``(now, until]`` and, per node, what a window from now
        to then has below ``_base`` (negative: less free; the "most" arrays positive):
        the lowest of their dips, or nothing when every dip stays above ``_base``."""
        covered = bisect.bisect_right(self._dip_instants, until)
        if not covered:
            return _NO_ROWS, _NO_LOW
        found = self._lows.get(covered)
        if found is not None:
            return found
        sel = self._dips_in(self.now, until)
        if not len(sel):
            found = (_NO_ROWS, _NO_LOW)
        elif self._dips_distinct:
            # one dip per node (a single reservation, EASY's case): nothing to group
            rel = self._dip_rel[sel]
            low = np.empty((_N_ARRAYS, len(sel)), dtype=np.int64)
            np.minimum(rel[:, :_LOW].T, 0, out=low[:_LOW])
            np.maximum(rel[:, _LOW:].T, 0, out=low[_LOW:])
            found = (self._dip_node[sel], low)
        else:
            order = np.argsort(self._dip_node[sel], kind="stable")
            nodes = self._dip_node[sel][order]
            rel = self._dip_rel[sel][order]
            heads = np.flatnonzero(_run_starts(nodes))
            low = np.empty((_N_ARRAYS, len(heads)), dtype=np.int64)
            low[:_LOW] = np.minimum(np.minimum.reduceat(rel[:, :_LOW], heads), 0).T
            low[_LOW:] = np.maximum(np.maximum.reduceat(rel[:, _LOW:], heads), 0).T
            found = (nodes[heads], low)
        self._lows[covered] = found
        return found

    def _below_from_now(self, covered: int, until: float) -> Matrix | None:
        """``_low_from_now(until)`` (which covers the first ``covered`` dip instants)
        spread over every node: zero where no dip is, None when nothing is below
        ``_base``. Kept until the dips change, while a start now changes only
        ``_base``: each start's new window from now is then one addition over the
        arrays, not a gather and scatter at every dipped node."""
        found = self._below.get(covered)
        if found is None:
            nodes, low = self._low_from_now(until)
            if not len(nodes):
                return None
            found = np.zeros_like(self._base)
            found[:, nodes] = low
            self._below[covered] = found
        return found

    def free_cpus_from_now(self, end: float, partition_mask: BoolArray, key: str) -> int:
        """Total CPUs free on ``partition_mask``'s nodes throughout ``[now, end)``: a cheap
        necessary condition before asking the framework (a job needing more cannot fit)."""
        until = self.times[self.last_row_before(end)]
        covered = bisect.bisect_right(self._dip_instants, until)
        return self._free_covering(covered, partition_mask, key)

    def free_cpus_steps(self, partition_mask: BoolArray, key: str) -> tuple[list[float], list[int]]:
        """``free_cpus_from_now`` for every end at once, as a step function: a window
        ending at ``end`` covers the dips at the ``instants`` before ``end`` (every dip
        is at a row's start, and the window's rows are those starting before ``end``),
        so it has ``values[bisect.bisect_left(instants, end)]`` CPUs free all through
        (plain lists: the caller reads them one job at a time)."""
        instants = self._dip_instants
        covering = self._free_covering
        values = [covering(c, partition_mask, key) for c in range(len(instants) + 1)]
        return list(instants), values

    def _free_covering(self, covered: int, partition_mask: BoolArray, key: str) -> int:
        """CPUs free on the mask's nodes throughout a window from now that covers the
        first ``covered`` dip instants."""
        found = self._totals.get(key)
        if found is None:
            total = int(self._base[0][partition_mask].sum())
            found = self._totals[key] = (partition_mask, [total])
        if not covered:
            return found[1][0]  # no reservation starts inside the window
        low = self._low_cpus.get((key, covered))
        if low is None:
            nodes, below = self._low_from_now(self._dip_instants[covered - 1])
            low = int(below[0][partition_mask[nodes]].sum()) if len(nodes) else 0
            self._low_cpus[(key, covered)] = low
        return found[1][0] + low

    def start_rows(self, request: NodeRequest, mask: BoolArray, duration: float) -> list[int]:
        """Rows ``k`` at whose start ``request`` could hold its nodes for ``duration``,
        by resources alone, in time order.

        A screen, not the decision: a row missing here cannot work (too few nodes with
        enough free cpus, memory and GPUs all through the window); a row listed here is
        confirmed by the framework's Filter plugins. Nodes without events fit at every
        row or at none; for the others, each stretch of rows where they do not fit rules
        out the start rows whose window would overlap it.
        """
        return self.screen(request, mask, duration)[0]

    def screen(
        self, request: NodeRequest, mask: BoolArray, duration: float
    ) -> tuple[list[int], IntArray | None]:
        """``start_rows``, and per row how many nodes pass the screen (None when the
        memo answered)."""
        memo = self._memo if not len(self._dip_time) else None
        if memo is not None:
            found = memo.get(self, request, mask, duration)
            if found is not None:
                return found, None
        counts = self._free_rows(request, mask, duration)
        rows: list[int] = np.flatnonzero(counts >= request.n_nodes).tolist()
        if memo is not None:
            memo.put(self, request, mask, duration, rows)
        return rows, counts

    def _free_rows(self, request: NodeRequest, mask: BoolArray, duration: float) -> IntArray:
        """Per row, how many of the mask's nodes ``request`` fits all through a window of
        ``duration`` from there."""
        times = np.asarray(self.times)
        n_rows = len(times)
        ev_time, ev_node, ev_delta = self._events.view()
        inside = mask[ev_node]
        if not inside.all():
            ev_time, ev_node, ev_delta = ev_time[inside], ev_node[inside], ev_delta[inside]
        changing = np.zeros(len(mask), dtype=np.bool_)
        changing[ev_node] = True
        steady = mask & ~changing
        fits_now = self._fits(request, self._base, self.table.cap_memory)
        count = int(np.count_nonzero(fits_now[steady]))
        cols = np.flatnonzero(changing)
        if not len(cols):
            free_rows = np.full(n_rows, count)
        elif _RISING and not len(self._dip_time):
            # every event is a release: a node that fits at a row fits at every later
            # one, so it fits all through any window that starts where it first fits
            first = self._first_fits(request, times, ev_time, ev_node, ev_delta)
            free_rows = count + np.cumsum(np.bincount(first, minlength=n_rows + 1)[:n_rows])
        else:
            # start row k covers rows k..end_row[k] (non-decreasing in k)
            end_row = np.searchsorted(times, times + duration, side="left") - 1
            end_row = np.maximum(end_row, np.arange(n_rows))
            if n_rows * len(cols) <= _DENSE_CELLS:
                free_rows = count + self._fit_through(
                    request, times, end_row, cols, ev_time, ev_node, ev_delta
                )
            else:
                blocked = np.zeros(n_rows + 1, dtype=np.int64)
                self._block(request, times, end_row, ev_time, ev_node, ev_delta, blocked)
                free_rows = count + len(cols) - np.cumsum(blocked[:-1])
        return np.asarray(free_rows, dtype=np.int64)

    def _fit_through(
        self,
        request: NodeRequest,
        times: npt.NDArray[np.float64],
        end_row: Rows,
        cols: Rows,
        ev_time: npt.NDArray[np.float64],
        ev_node: Rows,
        ev_delta: Matrix,
    ) -> npt.NDArray[np.intp]:
        """Per start row, how many of the nodes ``cols`` (those with events) fit all
        through its window: rows × those nodes, materialised (small profiles only)."""
        n_rows, n_cols = len(times), len(cols)
        cell = np.searchsorted(times, ev_time) * n_cols + np.searchsorted(cols, ev_node)
        level = np.zeros((n_rows * n_cols, _N_ARRAYS), dtype=np.int64)
        for i in range(_N_ARRAYS):  # one column at a time: ``add.at``'s fast path
            np.add.at(level[:, i], cell, ev_delta[:, i])
        level = np.cumsum(level.reshape(n_rows, n_cols, _N_ARRAYS), axis=0)
        level += self._base[:, cols].T
        ok = self._fits(request, level.transpose(2, 0, 1), self.table.cap_memory[cols])
        bad = np.zeros((n_rows + 1, n_cols), dtype=np.int64)
        np.cumsum(~ok, axis=0, out=bad[1:])
        through = (bad[end_row + 1] - bad[:n_rows]) == 0
        counts: npt.NDArray[np.intp] = np.count_nonzero(through, axis=1)
        return counts

    def _first_fits(
        self,
        request: NodeRequest,
        times: npt.NDArray[np.float64],
        ev_time: npt.NDArray[np.float64],
        ev_node: Rows,
        ev_delta: Matrix,
    ) -> Rows:
        """Per node with events, the first row at which ``request`` fits it (``len(times)``:
        none), for a profile whose events are all releases (no dips): free resources then
        only grow from row to row, so fitting is for good once it starts."""
        n_rows = len(times)
        cap = self.table.cap_memory
        once = np.bincount(ev_node, minlength=len(self.table))[ev_node] == 1
        # nodes with one event (most: a node held by one running job), without sorting
        node, delta = ev_node[once], ev_delta[once]
        base = self._base[:, node]
        row = np.searchsorted(times, ev_time[once])
        never = np.full(len(node), n_rows, dtype=np.intp)
        first = np.where(
            self._fits(request, base, cap[node]),
            0,
            np.where(self._fits(request, base + delta.T, cap[node]), row, never),
        )
        many = ~once
        if not many.any():
            return first
        order = np.lexsort((ev_time[many], ev_node[many]))
        node, delta = ev_node[many][order], ev_delta[many][order]
        row = np.searchsorted(times, ev_time[many][order])
        # each node's level after each of its events: base + running sum within the node
        heads = np.flatnonzero(_run_starts(node))
        csum = np.cumsum(delta, axis=0)
        before = (csum - delta)[heads]
        level = (
            self._base[:, node]
            + (csum - np.repeat(before, np.diff(heads, append=len(node)), axis=0)).T
        )
        at = np.where(self._fits(request, level, cap[node]), row, n_rows)
        h_node = node[heads]
        now_ok = self._fits(request, self._base[:, h_node], cap[h_node])
        firsts = np.where(now_ok, 0, np.minimum.reduceat(at, heads))
        return np.concatenate((first, firsts))

    def _fits(self, request: NodeRequest, level: Matrix, cap_memory: IntArray) -> BoolArray:
        """Whether ``request`` fits one node at ``level`` (one column per node;
        ``cap_memory``: those nodes' memory)."""
        return request.fits(level[0], level[1], level[2], level[3], level[4], cap_memory)

    def _block(
        self,
        request: NodeRequest,
        times: npt.NDArray[np.float64],
        end_row: Rows,
        ev_time: npt.NDArray[np.float64],
        ev_node: Rows,
        ev_delta: Matrix,
        blocked: npt.NDArray[np.int64],
    ) -> None:
        """Add to ``blocked`` (a difference array over start rows) the nodes with events,
        at the start rows whose window meets a stretch of rows where they do not fit."""
        once = np.bincount(ev_node, minlength=len(self.table))[ev_node] == 1
        if once.any():
            self._block_once(
                request, end_row, ev_time[once], ev_node[once], ev_delta[once], blocked
            )
            many = ~once
            ev_time, ev_node, ev_delta = ev_time[many], ev_node[many], ev_delta[many]
            if not len(ev_node):
                return
        n_rows = len(times)
        order = np.lexsort((ev_time, ev_node))
        node, delta = ev_node[order], ev_delta[order]
        row = np.searchsorted(times, ev_time[order])
        # each node's level after each of its events: base + running sum within the node
        first = _run_starts(node)
        csum = np.cumsum(delta, axis=0)
        before = (csum - delta)[first]  # the sum before each node's first event
        level = self._base[:, node] + (csum - before[np.cumsum(first) - 1]).T
        # a row has the level after its last event on that node
        last = np.ones(len(node), dtype=np.bool_)
        last[:-1] = (node[1:] != node[:-1]) | (row[1:] != row[:-1])
        g_node, g_row = node[last], row[last]
        g_ok = self._fits(request, level[:, last], self.table.cap_memory[g_node])
        # stretches of rows per node: [0, first event) at the base level, then from each
        # event's row to the next one's (the last one to the end)
        heads = np.flatnonzero(_run_starts(g_node))
        h_node = g_node[heads]
        h_ok = self._fits(request, self._base[:, h_node], self.table.cap_memory[h_node])
        s_node = np.insert(g_node, heads, h_node)
        s_from = np.insert(g_row, heads, 0)
        s_ok = np.insert(g_ok, heads, h_ok)
        s_to = np.append(s_from[1:], n_rows)
        s_to[np.append(s_node[1:] != s_node[:-1], True)] = n_rows
        bad = ~s_ok
        b_node, b_from, b_to = s_node[bad], s_from[bad], s_to[bad]
        if not len(b_node):
            return
        # start row k meets [b_from, b_to) when k < b_to and end_row[k] >= b_from
        k_from = np.searchsorted(end_row, b_from, side="left")
        k_to = b_to
        # one node's stretches may rule out the same start rows: count each row once
        same = np.zeros(len(b_node), dtype=np.bool_)
        same[1:] = b_node[1:] == b_node[:-1]
        prev_to = np.zeros(len(b_node), dtype=k_to.dtype)
        prev_to[1:] = k_to[:-1]
        k_from = np.where(same, np.maximum(k_from, prev_to), k_from)
        keep = k_to > k_from
        _count(blocked, k_from[keep], k_to[keep])

    def _block_once(
        self,
        request: NodeRequest,
        end_row: Rows,
        ev_time: npt.NDArray[np.float64],
        ev_node: Rows,
        ev_delta: Matrix,
        blocked: npt.NDArray[np.int64],
    ) -> None:
        """``_block`` for nodes with a single event (most of them: a node held by one
        running job), with no sorting: rows ``[0, row)`` are at the base level, the rest
        at base + the event. Both stretches bad rule out every start row; only the first
        rules out ``[0, row)``; only the second, the rows whose window reaches ``row``."""
        n_rows = len(end_row)
        row = np.searchsorted(self.times, ev_time)
        cap = self.table.cap_memory[ev_node]
        base = self._base[:, ev_node]
        ok_before = self._fits(request, base, cap)
        ok_after = self._fits(request, base + ev_delta.T, cap)
        both = ~ok_before & ~ok_after
        first = ~ok_before & ok_after
        second = ok_before & ~ok_after
        k_from = np.concatenate(
            (
                np.zeros(int(both.sum()) + int(first.sum()), dtype=np.intp),
                np.searchsorted(end_row, row[second], side="left"),
            )
        )
        k_to = np.concatenate(
            (
                np.full(int(both.sum()), n_rows, dtype=np.intp),
                row[first],
                np.full(int(second.sum()), n_rows, dtype=np.intp),
            )
        )
        keep = k_to > k_from
        _count(blocked, k_from[keep], k_to[keep])

    # -- reservations -----------------------------------------------------------------

    def reserve(self, start: float, end: float, rows: AllocationRows, exclusive: bool) -> None:
        """Take ``rows`` out of every row in ``[start, end)``, adding rows at both ends
        so the reservation starts and stops exactly there. An allocation names each
        node once (as ``NodeTable`` assumes)."""
        end = round_up(end, self.resolution)
        forever = end >= self.horizon
        self._add_time(start)
        if not forever:
            self._add_time(end)
            if end <= start:
                return  # an empty window takes nothing
        nodes = rows.rows
        if not len(nodes):
            return
        if start <= self.times[0]:
            self._take_now(rows, exclusive)
            if forever:
                return
            if len(nodes) == 1:
                # one node (most jobs started now): scalar reads and writes
                if self._dipped[nodes[0]]:
                    self._shift_dips(end, nodes, _deltas(rows, exclusive, 1))
                self._events.add_one(end, rows, exclusive)
                return
            if bool((nodes[1:] > nodes[:-1]).all()):
                # the common case, sorted rows: no delta matrix unless a dip needs it
                if self._dipped[nodes].any():
                    self._shift_dips(end, nodes, _deltas(rows, exclusive, 1))
                self._events.add_columns(end, rows, exclusive)
                return
            given = _deltas(rows, exclusive, 1)
        else:
            taken = _deltas(rows, exclusive, -1)
            if len(nodes) > 1 and not bool((nodes[1:] > nodes[:-1]).all()):
                order = np.argsort(nodes)
                nodes, taken = nodes[order], taken[order]
            self._start_dips(start, nodes, taken)
            if forever:
                return
            given = -taken
        if len(nodes) > 1 and not bool((nodes[1:] > nodes[:-1]).all()):
            order = np.argsort(nodes)
            nodes, given = nodes[order], given[order]
        self._shift_dips(end, nodes, given)
        self._events.add(end, nodes, given)

    def _take_now(self, rows: AllocationRows, exclusive: bool) -> None:
        """A job starting now: less free now (``_base``) and in the CPU totals."""
        self._row_level = None
        self._windows.clear()
        nodes, base = rows.rows, self._base
        if len(nodes) == 1:
            # one node (most jobs): scalar updates, far cheaper than index arrays
            node, cpus = int(nodes[0]), int(rows.cpus[0])
            base[0, node] -= cpus
            base[1, node] -= int(rows.memory[0])
            base[2, node] -= int(rows.gpus[0])
            base[3, node] += 1
            if exclusive:
                base[4, node] += 1
            for mask, total in self._totals.values():
                if mask[node]:
                    total[0] -= cpus
        else:
            base[0][nodes] -= rows.cpus
            base[1][nodes] -= rows.memory
            base[2][nodes] -= rows.gpus
            base[3][nodes] += 1
            if exclusive:
                base[4][nodes] += 1
            for mask, total in self._totals.values():
                total[0] -= int(rows.cpus[mask[nodes]].sum())

    def add_instants(self, instants: Iterable[float]) -> None:
        """Make rows start at ``instants`` (e.g. where an advance reservation's window
        starts or ends) without changing what is free: a job kept off nodes until then
        can be planned to start exactly there."""
        for t in instants:
            if self.now < t < self.horizon:
                self._add_time(t)
                self._levels_changed()

    def _levels_changed(self) -> None:
        """A row or a dip's level changed: what was worked out from the dips goes."""
        self._lows.clear()
        self._below.clear()
        self._low_cpus.clear()
        self._windows.clear()

    def _add_time(self, t: float) -> None:
        times = self.times
        i = bisect.bisect_left(times, t)
        if t > times[0] and (i == len(times) or times[i] != t):
            times.insert(i, t)

    def _start_dips(self, start: float, nodes: Rows, taken: Matrix) -> None:
        """A reservation starts at ``start`` on ``nodes`` (sorted, distinct): record the
        event and a dip per node at its level then."""
        times, ev_node, delta = self._events.view()
        known = self._row_level
        if known is not None and known[0] == start and known[1] == len(times):
            rel = taken + np.take(known[2] - self._base, nodes, axis=1).T
            sel = _NO_ROWS
        else:
            rel = taken.copy()
            sel = np.flatnonzero(times <= start)
        if len(sel):
            pos, hit = _positions(nodes, ev_node[sel])
            at, add = pos[hit], delta[sel[hit]]
            for i in range(_N_ARRAYS):  # one column at a time: ``add.at``'s fast path
                np.add.at(rel[:, i], at, add[:, i])
        self._shift_dips(start, nodes, taken)
        self._events.add(start, nodes, taken)
        self._levels_changed()
        if self._dips_distinct and self._dipped[nodes].any():
            self._dips_distinct = False
        self._dipped[nodes] = True
        self._dip_time = np.concatenate((self._dip_time, np.full(len(nodes), start)))
        i = bisect.bisect_left(self._dip_instants, start)
        if i == len(self._dip_instants) or self._dip_instants[i] != start:
            self._dip_instants.insert(i, start)
        self._dip_node = np.concatenate((self._dip_node, nodes))
        self._dip_rel = np.concatenate((self._dip_rel, rel))

    def _shift_dips(self, t: float, nodes: Rows, delta: Matrix) -> None:
        """An event at ``t`` on ``nodes`` (sorted, distinct) changes the level of every
        dip at or after ``t`` on those nodes."""
        if len(nodes) == 1:
            if not self._dipped[nodes[0]]:
                return
        elif not self._dipped[nodes].any():
            return
        later = np.flatnonzero(self._dip_time >= t)
        if not len(later):
            return
        pos, hit = _positions(nodes, self._dip_node[later])
        if hit.any():
            self._dip_rel[later[hit]] += delta[pos[hit]]
            self._levels_changed()


# dead slots a ReleaseLedger keeps beyond as many as live ones before compacting
_LEDGER_SLACK = 4096


# (epoch, slots written, the entries) before a forked pass: ``ReleaseLedger.pass_mark``
LedgerMark = tuple[int, int, dict[int, Any]]


@dataclass(frozen=True, slots=True)
class LedgerChanges:
    """What a forked pass wrote to its ledger (``ReleaseLedger.pass_changes``): on the
    ledger of ``base_epoch`` with ``base_size`` slots, the slots' ``rows`` (node, CPUs,
    memory, GPUs) from there to ``size``, and per job id its entry's (first slot, count,
    exclusive, whether a running job's) where it changed, and the ids ``dropped``; or,
    ``whole``, every slot and entry of the ledger of ``epoch`` for the node list
    ``names``."""

    base_epoch: int
    base_size: int
    whole: bool
    names: tuple[str, ...] | None
    epoch: int
    rows: tuple[npt.NDArray[Any], ...]
    size: int
    live: int
    changed: dict[int, tuple[int, int, bool, bool]]
    dropped: tuple[int, ...]


# a ledger's job: (allocation, first slot, count, the running job, held exclusively)
_Entry = tuple[Allocation | None, int, int, Job | None, bool]


class ReleaseLedger:
    """The release half of the availability profile, kept across passes: each running
    job's nodes and per-node amounts (``NodeTable.rows_of``), written once, when the job
    is first planned with, and dropped once it is no longer. A pass then gathers the
    events of the jobs it plans with (``gather``) in a few array operations instead of
    concatenating every job's arrays again; only the planned ends are computed per
    pass (a prediction may move). Entries are matched by job id and the identity of the
    allocation (a job started again holds another one), and are valid for one node
    list (the table's ``names``, by identity: the simulator's tables share it; a server
    that builds a new table every pass over the same nodes hands it over with
    ``same_nodes``). Not for two passes at the same time.
    """

    __slots__ = (
        "_cpus",
        "_gpus",
        "_jobs",
        "_live",
        "_memory",
        "_names",
        "_node",
        "_size",
        "epoch",
        "planned",
        "start_bound",
        "start_rows",
    )

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, names: tuple[str, ...] | None) -> None:
        self._names = names
        # the head's start-row screen, for profiles built on this node list
        self.start_rows = StartRowsMemo()
        self.start_bound = StartBound()
        # bumped whenever slots move (a compaction): slots name the same rows within one
        self.epoch = getattr(self, "epoch", 0) + 1
        # the last ``gather``'s releases: (epoch, first slots, their counts, their event
        # times); None when its horizon left some out
        self.planned: Planned | None = None
        # id → (allocation, first slot, count, the running job and whether it holds
        # them exclusively, as ``held_slot`` last found them; None, False: not asked).
        # No allocation: adopted from a forked pass that placed the job (``adopt``)
        self._jobs: dict[int, _Entry] = {}
        self._node: Rows = np.empty(0, dtype=np.intp)
        self._cpus: IntArray = np.empty(0, dtype=np.int64)
        self._memory: IntArray = np.empty(0, dtype=np.int64)
        self._gpus: IntArray = np.empty(0, dtype=np.int64)
        self._size = 0  # slots written
        self._live = 0  # slots of the jobs still known

    def __len__(self) -> int:
        return len(self._jobs)

    def same_nodes(self, table: NodeTable) -> None:
        """Keep the slots for ``table`` when it lists the same nodes in the same order
        as the tables they were written for (its rows are theirs): the server builds a
        table, names and all, every pass, and 77,000 running jobs' rows written again
        cost a 10,000-node pass 0.3 s. Once per pass: it compares the lists."""
        names = table.names
        if self._names is not None and names is not self._names and names == self._names:
            self._names = names

    def held_slot(self, table: NodeTable, job: Job) -> tuple[int, int, bool] | None:
        """Where the rows of what running ``job`` holds are (first slot, count), and
        whether it holds them exclusively (``holding``); None when it holds nothing.
        Looked up by job object: the simulator passes the same one pass after pass."""
        return self.held_slots(table, (job,))[0]

    def slot(self, table: NodeTable, job_id: int, allocation: Allocation) -> tuple[int, int]:
        """Where ``allocation``'s rows are (first slot, count), written if new."""
        firsts, counts = self._write(table, [(job_id, allocation)])
        return firsts[0], counts[0]

    def held_slots(
        self, table: NodeTable, jobs: Sequence[Job]
    ) -> list[tuple[int, int, bool] | None]:
        """``held_slot`` of each of ``jobs`` (running), in order; the jobs not found
        are written together (``_write``), in the same slots as one by one."""
        found: list[tuple[int, int, bool] | None] = []
        new: list[tuple[int, Job, Allocation, bool]] = []  # (position, job, held, exclusive)
        entries = self._jobs if table.names is self._names else {}
        for job in jobs:
            entry = entries.get(job.id)
            if entry is not None and entry[3] is job:
                found.append((entry[1], entry[2], entry[4]))
                continue
            held, exclusive = holding(job)
            if held is not None:
                new.append((len(found), job, held, exclusive))
            found.append(None)
        if new:
            firsts, counts = self._write(table, [(job.id, held) for _, job, held, _ in new])
            for (at, job, held, exclusive), first, count in zip(new, firsts, counts, strict=True):
                self._jobs[job.id] = (held, first, count, job, exclusive)
                found[at] = (first, count, exclusive)
        return found

    def slots(
        self, table: NodeTable, placed: Sequence[tuple[Job, Allocation]]
    ) -> tuple[list[int], list[int]]:
        """``slot`` of each job of ``placed`` (this pass's placements), in order: the
        first slots and the counts (``_write``)."""
        return self._write(table, [(job.id, allocation) for job, allocation in placed])

    def _write(
        self, table: NodeTable, allocations: list[tuple[int, Allocation]]
    ) -> tuple[list[int], list[int]]:
        """``slot`` of each (job id, allocation), in order: the first slots and the
        counts. The one-node allocations (most of them) are written from their names
        and amounts together, in one write per array, not as a ``rows_of`` array each
        and four writes (77,000 running jobs seen for the first time at 10,000 nodes).
        Nothing is recorded until every row is written: an allocation that raises leaves
        the ledger as it was."""
        if table.names is not self._names:
            self._reset(table.names)
        jobs = self._jobs
        fresh: dict[int, _Entry] = {}  # (recorded once the rows are written)
        replaced = 0  # the live slots of the entries ``fresh`` replaces
        index = table.index
        firsts: list[int] = []
        counts: list[int] = []
        node: list[int] = []
        cpus: list[int] = []
        memory: list[int] = []
        gpus: list[int] = []
        size = at = self._size
        for job_id, allocation in allocations:
            found = fresh.get(job_id) or jobs.get(job_id)
            if found is not None:
                if found[0] is allocation:
                    firsts.append(found[1])
                    counts.append(found[2])
                    continue
                replaced += found[2]
            per_node = allocation.per_node
            if len(per_node) == 1:
                row = index.get(allocation.nodes[0])
                if row is None:
                    count = 0  # the node left the cluster (as ``rows_of``)
                else:
                    res = per_node[0]
                    node.append(row)
                    cpus.append(res.cpus)
                    memory.append(res.memory_bytes)
                    gpus.append(res.gpus)
                    count = 1
            else:
                ar = table.rows_of(allocation)
                node.extend(ar.rows.tolist())
                cpus.extend(ar.cpus.tolist())
                memory.extend(ar.memory.tolist())
                gpus.extend(ar.gpus.tolist())
                count = len(ar.rows)
            fresh[job_id] = (allocation, at, count, None, False)
            firsts.append(at)
            counts.append(count)
            at += count
        if at > size:
            self._room(size, at)
            self._node[size:at] = node
            self._cpus[size:at] = cpus
            self._memory[size:at] = memory
            self._gpus[size:at] = gpus
            self._size = at
        jobs.update(fresh)
        self._live += at - size - replaced
        return firsts, counts

    def _room(self, first: int, end: int) -> None:
        """Slots up to ``end``, those before ``first`` kept."""
        if end > len(self._node):
            grow = max(end, 2 * len(self._node), 1024)
            self._node = _grown(self._node, grow, first)
            self._cpus = _grown(self._cpus, grow, first)
            self._memory = _grown(self._memory, grow, first)
            self._gpus = _grown(self._gpus, grow, first)

    def keep_only(self, job_ids: set[int]) -> None:
        """Forget the jobs not in ``job_ids``; slots are compacted once most are dead.
        (Slots given out before this call are no longer valid.)"""
        jobs = self._jobs
        if len(jobs) > len(job_ids) or not job_ids.issuperset(jobs):
            for jid in jobs.keys() - job_ids:
                self._live -= jobs.pop(jid)[2]
        if self._size > 2 * self._live + _LEDGER_SLACK:
            order = sorted(jobs.items(), key=lambda e: e[1][1])
            keep = np.concatenate(
                [np.arange(f, f + c, dtype=np.intp) for _, (_, f, c, _, _) in order]
                or [np.empty(0, dtype=np.intp)]
            )
            self._node = self._node[keep]
            self._cpus = self._cpus[keep]
            self._memory = self._memory[keep]
            self._gpus = self._gpus[keep]
            at = 0
            for jid, (alloc, _, c, job, exclusive) in order:
                jobs[jid] = (alloc, at, c, job, exclusive)
                at += c
            self._size = self._live = at
            self.epoch += 1

    # -- a pass decided in a forked process (``hal.scheduler.forked``) ------------------

    def _columns(self) -> tuple[npt.NDArray[Any], ...]:
        return self._node, self._cpus, self._memory, self._gpus

    def pass_mark(self) -> LedgerMark:
        """What the ledger holds before a pass (the child's)."""
        return self.epoch, self._size, dict(self._jobs)

    def pass_changes(self, mark: LedgerMark) -> LedgerChanges:
        """What the pass wrote since ``mark``, by job id (the child's objects cannot
        travel): the slots' rows appended and the entries changed or dropped; all of it
        when the slots moved (a compaction, another node list)."""
        epoch, size, before = mark
        whole = epoch != self.epoch
        start = 0 if whole else size
        end = self._size
        rows = tuple(
            a[start:end].copy() for a in (self._node, self._cpus, self._memory, self._gpus)
        )
        changed = {
            jid: (first, count, exclusive, job is not None)
            for jid, entry in self._jobs.items()
            if whole or before.get(jid) is not entry
            for _, first, count, job, exclusive in (entry,)
        }
        dropped = () if whole else tuple(j for j in before if j not in self._jobs)
        names = self._names if whole else None
        return LedgerChanges(
            epoch, size, whole, names, self.epoch, rows, end, self._live, changed, dropped
        )

    def adopt(self, changes: LedgerChanges, running: Iterable[Job]) -> None:
        """A forked pass's ``changes`` (the parent's), its running jobs' entries put back
        with the parent's objects of ``running`` (the pass's snapshot's), so that the
        next pass's ``held_slot`` finds them. Nothing when this ledger changed since the
        pass's mark (a pass ran here meanwhile): it is then as valid as it was."""
        if changes.whole:
            self._reset(changes.names)
            self.epoch = changes.epoch
            self._jobs = {}
            self._size = 0
        elif (self.epoch, self._size) != (changes.base_epoch, changes.base_size):
            return
        start, end = self._size, changes.size
        self._room(start, end)
        for mine, theirs in zip(self._columns(), changes.rows, strict=True):
            mine[start:end] = theirs
        jobs = self._jobs
        for jid in changes.dropped:
            jobs.pop(jid, None)
        if changes.changed:
            by_id = {j.id: j for j in running}
            for jid, (first, count, exclusive, held) in changes.changed.items():
                job = by_id.get(jid) if held else None
                # a job's own allocation (``holding``'s), so that ``slot`` finds it the
                # same; an entry of a job placed in the pass is written again when the
                # job runs (its allocation is another object then), as on the thread
                alloc = holding(job)[0] if job is not None else None
                jobs[jid] = (alloc, first, count, job, exclusive)
        self._size, self._live = end, changes.live
        self.planned = None  # (the last gather's: the child's)

    def nodes_at(self, first: int, count: int) -> Rows:
        """The node rows of the slots ``[first, first + count)``."""
        return self._node[first : first + count]

    def gather(
        self,
        now: float,
        ends: list[float],
        firsts: list[int],
        counts: list[int],
        exclusive: list[bool],
        resolution: float,
        horizon: float,
    ) -> tuple[list[float], _Events]:
        """What ``_gather_releases`` makes of the same jobs (same rows, same events in
        the same order), for jobs given by their slots: ``ends[i]`` is the expected end
        of the job whose rows are ``counts[i]`` slots from ``firsts[i]``."""
        if not ends:
            self.planned = (self.epoch, _NO_ROWS, _NO_ROWS, np.empty(0))
            return [now], _Events(64)
        step = max(resolution, 1.0)
        t = round_up_many(np.maximum(np.array(ends, dtype=np.float64), now + step), resolution)
        first = np.array(firsts, dtype=np.intp)
        count = np.array(counts, dtype=np.intp)
        excl = np.array(exclusive, dtype=np.int64)
        keep = t < horizon
        if not keep.all():
            t, first, count, excl = t[keep], first[keep], count[keep], excl[keep]
            self.planned = None
        else:
            self.planned = (self.epoch, first, count, t)
        times: list[float] = [now, *np.unique(t).tolist()]
        size = int(count.sum())
        events = _Events(max(64, 4 * size))
        if size:
            # slot of each event: each job's run of slots, one after the other
            idx = np.arange(size, dtype=np.intp) + np.repeat(
                first - (np.cumsum(count) - count), count
            )
            np.take(self._node, idx, out=events.node[:size])
            delta = events.delta[:size]
            delta[:, 0] = self._cpus[idx]
            delta[:, 1] = self._memory[idx]
            delta[:, 2] = self._gpus[idx]
            delta[:, 3] = -1
            delta[:, 4] = -np.repeat(excl, count)
            events.time[:size] = np.repeat(t, count)
            events.size = size
        return times, events


def _gather_releases(
    now: float,
    releases: Iterable[tuple[float, AllocationRows, bool]],
    resolution: float,
    horizon: float,
) -> tuple[list[float], _Events]:
    """The profile's rows (``now`` and each release instant) and release events, from
    (expected end, allocation, exclusive) per job (see ``AvailabilityProfile``)."""
    step = max(resolution, 1.0)
    kept: list[tuple[float, AllocationRows, bool]] = []
    for end, ar, exclusive in releases:
        t = round_up(max(end, now + step), resolution)
        if t < horizon:
            kept.append((t, ar, exclusive))
    times: list[float] = [now, *sorted({t for t, _, _ in kept})]
    size = sum(len(ar.rows) for _, ar, _ in kept)
    # room for reservations as wide as the running jobs: pages never written cost no
    # memory, while growing copies every event
    events = _Events(max(64, 4 * size))
    if kept:
        # one array per column over all releases, written into the events in place:
        # no per-job array building, no delta matrix copied in afterwards
        ev = events
        counts = [len(ar.rows) for _, ar, _ in kept]
        np.concatenate([ar.rows for _, ar, _ in kept], out=ev.node[:size])
        delta = ev.delta[:size]
        np.concatenate([ar.cpus for _, ar, _ in kept], out=delta[:, 0])
        np.concatenate([ar.memory for _, ar, _ in kept], out=delta[:, 1])
        np.concatenate([ar.gpus for _, ar, _ in kept], out=delta[:, 2])
        delta[:, 3] = -1
        delta[:, 4] = -np.repeat([int(excl) for _, _, excl in kept], counts)
        ev.time[:size] = np.repeat([t for t, _, _ in kept], counts)
        ev.size = size
    return times, events


def _count(blocked: npt.NDArray[np.int64], k_from: Rows, k_to: Rows) -> None:
    """Add one to ``blocked`` (a difference array) over each ``[k_from, k_to)``."""
    size = len(blocked)
    blocked += np.bincount(k_from, minlength=size)[:size]
    blocked -= np.bincount(k_to, minlength=size)[:size]


def _run_starts(nodes: Rows) -> BoolArray:
    """True where a run of equal values in ``nodes`` (sorted) starts."""
    flags = np.ones(len(nodes), dtype=np.bool_)
    flags[1:] = nodes[1:] != nodes[:-1]
    return flags
