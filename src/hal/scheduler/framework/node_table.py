"""``NodeTable``: the cluster's nodes as numpy arrays, so Filter and Score run over all
nodes at once instead of one Python call per node.

Row ``i`` is ``snapshot.nodes[i]``; node order is the snapshot's, and every tie between
nodes is broken by that order (lowest row wins), which keeps passes deterministic.

The ``free_*`` arrays, ``jobs_on`` and ``exclusive_on`` change during a pass: each
placement is taken out of them at once, so the next job sees a fuller cluster. Everything
else is fixed for the pass. ``copy`` gives an independent table for what-if runs
(test-only, will-run, later backfill and preemption).

The free arrays change only through ``take`` and ``release``, which log the rows they
touch on tables of 4,096 nodes and more: a plugin may keep a per-node result between
calls and redo only ``changed_rows(since)`` (``noderesources`` does, for Filter and
Score).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from hal.core.gpu_islands import pick_gpus
from hal.core.job import Allocation, Job
from hal.core.node import Node, Partition, gpu_type_matches
from hal.core.preemption import holding
from hal.core.resources import ResourceVector
from hal.core.states import NodeState

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class NodeTable:
    __slots__ = (
        "_changes",
        "_features",
        "_gpu_types",
        "_marks",
        "_marks_dropped",
        "_names_array",
        "_partitions",
        "_rows_memo",
        "any_gpus",
        "cap_cpus",
        "cap_gpus",
        "cap_memory",
        "exclusive_on",
        "free_cpus",
        "free_gpus",
        "free_memory",
        "gpu_model",
        "gpus_in_use",
        "has_gpus",
        "index",
        "inv_cpus",
        "inv_memory",
        "jobs_on",
        "names",
        "nodes",
        "state",
        "up",
    )

    def __init__(self, nodes: Sequence[Node], partitions: Iterable[Partition]) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.names: tuple[str, ...] = tuple(n.name for n in self.nodes)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self._names_array = np.array(self.names, dtype=object)
        count = len(self.nodes)
        self.cap_cpus: IntArray = np.array([n.resources.cpus for n in nodes], dtype=np.int64)
        self.cap_memory: IntArray = np.array(
            [n.resources.memory_bytes for n in nodes], dtype=np.int64
        )
        self.cap_gpus: IntArray = np.array([n.resources.gpus for n in nodes], dtype=np.int64)
        # 1/capacity, for scores that are fractions of a node (max(…, 1): no zero division).
        self.inv_cpus: FloatArray = 1.0 / np.maximum(self.cap_cpus, 1)
        self.inv_memory: FloatArray = 1.0 / np.maximum(self.cap_memory, 1)
        self.has_gpus: BoolArray = self.cap_gpus > 0
        self.any_gpus = bool(self.has_gpus.any())
        self.free_cpus: IntArray = self.cap_cpus.copy()
        self.free_memory: IntArray = self.cap_memory.copy()
        self.free_gpus: IntArray = self.cap_gpus.copy()
        self.up: BoolArray = np.array([n.state is NodeState.UP for n in nodes], dtype=np.bool_)
        self.state: tuple[NodeState, ...] = tuple(n.state for n in nodes)
        self.gpu_model: tuple[str, ...] = tuple(n.gpu_model for n in nodes)
        # How many jobs hold something on the node: exclusive jobs need it to be 0.
        self.jobs_on: IntArray = np.zeros(count, dtype=np.int64)
        # How many exclusive jobs hold the node: nobody else may join while > 0, even if
        # the recorded allocation left something free.
        self.exclusive_on: IntArray = np.zeros(count, dtype=np.int64)
        # Per node, a bitmask of the GPU indices held. Python ints: one per node, touched
        # only when a GPU job is placed or released.
        self.gpus_in_use: list[int] = [0] * count
        self._partitions: dict[str, BoolArray] = {}
        for p in partitions:
            self._partitions[p.name] = np.array(
                [p.contains(n.name) or p.name in n.partitions for n in nodes], dtype=np.bool_
            )
        # Rows written by each take/release, in order (see ``changed_rows``); None for a
        # read-only table (``with_free``) or a small one.
        self._changes: list[int] | None = [] if count >= _TRACKED_FROM else None
        # where each take/release starts in ``_changes``; ``_marks_dropped``: how many
        # of the oldest were dropped with their rows
        self._marks: list[int] = []
        self._marks_dropped = 0
        # id(allocation) → its rows and per-node amounts as arrays (see ``rows_of``).
        self._rows_memo = _RowsMemo()
        self._gpu_types: dict[str, BoolArray] = {}  # GPU type → its nodes (gpu_type_mask)
        self._features: dict[str, BoolArray] = {}
        for i, n in enumerate(nodes):
            for f in n.features:
                arr = self._features.get(f)
                if arr is None:
                    arr = self._features[f] = np.zeros(count, dtype=np.bool_)
                arr[i] = True

    @classmethod
    def build(
        cls, nodes: Sequence[Node], partitions: Iterable[Partition], running: Iterable[Job]
    ) -> NodeTable:
        """The table with what every running job holds already taken out (all its
        allocation; memory and GPUs only for a job suspended by preemption)."""
        table = cls(nodes, partitions)
        tracked, table._changes = table._changes, None  # nothing can read these rows yet
        # Most running jobs hold part of one node and no GPU: their rows and amounts are
        # gathered and taken out by one vector operation per array (``_apply``'s
        # one-node case, summed), the others one by one. A table of 10,000 nodes holds
        # some 77,000 such jobs: numpy's per-element writes cost more than the sums.
        index = table.index
        rows: list[int] = []
        cpus: list[int] = []
        memory: list[int] = []
        exclusive_rows: list[int] = []
        for job in running:
            alloc, exclusive = holding(job)
            if alloc is None:
                continue
            if len(alloc.nodes) != 1 or alloc.gpu_ids or alloc.per_node[0].gpus:
                table.take(alloc, exclusive=exclusive)
                continue
            row = index.get(alloc.nodes[0])
            if row is None:  # the node left the cluster: nothing to account for
                continue
            res = alloc.per_node[0]
            rows.append(row)
            cpus.append(res.cpus)
            memory.append(res.memory_bytes)
            if exclusive:
                exclusive_rows.append(row)
        if rows:
            at = np.array(rows, dtype=np.intp)
            np.subtract.at(table.free_cpus, at, np.array(cpus, dtype=np.int64))
            np.subtract.at(table.free_memory, at, np.array(memory, dtype=np.int64))
            np.add.at(table.jobs_on, at, 1)
            if exclusive_rows:
                np.add.at(table.exclusive_on, np.array(exclusive_rows, dtype=np.intp), 1)
        table._changes = tracked
        return table

    def __len__(self) -> int:
        return len(self.names)

    def copy(self) -> NodeTable:
        other = NodeTable.__new__(NodeTable)
        for attr in ("free_cpus", "free_memory", "free_gpus", "jobs_on", "exclusive_on"):
            setattr(other, attr, getattr(self, attr).copy())
        other.gpus_in_use = list(self.gpus_in_use)
        other._changes = [] if self._changes is not None else None
        other._marks = []
        other._marks_dropped = 0
        # The fixed parts are shared: nothing writes them after construction.
        for attr in _FIXED:
            setattr(other, attr, getattr(self, attr))
        return other

    # -- fixed masks ------------------------------------------------------------------

    def partition_mask(self, partition: str) -> BoolArray:
        """Nodes of ``partition`` (all False for an unknown one). Shared: do not mutate."""
        mask = self._partitions.get(partition)
        if mask is None:
            mask = self._partitions[partition] = np.zeros(len(self), dtype=np.bool_)
        return mask

    def feature_mask(self, feature: str) -> BoolArray:
        mask = self._features.get(feature)
        if mask is None:
            mask = self._features[feature] = np.zeros(len(self), dtype=np.bool_)
        return mask

    def gpu_type_mask(self, wanted: str) -> BoolArray:
        """Nodes whose GPUs are of type ``wanted`` (``hal.core.node.gpu_type_matches``),
        made once per type for the table and its copies. Shared: do not mutate."""
        mask = self._gpu_types.get(wanted)
        if mask is None:
            matches = [gpu_type_matches(wanted, m) for m in self.gpu_model]
            mask = self._gpu_types[wanted] = np.array(matches, dtype=np.bool_)
        return mask

    def names_of(self, rows: npt.NDArray[np.intp]) -> tuple[str, ...]:
        """The node names of ``rows``, in that order (a few: by Python indexing; many:
        by one numpy gather, several times faster for thousands)."""
        if len(rows) < 16:
            names = self.names
            return tuple([names[r] for r in rows.tolist()])
        gathered: tuple[str, ...] = tuple(self._names_array[rows].tolist())
        return gathered

    def names_mask(self, names: Iterable[str]) -> BoolArray:
        """Rows of the named nodes; names the table does not know are ignored."""
        mask = np.zeros(len(self), dtype=np.bool_)
        for name in names:
            i = self.index.get(name)
            if i is not None:
                mask[i] = True
        return mask

    # -- accounting -------------------------------------------------------------------

    def free_gpu_ids(self, row: int, count: int) -> tuple[int, ...]:
        """``count`` GPU indices on ``row`` that nobody holds, from one NVLink island
        when one has enough (``hal.core.gpu_islands.pick_gpus``)."""
        if count <= 0:
            return ()
        islands = self.nodes[row].gpu_islands
        return pick_gpus(islands, int(self.cap_gpus[row]), self.gpus_in_use[row], count)

    def with_free(
        self,
        free_cpus: IntArray,
        free_memory: IntArray,
        free_gpus: IntArray,
        jobs_on: IntArray,
        exclusive_on: IntArray,
    ) -> NodeTable:
        """A table with these free arrays and this table's fixed parts (shared, not
        copied). Backfill builds one per time window: the least free over the window.
        Read-only by contract: nobody takes or releases on it."""
        other = NodeTable.__new__(NodeTable)
        for attr in _FIXED:
            setattr(other, attr, getattr(self, attr))
        other.free_cpus = free_cpus
        other.free_memory = free_memory
        other.free_gpus = free_gpus
        other.jobs_on = jobs_on
        other.exclusive_on = exclusive_on
        other.gpus_in_use = self.gpus_in_use
        other._changes = None
        other._marks = []
        other._marks_dropped = 0
        return other

    def rows_of(self, allocation: Allocation) -> AllocationRows:
        """``allocation`` as row indices and per-node cpus, memory and GPUs (nodes the
        table does not know are left out). Memoised by identity: a running job's
        allocation is converted once, not once per pass and per time slice."""
        key = id(allocation)
        found = self._rows_memo.get(key)
        if found is not None and found.allocation is allocation:
            return found
        per_node = allocation.per_node
        index = self.index
        first = per_node[0] if per_node else None
        if first is not None and len(per_node) == 1:
            # One node (most jobs): one array from the Python ints, four one-element
            # views of it (one array call instead of four)
            row = index.get(allocation.nodes[0])
            if row is None:
                v: IntArray = np.zeros(4, dtype=np.int64)[:0]
                found = AllocationRows(allocation, v, v, v, v)
            else:
                v = np.array((row, first.cpus, first.memory_bytes, first.gpus), dtype=np.int64)
                found = AllocationRows(allocation, v[0:1], v[1:2], v[2:3], v[3:4])
        elif first is not None and all(res is first for res in per_node):
            # One shared vector (what the runtime builds for most jobs): fill, no loop.
            found_rows = [index.get(name, -1) for name in allocation.nodes]
            rows_arr = np.array(found_rows, dtype=np.intp)
            if -1 in found_rows:
                rows_arr = rows_arr[rows_arr >= 0]  # nodes that left the cluster
            n = len(rows_arr)
            found = AllocationRows(
                allocation,
                rows_arr,
                np.full(n, first.cpus, dtype=np.int64),
                np.full(n, first.memory_bytes, dtype=np.int64),
                np.full(n, first.gpus, dtype=np.int64),
            )
        else:
            rows: list[int] = []
            cpus: list[int] = []
            memory: list[int] = []
            gpus: list[int] = []
            for name, res in zip(allocation.nodes, per_node, strict=True):
                row = index.get(name)
                if row is None:
                    continue  # the node left the cluster; nothing to account for
                rows.append(row)
                cpus.append(res.cpus)
                memory.append(res.memory_bytes)
                gpus.append(res.gpus)
            found = AllocationRows(
                allocation,
                np.array(rows, dtype=np.intp),
                np.array(cpus, dtype=np.int64),
                np.array(memory, dtype=np.int64),
                np.array(gpus, dtype=np.int64),
            )
        self._rows_memo.put(key, found)
        return found

    def remember(
        self, allocation: Allocation, rows: npt.NDArray[np.intp], *, uniform: bool
    ) -> None:
        """Memoise ``allocation``'s rows for ``rows_of`` when the caller already has
        them (the runtime builds allocations from rows): no name look-ups, which cost
        milliseconds for a job thousands of nodes wide. ``uniform``: every node holds
        ``per_node[0]``."""
        per_node = allocation.per_node
        if not per_node or len(per_node) != len(rows):
            return
        first = per_node[0]
        if uniform:
            n = len(rows)
            cpus = np.full(n, first.cpus, dtype=np.int64)
            memory = np.full(n, first.memory_bytes, dtype=np.int64)
            gpus = np.full(n, first.gpus, dtype=np.int64)
        else:
            cpus = np.array([r.cpus for r in per_node], dtype=np.int64)
            memory = np.array([r.memory_bytes for r in per_node], dtype=np.int64)
            gpus = np.array([r.gpus for r in per_node], dtype=np.int64)
        found = AllocationRows(allocation, rows.astype(np.intp, copy=False), cpus, memory, gpus)
        self._rows_memo.put(id(allocation), found)

    # -- change tracking --------------------------------------------------------------

    @property
    def version(self) -> int | None:
        """How many takes and releases this table has seen. With ``changed_rows``, lets a
        plugin keep a per-node result from one call to the next and redo only the rows
        that changed. None: not tracked, recompute every time (a read-only table, whose
        arrays never change, or one under 4,096 nodes, where recomputing every row costs
        about what replaying a change does)."""
        return None if self._changes is None else len(self._marks) + self._marks_dropped

    def changed_rows(self, since: int) -> npt.NDArray[np.intp] | None:
        """The rows written since ``version`` was ``since`` (repeats possible); None when
        so many changed that recomputing every row is about as cheap."""
        changes = self._changes
        k = since - self._marks_dropped
        if changes is None or k < 0 or k > len(self._marks):
            return None
        first = self._marks[k] if k < len(self._marks) else len(changes)
        if len(changes) - first > len(self) // _ROWS_PER_CHANGED_ROW:
            return None
        return np.array(changes[first:], dtype=np.intp)

    def _changed(self, rows: list[int]) -> None:
        """Log one take or release (its rows), keeping only what ``changed_rows`` can
        still be asked for."""
        changes = self._changes
        if changes is None:
            return
        marks = self._marks
        marks.append(len(changes))
        changes.extend(rows)
        if len(changes) > 2 * len(self) // _ROWS_PER_CHANGED_ROW + _LOG_SLACK:
            # too old to be worth replaying: drop the first half of the log
            keep = len(marks) // 2
            cut = marks[keep]
            del changes[:cut]
            self._marks = [m - cut for m in marks[keep:]]
            self._marks_dropped += keep

    def take(self, allocation: Allocation, *, exclusive: bool = False) -> None:
        """Subtract ``allocation`` (a running job, or a placement just made)."""
        self._apply(allocation, exclusive, sign=-1)

    def release(self, allocation: Allocation, *, exclusive: bool = False) -> None:
        """Give ``allocation`` back (a running job that will have ended)."""
        self._apply(allocation, exclusive, sign=1)

    def _apply(self, allocation: Allocation, exclusive: bool, sign: int) -> None:
        if len(allocation.nodes) > 1:
            # Many nodes: one vector operation per array instead of one per node (a
            # 64-node job on single-CPU nodes is 64 Python iterations otherwise).
            ar = self.rows_of(allocation)
            self._changed(ar.rows.tolist())
            self.free_cpus[ar.rows] += sign * ar.cpus
            self.free_memory[ar.rows] += sign * ar.memory
            self.free_gpus[ar.rows] += sign * ar.gpus
            self.jobs_on[ar.rows] -= sign
            if exclusive:
                self.exclusive_on[ar.rows] -= sign
            if ar.gpus.any() or allocation.gpu_ids:
                self._apply_gpu_ids(allocation, sign)
            return
        if not allocation.nodes:
            return
        # one node (most jobs)
        res: ResourceVector = allocation.per_node[0]
        row = self.index.get(allocation.nodes[0])
        if row is not None:  # else the node left the cluster: nothing to account for
            if self._changes is not None:
                self._changed([row])
            self.free_cpus[row] += sign * res.cpus
            self.free_memory[row] += sign * res.memory_bytes
            self.free_gpus[row] += sign * res.gpus
            self.jobs_on[row] -= sign
            if exclusive:
                self.exclusive_on[row] -= sign
        if allocation.gpu_ids or res.gpus:
            self._apply_gpu_ids(allocation, sign)

    def _apply_gpu_ids(self, allocation: Allocation, sign: int) -> None:
        for k, name in enumerate(allocation.nodes):
            res: ResourceVector = allocation.per_node[k]
            row = self.index.get(name)
            if row is None:
                continue
            ids = allocation.gpu_ids[k] if k < len(allocation.gpu_ids) else ()
            if res.gpus and not ids and sign < 0:
                # An allocation recorded without GPU ids still holds that many GPUs;
                # assume the lowest free ones so later picks avoid a clash.
                ids = self.free_gpu_ids(row, res.gpus)
            mask = 0
            for gid in ids:
                mask |= 1 << gid
            if sign < 0:
                self.gpus_in_use[row] |= mask
            else:
                self.gpus_in_use[row] &= ~mask


_MEMO_LIMIT = 200_000
# ... and this many rows in all: the backfill's what-if allocations (a reservation
# thousands of nodes wide, every pass) are memoised too, and at 200,000 of them the
# memo held gigabytes (12.5 GB resident in a whole CEA-Curie replay on 5,040 nodes).
_MEMO_ROWS = 1 << 22
# Redoing one changed row costs about what 16 rows of a full recomputation cost, so
# ``changed_rows`` gives up past one row in 16 (then every row is recomputed).
_ROWS_PER_CHANGED_ROW = 16
_LOG_SLACK = 64
_TRACKED_FROM = 4096  # nodes

# The parts of a table nothing writes after construction; copies share them.
_FIXED = (
    "nodes",
    "names",
    "index",
    "cap_cpus",
    "cap_memory",
    "cap_gpus",
    "inv_cpus",
    "inv_memory",
    "has_gpus",
    "any_gpus",
    "up",
    "state",
    "gpu_model",
    "_partitions",
    "_features",
    "_gpu_types",
    "_names_array",
    "_rows_memo",
)


class _RowsMemo(dict[int, "AllocationRows"]):
    """id(allocation) → its rows, emptied when it holds more than ``_MEMO_LIMIT``
    allocations or ``_MEMO_ROWS`` rows (old allocations are rarely asked again)."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    def put(self, key: int, found: AllocationRows) -> None:
        if len(self) >= _MEMO_LIMIT or self.rows > _MEMO_ROWS:
            self.clear()
            self.rows = 0
        old = self.get(key)
        if old is not None:
            self.rows -= len(old.rows)
        self[key] = found
        self.rows += len(found.rows)


class AllocationRows(NamedTuple):
    """An allocation in table terms: ``rows[i]`` holds ``cpus[i]``, ``memory[i]`` and
    ``gpus[i]``. Read-only (the arrays may be views of one). A named tuple: one is made
    per running job and placement each pass, and a frozen dataclass costs twice as much
    to make."""

    allocation: Allocation
    rows: npt.NDArray[np.intp]
    cpus: IntArray
    memory: IntArray
    gpus: IntArray
