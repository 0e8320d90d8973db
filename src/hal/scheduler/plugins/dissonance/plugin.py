"""Keep work that clashes off one node. See README.md.

The interference model (``ClusterSnapshot.dissonance``, ``hal.core.dissonance``) gives,
per ordered pair of job classes (victim, aggressor), the slowdown of the victim beside a
node full of the aggressor. A pending job's class is its profile's
(``job.extra[PROFILE_CLASS]``) or, before it has run, its workload identity's last one.

Per pass the plugin keeps, per node row and class, the share of the node's CPUs held by
running jobs of that class (``share``), and the same for the jobs marked
latency-sensitive (``guarded``); Reserve adds each placed job. The *harm* of putting a
job of class ``c`` on node ``n``, in log-slowdown per CPU share::

    harm[n] = Σ_a share[n, a]   · (self · L[c, a] + L[a, c])
            + Σ_a guarded[n, a] · (protect - 1) · L[a, c]

where ``L = max(0, log(slowdown) - log(tolerance))`` (slowdowns up to ``tolerance``
are ignored: the model's prior is not a reason to spread work out), ``self`` is
``protect`` for a latency-sensitive job and 1 otherwise. The first term is what the
job would suffer and what it would do to its neighbours, weighted by how much of the
node they hold; the second counts a latency-sensitive neighbour's slowdown ``protect``
times. Score: ``MAX_NODE_SCORE · max(0, 1 - harm / log(2))``: 100 on a node with no
clashing neighbour, 0 where the clash is worth a doubling. A Score only ranks the nodes
Filter left: nothing is ever made infeasible.

Vectorised: per (class, latency-sensitive) the harm over every node row is one small
matrix product, kept for the pass and updated on the rows of each job placed.
"""

from __future__ import annotations

import math
import struct
import threading
from collections import defaultdict
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np

from hal.core.dissonance import DissonanceView
from hal.core.job import Allocation, Job
from hal.core.profiles import CLASSES, LATENCY_SENSITIVE, PROFILE_CLASS
from hal.core.states import JobState
from hal.core.traffic import identity
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    FloatArray,
    IndexArray,
    ReservePlugin,
    ScorePlugin,
    WeightedScorer,
)
from hal.scheduler.framework.keys import (
    NODE_SCORES,
    PLAN_START,
    add_placement_note,
    drop_placement_note,
)
from hal.scheduler.framework.node_table import IntArray
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SUCCESS, Status

NAME = "dissonance"
PROTECT = 4.0  # a latency-sensitive job's slowdown counts this many times
TOLERANCE = 1.05  # slowdowns up to this are ignored (the model's prior)
_SCALE = math.log(2.0)  # harm worth a doubling scores 0
NOTE_MIN = 10.0  # score points (about 7 % of slowdown) a move must be worth to be noted
REBUILD_AFTER = 100_000  # updates of the kept shares before they are summed afresh
MIXES_KEPT = 50_000  # rows' scores kept by mix across passes (about 300 bytes each)
KEYS_KEPT = 200_000  # pending jobs' keys kept across passes (``Dissonance._keys``)
_INDEX = {c: i for i, c in enumerate(CLASSES)}
# a key (class, latency-sensitive) → its column of the scores (``_Coef``)
_COLUMN = {(c, ls): 2 * i + ls for c, i in _INDEX.items() for ls in (False, True)}
_CLASSES = len(CLASSES)
_CLASS_RANGE = range(_CLASSES)
_WIDTH = 2 * _CLASSES  # a row of ``_Nodes.both``: ``share`` then ``guarded``
_ROW_BYTES = 8 * _WIDTH
_KEYS = 2 * _CLASSES  # one score per (class, mark): ``_Coef.column``
_KEYS_BYTES = 8 * _KEYS  # the scores of a row of ``_Nodes.scores`` (then the weighted)
_ROW_SCORES = 2 * _KEYS  # a row of ``_Nodes.scores``: the scores, then the weighted
_SCORES_BYTES = 8 * _ROW_SCORES
_PACK = struct.Struct(f"={_KEYS}d").pack  # a row of scores as their bytes
_PACK_BOTH = struct.Struct(f"={_ROW_SCORES}d").pack  # and with the weighted after them


def job_class(job: Job, view: DissonanceView) -> str | None:
    """The class the model knows ``job`` by: its profile's, else its workload's."""
    found = job.extra.get(PROFILE_CLASS) or view.job_class.get(job.id)
    if found is None:
        spec = job.spec
        found = view.identity_class.get(identity(spec.user, spec.name, spec.comment))
    return found if found in _INDEX else None


def protected(job: Job, view: DissonanceView) -> bool:
    return job.extra.get(LATENCY_SENSITIVE) == "1" or job.id in view.protected


def later(ctx: PassContext) -> bool:
    """Whether ``ctx`` places a job at a later instant than the snapshot's: a what-if
    context at a later ``now`` (``PassContext.fork``), or backfill reserving a later
    start (``keys.PLAN_START`` past ``now``: ``planner._reserve_at`` places in the
    pass's own context, at its ``now``). Who will be the job's neighbours then is
    unknown: the plugin has no opinion (Score says None, Reserve keeps nothing)."""
    if ctx.now > ctx.snapshot.now:
        return True
    start = ctx.data.get(PLAN_START)
    return start is not None and start > ctx.now


_Entry = tuple[str, bool, tuple[tuple[int, float], ...]]  # class, LS, (row, share) each


@dataclass(slots=True)
class _Base:
    """The running jobs' shares as of the last pass, kept by the plugin across passes and
    brought up to date by the difference (jobs that started, ended or changed class):
    a pass does not walk every running job's allocation again."""

    names: tuple[str, ...]  # the node table's names it was built for
    cpus: IntArray  # and their CPUs (the shares are fractions of them)
    inv: list[float]  # the table's ``inv_cpus`` as Python floats (for ``_rows``)
    share: FloatArray
    guarded: FloatArray
    entries: dict[int, _Entry] = field(default_factory=dict)
    # each entry's allocation: a job requeued and started elsewhere keeps its id (held,
    # so that an id() is never that of a dropped one)
    allocations: dict[int, Allocation] = field(default_factory=dict)
    by_row: dict[int, dict[int, _Entry]] = field(default_factory=dict)  # row → its jobs
    updates: int = 0  # since built: rebuilt now and then against rounding drift

    def put(self, job_id: int, entry: _Entry | None, allocation: Allocation | None) -> None:
        old = self.entries.pop(job_id, None)
        self.allocations.pop(job_id, None)
        if old is not None:
            self._apply(job_id, old, -1.0)
        if entry is not None and allocation is not None:
            self.entries[job_id] = entry
            self.allocations[job_id] = allocation
            self._apply(job_id, entry, 1.0)
        self.updates += 1

    def _apply(self, job_id: int, entry: _Entry, sign: float) -> None:
        k = _INDEX[entry[0]]
        for row, part in entry[2]:
            self.share[row, k] += sign * part
            if entry[1]:
                self.guarded[row, k] += sign * part
            if sign > 0:
                self.by_row.setdefault(row, {})[job_id] = entry
            else:
                self.by_row.get(row, {}).pop(job_id, None)


@dataclass(slots=True)
class _Nodes:
    """Who holds what share of each node, per class, for one pass: the base's arrays
    (copied) and the jobs placed in the pass."""

    both: FloatArray  # (rows, 2 × classes): ``share`` then ``guarded``, side by side
    base: _Base  # the running jobs (read for a note; shared with the plugin's next pass)
    updates: int  # ``base.updates`` when this pass took it
    lock: threading.Lock  # the plugin's, held while ``base`` is read
    coef: _Coef  # the pass's matrix as coefficients
    view: DissonanceView  # the model it was made for (made only at the snapshot's instant)
    placed: dict[int, _Entry] = field(default_factory=dict)  # in this pass
    placed_on: defaultdict[int, dict[int, _Entry]] = field(
        default_factory=lambda: defaultdict(dict)
    )  # row → those
    # per row: the score of every key (class, latency-sensitive: ``_Coef.column``),
    # then the same times the plugin's profile weight (``weight``; made at the first
    # ``weighted_score`` of the pass: the runtime then need not multiply per job), side
    # by side so that ``add`` writes a row's both in one go. Made at the first Score
    # of the pass and kept up to date by ``add``
    scores: FloatArray | None = None
    weight: float | None = None
    # a row's mix (``both[row]``'s bytes) → the bytes of its scores, and of its
    # weighted scores after them once ``weight`` is set, as ``add`` worked them out:
    # jobs of one kind and size placed on empty nodes give many rows the same mix, and
    # the same numbers from the same sum (so the same decisions) cost a look-up. Once
    # ``weight`` is set, the plugin's for this matrix and weight (``mixes``), kept
    # across passes
    by_mix: dict[bytes, bytes] = field(default_factory=dict)
    # the plugin's ``by_mix`` of the last matrix and weight: (coefficients' bytes,
    # weight) → by_mix (see ``Dissonance._mixes``)
    mixes: dict[tuple[bytes, float], dict[bytes, bytes]] = field(default_factory=dict)
    # key → its column of scores and of weighted scores (views: ``add`` writes the
    # table in place; a key nothing harms (``_Coef.flat``): its weighted score, 0-d)
    columns: dict[tuple[str, bool], FloatArray] = field(default_factory=dict)
    weighted_columns: dict[tuple[str, bool], FloatArray] = field(default_factory=dict)
    # ``both`` as flat doubles and as bytes, and ``scores`` as bytes and as flat doubles:
    # ``add`` updates a row and the note reads a score in plain Python through them (a
    # numpy call per element costs thousands of instructions, a memoryview's item a
    # few hundred; the same float64 arithmetic)
    cells: memoryview[float] = field(init=False)
    raw: memoryview[int] = field(init=False)
    scores_raw: memoryview[int] | None = None
    score_cells: memoryview[float] | None = None
    # the notes' figures, made once a pass: a share of a node → "62%", and a pair of
    # classes → ``figures``
    labels: dict[float, str] = field(default_factory=dict)
    pairs: dict[tuple[str, str], tuple[str, str, bool]] = field(default_factory=dict)
    # the note's argmax, written in place: no new array and scalar per job (inside a
    # pass a numpy call takes 3-6 times its time alone)
    best: IndexArray = field(default_factory=lambda: np.zeros((), dtype=np.intp))
    # row passed over → key column → the note's words up to the node placed on (None:
    # no note), as worked out for the row as it is now (``add`` drops a row's when it
    # changes): the jobs the plugin moves off a node are mostly of a few kinds, and the
    # node they leave keeps its neighbours, so most notes repeat one already worked out
    said: dict[int, dict[int, str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.raw = self.both.data.cast("B")
        self.cells = self.raw.cast("d")

    @property
    def share(self) -> FloatArray:
        """(rows, classes): the share of each node's CPUs each class holds."""
        return self.both[:, : len(CLASSES)]

    @property
    def guarded(self) -> FloatArray:
        """(rows, classes): the latency-sensitive jobs' part of ``share``."""
        return self.both[:, len(CLASSES) :]

    def table(self) -> FloatArray:
        """The score of every key on every row, then the weighted scores (made at the
        first call of the pass)."""
        table = self.scores
        if table is None:
            table = self.scores = np.empty((len(self.both), _ROW_SCORES))
            table[:, :_KEYS] = _scores(self.both @ self.coef.scaled)
            self.scores_raw = table.data.cast("B")
            self.score_cells = self.scores_raw.cast("d")
        return table

    def scores_of(self, key: tuple[str, bool]) -> FloatArray:
        """The score of a job of ``key`` on every row (a view: not to be written)."""
        out = self.columns.get(key)
        if out is None:
            out = self.columns[key] = self.table()[:, self.coef.column(key)]
        return out

    def weighted_of(self, key: tuple[str, bool], weight: float) -> FloatArray | None:
        """``scores_of(key) * weight`` (a view: not to be written); None for a weight
        other than the one the pass's weighted table was made for."""
        out = self.weighted_columns.get(key)
        if out is not None and weight == self.weight:
            return out
        if self.weight is None:
            table = self.table()
            np.multiply(table[:, :_KEYS], weight, out=table[:, _KEYS:])  # (each ``* weight``)
            self.weight = weight
            # (the pass's rows so far have no weighted scores: the kept ones for this
            # matrix and weight instead, or a new one that replaces them)
            mixes, matrix = self.mixes, (self.coef.scaled.tobytes(), weight)
            kept = mixes.get(matrix)
            if kept is None or len(kept) > MIXES_KEPT:
                mixes.clear()
                kept = mixes[matrix] = {}
            self.by_mix = kept
        elif weight != self.weight:
            return None
        j = self.coef.column(key)
        if self.coef.flat[j]:
            # (the same on every row: MAX_NODE_SCORE × weight, as the table holds it, bit
            # for bit, 0-d; the runtime adds it to every candidate's without a gather.
            # Read-only: every job of the key gets this one array)
            out = np.array(MAX_NODE_SCORE * weight)
            out.flags.writeable = False
        else:
            out = self.table()[:, _KEYS + j]
        self.weighted_columns[key] = out
        return out

    def add(self, job_id: int, entry: _Entry, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) a job placed in the pass: its shares on
        its rows, and those rows' scores (the only copy of the update: Reserve's one
        node job comes here too)."""
        cls, ls, rows = entry
        k = _INDEX[cls]
        cells, raw, placed_on = self.cells, self.raw, self.placed_on
        table, by_mix, said = self.scores_raw, self.by_mix, self.said
        if sign > 0:
            self.placed[job_id] = entry
        else:
            self.placed.pop(job_id, None)
        for row, part in rows:
            at = row * _WIDTH + k
            # (float64 + float64: what ``both[row, k] += part`` does; ``-= part`` is
            # ``+= -part``, bit for bit)
            if sign > 0:
                cells[at] += part
                if ls:
                    cells[at + _CLASSES] += part
                placed_on[row][job_id] = entry  # (a defaultdict)
            else:
                cells[at] -= part
                if ls:
                    cells[at + _CLASSES] -= part
                there = placed_on.get(row)  # (not ``[row]``: no empty dict left behind)
                if there is not None:
                    there.pop(job_id, None)
            if said:
                said.pop(row, None)
            if table is not None:  # the row's scores, for every key (and weighted)
                start = (at - k) * 8
                seen = raw[start : start + _ROW_BYTES].tobytes()
                found = by_mix.get(seen)
                if found is None:
                    found = by_mix[seen] = self.row_scores(row)
                start = row * _SCORES_BYTES
                table[start : start + len(found)] = found

    def row_scores(self, row: int) -> bytes:
        """Row ``row``'s scores worked out afresh, then weighted (once ``weight`` is
        set), as the bytes of their float64s: the row's product with the matrix in
        numpy (``dot``, a vector by a matrix: the same BLAS product as ``@``, bit for
        bit, without the ufunc machinery; not the table's first product, a matrix by a
        matrix, whose rows may differ in the last bit, so a row placed on is always
        worked out this way), then ``_scores``'s three steps (and ``* weight``) per
        number in plain Python, the same float64 arithmetic (on twenty numbers cheaper
        than numpy's calls)."""
        top = MAX_NODE_SCORE
        # (``0.0 if v < 0.0 else v`` is ``np.maximum(v, 0.0)``, NaN included; builtin
        # max costs a call with its keyword parsing)
        done = [
            0.0 if (v := 1.0 - x) < 0.0 else v * top
            for x in self.both[row].dot(self.coef.scaled).tolist()
        ]
        weight = self.weight
        if weight is None:
            return _PACK(*done)
        return _PACK_BOTH(*done, *[x * weight for x in done])

    def figures(self, view: DissonanceView, cls: str, other: str) -> tuple[str, str, bool]:
        """The model's slowdown of ``cls`` beside ``other`` and of ``other`` beside
        ``cls``, as the note writes them ("1.80x"), and whether the first is the larger
        (or equal): worked out once a pass per pair."""
        found = self.pairs.get((cls, other))
        if found is None:
            suffers, inflicts = view.of(cls, other), view.of(other, cls)
            found = self.pairs[cls, other] = (
                f"{suffers:.2f}x",
                f"{inflicts:.2f}x",
                suffers >= inflicts,
            )
        return found

    def one_of(self, row: int, cls: str, guarded: bool) -> int | None:
        """A job of ``cls`` on node ``row`` (latency-sensitive if ``guarded``), the
        lowest id: placed in this pass, else running (those left out if another pass
        moved the base on since: a what-if pass beside the scheduler's)."""
        found: int | None = None
        # (plain loops: a row holds a few jobs, fewer than a comprehension's call costs)
        there = self.placed_on.get(row)
        if there:
            for j, e in there.items():
                if e[0] == cls and (found is None or j < found):
                    found = j
        with self.lock:
            if self.base.updates == self.updates:
                jobs = self.base.by_row.get(row)
                if jobs:
                    for j, e in jobs.items():
                        if e[0] == cls and (e[1] or not guarded) and (found is None or j < found):
                            found = j
        return found


@dataclass(frozen=True, slots=True)
class _Coef:
    """The matrix as log-slowdowns over the tolerance (``L``), as two (classes, keys)
    matrices: a node's harm to a job of each key is ``share @ on_share + guarded @
    on_guarded``. Key column ``2 k + ls``: class ``k``, latency-sensitive ``ls``."""

    on_share: FloatArray
    on_guarded: FloatArray
    # the two stacked (for ``_Nodes.both``) over a doubling's harm
    scaled: FloatArray = field(init=False)
    # per key column: ``on_share``'s and ``on_guarded``'s, as Python floats (the note
    # weighs a node's mix by them: cheaper in Python than in numpy's small-array calls)
    columns: tuple[tuple[list[float], list[float]], ...] = field(init=False)
    # per key column: nothing harms a job of that key (its coefficients all 0: it scores
    # MAX_NODE_SCORE on every node, whatever the neighbours), and whether that holds for
    # every key (a matrix where nothing clashes beyond the tolerance: a young model's
    # priors)
    flat: tuple[bool, ...] = field(init=False)
    all_flat: bool = field(init=False)

    def __post_init__(self) -> None:
        both = np.vstack((self.on_share, self.on_guarded))
        object.__setattr__(self, "scaled", both / _SCALE)
        split = zip(self.on_share.T.tolist(), self.on_guarded.T.tolist(), strict=True)
        object.__setattr__(self, "columns", tuple(split))
        flat = tuple(bool(x) for x in (both == 0.0).all(axis=0))
        object.__setattr__(self, "flat", flat)
        object.__setattr__(self, "all_flat", all(flat))

    @classmethod
    def of(cls, logs: FloatArray, protect: float) -> _Coef:
        n = len(CLASSES)
        on_share = np.zeros((n, 2 * n))
        on_guarded = np.zeros((n, 2 * n))
        for k in range(n):
            for ls in (0, 1):
                mine = protect if ls else 1.0
                on_share[:, 2 * k + ls] = mine * logs[k, :] + logs[:, k]
                on_guarded[:, 2 * k + ls] = (protect - 1.0) * logs[:, k]
        return cls(on_share, on_guarded)

    @staticmethod
    def column(key: tuple[str, bool]) -> int:
        return _COLUMN[key]


# Per pass: the nodes' shares and the matrix as coefficients (``_Nodes.coef``).
NODES: StateKey[_Nodes] = StateKey("dissonance.nodes")
# Per pass: id(job spec) → the class of its workload (the pass's specs live as long as it)
CLASSES_BY_SPEC: StateKey[dict[int, str | None]] = StateKey("dissonance.classes_by_spec")
_UNSET = "\0"
_NO_VIEW = object()
# Per job: (class, latency-sensitive) (Score → Reserve).
KEY: StateKey[tuple[str, bool]] = StateKey("dissonance.key")


class Dissonance:
    name = NAME

    def __init__(self, protect: float = PROTECT, tolerance: float = TOLERANCE) -> None:
        self.protect = protect
        self.tolerance = tolerance
        # the running jobs' shares as of the last pass (the server and the simulator
        # build a new snapshot every pass, with most of the same jobs running)
        self._base: _Base | None = None
        self._lock = threading.Lock()
        self._seen: tuple[object, object] | None = None  # (running jobs, view) of the base
        # the running jobs the base was last brought up to, by id, and the view it was
        # for: a job that is the same object under the same view changed nothing
        self._jobs: dict[int, Job] = {}
        self._jobs_view: object = None
        # rows' scores by their mix (``_Nodes.by_mix``), kept from pass to pass for the
        # last matrix and weight: a pure function of the three, and a server's passes
        # see mostly the same nodes with the same neighbours (the matrix changes when
        # the model learns: then they start afresh)
        self._mixes: dict[tuple[bytes, float], dict[bytes, bytes]] = {}
        # the matrix as coefficients, for the view it was made from (most passes see the
        # same view: the model is published anew when it learns)
        self._coef_of: tuple[DissonanceView, _Coef] | None = None
        # pending jobs' keys (``job_key``'s) by id, with the job object they were made for,
        # for the view they were made under: a pending job that is the same object under
        # the same view has the same class and mark (a frozen Job is not changed in
        # place); most pending jobs are scored again pass after pass. One attribute,
        # swapped whole: a pass beside (what-if) never sees one view's keys under another
        self._keys: tuple[object, dict[int, tuple[Job, tuple[str, bool] | None]]] = (
            _NO_VIEW,  # (never a snapshot's: None is checked)
            {},
        )

    def fork_lock(self) -> AbstractContextManager[object]:
        """Held across the fork of a pass decided in a process of its own
        (``hal.scheduler.forked``): a what-if pass on another thread may hold it."""
        return self._lock

    # -- Score ------------------------------------------------------------------------

    def job_key(self, ctx: PassContext, job: Job) -> tuple[str, bool] | None:
        """The job's (class, latency-sensitive) for this pass; None where the plugin has
        no opinion (as a PreScore's SKIP): no model, no class for the job, or a
        placement at a later instant (``later``: who will be its neighbours then is
        unknown)."""
        view = ctx.snapshot.dissonance
        kept = self._keys
        if view is not kept[0]:  # (the keys kept are for one view, with a matrix)
            if view is None or not view.slowdown:
                return None
            kept = self._keys = (view, {})
        if later(ctx):
            return None
        keys = kept[1]
        if len(keys) > KEYS_KEPT:
            keys = {}
            self._keys = (view, keys)
        known = keys.get(job.id)
        if known is not None and known[0] is job:
            return known[1]
        assert view is not None  # (``_keys[0]`` never is)
        key = self._key(ctx, job, view)
        keys[job.id] = (job, key)
        return key

    def _key(self, ctx: PassContext, job: Job, view: DissonanceView) -> tuple[str, bool] | None:
        """The job's (class, latency-sensitive); None: no class."""
        extra = job.extra
        if PROFILE_CLASS in extra:
            cls = job_class(job, view)
        else:  # (by its workload: the same for every job of one spec, an array's elements)
            classes = ctx.data.get(CLASSES_BY_SPEC)
            if classes is None:
                classes = {}
                ctx.data.write(CLASSES_BY_SPEC, classes)
            spec_key = id(job.spec)
            cls = classes.get(spec_key, _UNSET)
            if cls is _UNSET:
                cls = classes[spec_key] = job_class(job, view)
        if cls is None:
            return None
        return cls, extra.get(LATENCY_SENSITIVE) == "1" or job.id in view.protected

    def score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray:
        """The job's scores (zeros where it has no opinion: the runtime calls
        ``weighted_score``, which says None then)."""
        key = self.job_key(ctx, job)
        view = ctx.snapshot.dissonance
        if key is None or view is None:
            return np.zeros(len(feasible))
        state.write(KEY, key)
        out: FloatArray = self._nodes(ctx, view).scores_of(key)[feasible]
        return out

    def weighted_score(
        self,
        weight: float,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray | None:
        """``score(...) * weight``, bit for bit: a gather from the pass's weighted table
        (``interfaces.WeightedScorer``: the runtime then does not multiply); None where
        the plugin has no opinion on the job (``job_key``: nothing is added). Also the
        plugin's PreScore: the key is written for Reserve."""
        # (the usual case first, as ``job_key`` and ``weighted_of`` would find it: the
        # pass's table made, which says that this context has a model (and, a fork's
        # data starting empty, that it is at the snapshot's instant), the job's key kept
        # under this view, and no later start planned (``later``: backfill's
        # reservations are placed in the pass's own context))
        nodes = ctx.data.get(NODES)
        kept = self._keys
        if nodes is not None and weight == nodes.weight and nodes.view is kept[0]:
            known = kept[1].get(job.id)
            if known is not None and known[0] is job and not later(ctx):
                key = known[1]
                if key is None:
                    return None
                found = nodes.weighted_columns.get(key)  # (after the key's first Score)
                if found is not None:
                    state[KEY] = key  # (``state.write`` without its call; typed alike)
                    # (0-d: the same on every node, ``_Coef.flat``)
                    out: FloatArray = found[feasible] if found.ndim else found
                    return out
        key = self.job_key(ctx, job)
        view = ctx.snapshot.dissonance
        if key is None or view is None:
            return None
        state.write(KEY, key)
        nodes = ctx.data.get(NODES) or self._nodes(ctx, view)
        column = nodes.weighted_of(key, weight)
        if column is None:
            out = nodes.scores_of(key)[feasible] * weight
        else:
            out = column[feasible] if column.ndim else column
        return out

    # -- Reserve ----------------------------------------------------------------------

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        key = state.get(KEY)
        names = allocation.nodes
        if key is not None and len(names) == 1:
            # scored (Score wrote the key in this context, having found the model and
            # the pass at its instant, and made the pass's table), on one node: the
            # common case
            nodes = ctx.data.get(NODES)
            c = ctx.nodes.index.get(names[0])
            if nodes is not None and c is not None and nodes.score_cells is not None:
                if nodes.coef.all_flat:  # (every score MAX_NODE_SCORE whatever the mix:
                    return SUCCESS  # no row to work out again, no note: nothing kept)
                note = self._note(ctx, nodes, state, key, c)
                if note:
                    add_placement_note(ctx.data, job.id, note)
                part = _share(allocation.per_node[0].cpus, nodes.base.inv[c])
                nodes.add(job.id, (key[0], key[1], ((c, part),)), 1)
                return SUCCESS
        view = ctx.snapshot.dissonance
        if view is None or not view.slowdown or later(ctx):
            return SUCCESS
        if key is not None:
            cls, ls = key
        else:
            found = job_class(job, view)
            if found is None:
                return SUCCESS
            cls, ls = found, protected(job, view)
        nodes = ctx.data.get(NODES) or self._nodes(ctx, view)
        # (not scored on one node: no note, Score's choice decided nothing of this kind)
        nodes.add(job.id, (cls, ls, _rows(ctx.nodes.index, nodes.base.inv, allocation)), 1)
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        view = ctx.snapshot.dissonance
        nodes = ctx.data.get(NODES)
        if view is None or nodes is None:
            return
        if job.id in nodes.placed:
            nodes.add(job.id, nodes.placed[job.id], -1)
        drop_placement_note(ctx.data, job.id)

    def _note(
        self,
        ctx: PassContext,
        nodes: _Nodes,
        state: CycleState,
        key: tuple[str, bool],
        c: int,
    ) -> str:
        """What ``hal explain`` says when this plugin's score moved a one-node job
        (placed on row ``c``) off the node the other plugins' scores alone would have
        chosen, because of a neighbour there: "" otherwise. The pass's table is made
        (``score_cells``: by this job's Score)."""
        j = _COLUMN[key]
        cells = nodes.score_cells
        scored = state.get(NODE_SCORES)
        # (no node scores below 0: ``here`` under NOTE_MIN, no move worth a note; nor
        # where the key scores the same on every node)
        if (
            scored is None
            or cells is None
            or (here := cells[c * _ROW_SCORES + j]) < NOTE_MIN
            or nodes.coef.flat[j]
        ):
            return ""
        candidates, parts = scored
        # the other scores' sum, in the order the framework added them
        without: FloatArray | None = None
        scored_here = False
        for name, other in parts.items():
            if name == NAME:
                scored_here = True
            else:
                without = other if without is None else without + other
        if not scored_here or without is None:
            return ""
        # (where this score is the same on every node, the others' pick is the job's)
        a: int = candidates.item(without.argmax(out=nodes.best))
        if c == a or here - cells[a * _ROW_SCORES + j] < NOTE_MIN:
            return ""  # (not moved, or a clash too mild to be worth saying)
        return self._said(ctx, nodes, key, j, a, c)

    def _said(
        self, ctx: PassContext, nodes: _Nodes, key: tuple[str, bool], j: int, a: int, c: int
    ) -> str:
        """The note of a job of ``key`` (key column ``j``) placed on row ``c``, passed
        over row ``a`` because of a neighbour there; "" where none is found."""
        names = ctx.nodes.names
        # (the words kept for the row hold only while the running jobs' shares are the
        # ones the pass began with: see ``one_of``)
        fresh = nodes.base.updates == nodes.updates
        kept = nodes.said.get(a) if fresh else None
        if kept is not None and j in kept:
            words = kept[j]
        else:
            view = ctx.snapshot.dissonance  # (there: Score wrote the key)
            assert view is not None
            words = self._words(nodes, view, key[0], j, a, names[a])
            if fresh:
                if kept is None:
                    kept = nodes.said[a] = {}
                kept[j] = words
        return "" if words is None else words + names[c]

    def _words(
        self, nodes: _Nodes, view: DissonanceView, cls: str, j: int, a: int, name: str
    ) -> str | None:
        """The note of a job of key column ``j`` (class ``cls``) passed over row ``a``
        (named ``name``) up to the node it was placed on, for the row as it is now;
        None where no neighbour of the class that weighs most is found."""
        # the class that weighs most against the job there, and one of its jobs (per
        # class ``share · on_share + guarded · on_guarded``, on Python floats: the
        # interpreter's own float arithmetic costs less than ``map`` over ``operator``'s)
        at = a * _WIDTH
        mix = nodes.cells[at : at + _WIDTH].tolist()
        on_share, on_guarded = nodes.coef.columns[j]
        weigh = [mix[i] * on_share[i] + mix[_CLASSES + i] * on_guarded[i] for i in _CLASS_RANGE]
        k = weigh.index(max(weigh))  # (the first of the largest)
        other = CLASSES[k]
        guarded = mix[_CLASSES + k] * on_guarded[k] * 2 > weigh[k]  # mostly them
        neighbour = nodes.one_of(a, other, guarded)
        if neighbour is None:
            return None
        share = mix[k]
        labels = nodes.labels
        held = labels.get(share)
        if held is None:
            held = labels[share] = f"{1.0 if share > 1.0 else share:.0%}"  # (``min(share, 1.0)``)
        suffers, inflicts, worse = nodes.figures(view, cls, other)
        if guarded:
            what = (
                f"latency-sensitive job {neighbour} ({other}, {held} of the node) would be "
                f"slowed by it ({other} beside {cls}: {inflicts})"
            )
        elif worse:
            what = (
                f"beside job {neighbour} ({other}, {held} of the node) it would be slowed "
                f"({cls} beside {other}: {suffers})"
            )
        else:
            what = (
                f"job {neighbour} ({other}, {held} of the node) would be slowed by it "
                f"({other} beside {cls}: {inflicts})"
            )
        return f"passed over {name} because of a neighbour (dissonance): {what}; placed on "

    # -- per pass ---------------------------------------------------------------------

    def _coef(self, view: DissonanceView) -> _Coef:
        tol = math.log(self.tolerance)
        logs = np.array(
            [[max(0.0, math.log(max(view.of(v, a), 1e-9)) - tol) for a in CLASSES] for v in CLASSES]
        )
        return _Coef.of(logs, self.protect)

    def _nodes(self, ctx: PassContext, view: DissonanceView) -> _Nodes:
        """The shares of the pass's running jobs (Reserve adds those placed since) and
        the matrix as coefficients, made at the pass's first call."""
        found = ctx.data.get(NODES)
        if found is not None:
            return found
        with self._lock:  # (a what-if pass may run beside the scheduler's)
            base = self._base_for(ctx, view)
            both = np.hstack((base.share, base.guarded))  # (a copy: the pass writes it)
            kept = self._coef_of
            if kept is not None and kept[0] is view:  # (a view is not changed in place)
                coef = kept[1]
            else:
                coef = self._coef(view)
                self._coef_of = (view, coef)
            found = _Nodes(both, base, base.updates, self._lock, coef, view, mixes=self._mixes)
        ctx.data.write(NODES, found)
        return found

    def _base_for(self, ctx: PassContext, view: DissonanceView) -> _Base:
        """The kept base, brought up to this pass's running jobs."""
        table = ctx.nodes
        base = self._base
        seen_last = self._seen
        if base is not None and seen_last and seen_last[0] is ctx.running and seen_last[1] is view:
            return base  # (another context of the same pass: the same running jobs)
        if (
            base is None
            or base.names != table.names
            or not np.array_equal(base.cpus, table.cap_cpus)
            or base.updates > REBUILD_AFTER
        ):
            n = len(table.names)
            base = self._base = _Base(
                table.names,
                table.cap_cpus.copy(),
                table.inv_cpus.tolist(),
                np.zeros((n, len(CLASSES))),
                np.zeros((n, len(CLASSES))),
            )
            self._jobs = {}
        # (a job object seen last pass under the same view: its class, mark and
        # allocation are as they were; a frozen Job is not changed in place)
        known = self._jobs if self._jobs_view is view else {}
        jobs: dict[int, Job] = {}
        entries, allocations = base.entries, base.allocations
        for job in ctx.running:
            if known.get(job.id) is job:
                jobs[job.id] = job
                continue
            if job.state is not JobState.RUNNING or job.allocation is None:
                continue  # a suspended job holds memory, not the node's bandwidth
            cls = job_class(job, view)
            if cls is None:
                continue
            ls = protected(job, view)
            jobs[job.id] = job
            old = entries.get(job.id)
            if (
                old is None
                or old[0] != cls
                or old[1] != ls
                or allocations[job.id] is not job.allocation
            ):
                entry = (cls, ls, _rows(table.index, base.inv, job.allocation))
                base.put(job.id, entry, job.allocation)
        for job_id in [j for j in entries if j not in jobs]:
            base.put(job_id, None, None)
        self._jobs, self._jobs_view = jobs, view
        self._seen = (ctx.running, view)
        return base


def _scores(scaled: FloatArray) -> FloatArray:
    """From harm over a doubling's: ``MAX_NODE_SCORE`` where nothing clashes, 0 where the
    clash is worth a doubling or more."""
    out: FloatArray = 1.0 - scaled
    np.maximum(out, 0.0, out=out)
    out *= MAX_NODE_SCORE
    return out


def _rows(
    index: dict[str, int], inv: list[float], allocation: Allocation
) -> tuple[tuple[int, float], ...]:
    """Each node row of ``allocation`` (by the node table's ``index``) and the share of
    its CPUs the job holds there (``inv``: the table's ``inv_cpus``, as Python floats)."""
    out = []
    for name, held in zip(allocation.nodes, allocation.per_node, strict=False):
        row = index.get(name)
        if row is not None:
            out.append((row, _share(held.cpus, inv[row])))
    return tuple(out)


def _share(cpus: float, inv: float) -> float:
    """The share of a node's CPUs that ``cpus`` of them are (``inv``: one over the
    node's CPUs), at most the whole node: ``min(1.0, cpus * inv)``."""
    part = cpus * inv
    return part if part < 1.0 else 1.0


def new(args: PluginArgs) -> Dissonance:
    reject_unknown_args(args, ("protect", "tolerance"))
    protect = args.get("protect", PROTECT)
    if isinstance(protect, bool) or not isinstance(protect, int | float) or not protect >= 1:
        raise PluginArgsError(
            "protect", "must be a number >= 1 (how many times a latency-sensitive job counts)"
        )
    tolerance = args.get("tolerance", TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not tolerance >= 1:
        raise PluginArgsError(
            "tolerance", "must be a slowdown >= 1 (1.05: ignore clashes of 5 % or less)"
        )
    return Dissonance(float(protect), float(tolerance))


# The extension points this plugin serves, checked by mypy here.
_SCORE: type[ScorePlugin] = Dissonance
_WEIGHTED: type[WeightedScorer] = Dissonance
_RESERVE: type[ReservePlugin] = Dissonance
