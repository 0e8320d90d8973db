"""``Framework``: runs one job through the extension points of a ``Profile``.

``place`` is the one placement entry point, shared by the main pass, ``sbatch
--test-only``, ``squeue --start`` and (later) backfill, so all of them agree on what
fits. Its modes follow Slurm's ``select/cons_tres`` job_test:

* ``NOW``       place the job at ``ctx.now`` and commit it: Reserve and Permit plugins
                run and the allocation is taken out of ``ctx.nodes``.
* ``TEST_ONLY`` would it fit at ``ctx.now``? Nothing is reserved or committed.
* ``WILL_RUN``  the earliest instant it would fit, replaying the expected ends of the
                running jobs (start + time limit; unlimited jobs never end) on a copy of
                the table. Other pending jobs are not taken into account.

Multi-node jobs go through the Placement stage when the profile has a PlacementGenerate
plugin: after Score, the plugin chooses the node set as a whole (topology), or says the
job must wait (``Stage.PLACEMENT``).

``pre_filter`` is PreFilter alone, with ``place``'s verdicts: the main pass asks it for
jobs behind a blocked partition, whose own reason is all that is wanted.

``within`` (backfill): Filter and Score see that table instead of ``ctx.nodes`` — the
least free over the window the job would run in — while PreFilter, Reserve and Permit
see the pass as usual and a NOW placement is taken out of ``ctx.nodes``. So a backfilled
job goes through exactly the cycle a main-pass job does, only on nodes that stay free for
as long as it is expected to run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from operator import attrgetter
from typing import NamedTuple, cast

import numpy as np

from hal.core.job import Allocation, Job
from hal.core.preemption import holding
from hal.core.resources import ResourceVector
from hal.core.states import PendingReason
from hal.scheduler.framework.availability import LedgerChanges, LedgerMark, ReleaseLedger
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import (
    FilterResult,
    FloatArray,
    IndexArray,
    PreFilterWaiver,
    ScoreNormalizer,
    ScorePlugin,
    WeightedScorer,
)
from hal.scheduler.framework.keys import (
    FITS,
    GROUP,
    JOB_BOUND,
    MAX_NODES,
    NODE_SCORES,
    PLACEMENT_KEY,
    REQUESTS,
)
from hal.scheduler.framework.node_table import BoolArray, NodeTable
from hal.scheduler.framework.profile import Profile
from hal.scheduler.framework.request import (
    NodeRequest,
    PlacementKey,
    node_counts,
    placement_key,
)
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.framework.status import SUCCESS, Code, Status, error, unschedulable
from hal.scheduler.framework.timing import unwrapped


class Mode(StrEnum):
    NOW = "now"
    TEST_ONLY = "test_only"
    WILL_RUN = "will_run"


class Stage(StrEnum):
    """Where a job's cycle stopped: the pass treats a Filter-stage failure differently
    (it may block the partition, and it is shared by every job with the same key)."""

    PRE_FILTER = "pre_filter"
    GATE = "gate"
    FILTER = "filter"
    SCORE = "score"
    PLACEMENT = "placement"
    RESERVE = "reserve"
    PERMIT = "permit"
    DONE = "done"


class Outcome(NamedTuple):
    """What ``place`` found. ``allocation`` and ``start_time`` are set on success. (A
    named tuple: one per cycle, and a frozen dataclass costs twice as much to make.)"""

    status: Status
    stage: Stage
    allocation: Allocation | None = None
    start_time: float | None = None


@dataclass(frozen=True, slots=True)
class WillRunResult:
    """``sbatch --test-only`` / ``squeue --start``: the job would start at
    ``start_time`` on ``allocation``'s nodes."""

    job_id: int
    start_time: float
    allocation: Allocation
    partition: str = ""  # the partition it would start in ("": the job's own)

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.allocation.nodes


Gate = Callable[[Job], Status | None]
_NO_NODES = unschedulable(PendingReason.RESOURCES, "no nodes")
# Enum members as plain constants on the per-job paths: ``Code.SUCCESS`` is a lookup
# through the enum class (about 80 ns on Python 3.11), a dozen of them per job.
_SUCCESS, _SKIP, _UNSCHEDULABLE = Code.SUCCESS, Code.SKIP, Code.UNSCHEDULABLE
_TEST_ONLY, _WILL_RUN = Mode.TEST_ONLY, Mode.WILL_RUN
_PRE_FILTER, _GATE, _FILTER, _DONE = Stage.PRE_FILTER, Stage.GATE, Stage.FILTER, Stage.DONE
_job_id = attrgetter("id")
FitCache = dict[PlacementKey, Status]
FilterCalls = tuple[
    tuple[str, Callable[[PassContext, CycleState, Job, NodeRequest], FilterResult]], ...
]
PreFilterCalls = tuple[tuple[str, Callable[[PassContext, CycleState, Job], Status]], ...]
# What a ``PreFilterWaiver`` may read of a job, and the placement key besides its spec:
# its spec (the object), partition, admin hold, array id and array throttle.
_WaiverInputs = tuple[object, str, bool, int | None, int]


def _waiver_inputs(job: Job) -> _WaiverInputs:
    """What a job's ``PreFilterWaiver`` answers are worked out from (``pre_filter``)."""
    return (job.spec, job.partition, job.held_by_admin, job.array_job_id, job.array_max_running)


# A job behind a blocked queue: the PreFilter plugins that may reject it, and its key
# (``Framework.pre_filter``), kept with the inputs they were worked out from.
_Own = tuple[_WaiverInputs, PreFilterCalls, PlacementKey]
# (epoch, the entries) of what ``pre_filter`` keeps, before a forked pass:
# ``Framework.own_mark``
OwnMark = tuple[int, dict[int, _Own]]


@dataclass(frozen=True, slots=True)
class OwnChanges:
    """What a forked pass changed of what ``pre_filter`` keeps (``Framework.own_changes``):
    on the entries of ``base_epoch``, per job id its place in the pass's pending jobs and
    the places of the PreFilter calls kept for it in the profile's (``changed``: the
    child's objects cannot travel, and the parent has the same job and calls at the same
    places), and the ids ``dropped``; the entries are then of ``epoch``."""

    base_epoch: int
    epoch: int
    changed: dict[int, tuple[int, tuple[int, ...]]]
    dropped: tuple[int, ...]


# what a forked pass carries back of the framework's own (``Framework.pass_mark``)
FrameworkMark = tuple[LedgerMark, OwnMark]
FrameworkChanges = tuple[LedgerChanges, OwnChanges | None]


# Allocations this wide or wider have their rows memoised as they are built: looking up
# thousands of node names again costs more than building the arrays once.
_REMEMBER_FROM = 16


class Framework:
    def __init__(self, profile: Profile, releases: ReleaseLedger | None = None) -> None:
        self.profile = profile
        self._current = ""  # the plugin being called, to name it if it raises
        # Backfill's running jobs as profile events, kept from one pass to the next (a
        # timed pass's framework is handed the scheduler's: the same rows, timed or not)
        self.releases = ReleaseLedger() if releases is None else releases
        # Resolved once: isinstance against a Protocol is slow, and this runs per job.
        # (name, bound method) per plugin: the name and the method are looked up once
        self._pre_filter_calls: PreFilterCalls = tuple(
            (p.name, p.pre_filter) for p in profile.pre_filter
        )
        # Each PreFilter call with the plugin's ``lets_through`` when it can say a job
        # passes it from the job alone (``PreFilterWaiver``), None for the others
        self._waived_calls = tuple(
            (
                call,
                cast(PreFilterWaiver, p).lets_through
                if isinstance(unwrapped(p), PreFilterWaiver)
                else None,
            )
            for call, p in zip(self._pre_filter_calls, profile.pre_filter, strict=True)
        )
        # job id → ``_Own`` of this pass and of those before it since the last pass
        # over every job (``new_pass``): a job
        # waiting behind a blocked queue pass after pass is judged by the plugins that
        # may reject it, without asking the others again (its reason and estimate may
        # change meanwhile: they are no input)
        self._own: dict[int, _Own] = {}
        self._own_before: dict[int, _Own] = {}
        self._own_epoch = 0  # bumped by every pass (``new_pass``): a forked pass's mark
        self._filter_calls: FilterCalls = tuple((p.name, p.filter) for p in profile.filter)
        self._filters_skipping: dict[frozenset[str], FilterCalls] = {}
        self._scorers = tuple(_scorer(p, w) for p, w in profile.score)

    def sort(self, jobs: Iterable[Job]) -> list[Job]:
        """By the QueueSort key, ties by job id: sorted by id, then (stably) by key, so
        the key is called once per job and no (key, id) pair is built."""
        ordered = sorted(jobs, key=_job_id)
        ordered.sort(key=self.profile.queue_sort.sort_key)
        return ordered

    def place(
        self,
        ctx: PassContext,
        job: Job,
        mode: Mode,
        *,
        gate: Gate | None = None,
        fit_cache: FitCache | None = None,
        within: NodeTable | None = None,
    ) -> Outcome:
        """Run ``job``'s cycle in ``mode``. ``gate`` runs after PreFilter (the pass uses
        it to hold jobs behind a blocked one); ``fit_cache`` shares Filter failures
        between jobs with the same placement key and is valid only while resources can
        only shrink (one NOW pass). ``within``: see the module docstring."""
        if mode is _WILL_RUN:
            return self._will_run(ctx, job)
        state = CycleState()
        self._current = ""
        reserved: list[tuple[int, Allocation]] = []
        real = ctx.nodes
        try:
            return self._cycle(
                ctx,
                state,
                job,
                mode=mode,
                gate=gate,
                fit_cache=None if within is not None else fit_cache,
                reserved=reserved,
                within=within,
            )
        except Exception as err:  # a plugin bug fails this job only
            ctx.nodes = real
            plugin = self._current or "framework"
            if reserved:
                self._unreserve(ctx, state, job, reserved)
            return Outcome(error(f"{type(err).__name__}: {err}", plugin), Stage.DONE)

    def place_group(
        self,
        ctx: PassContext,
        jobs: Sequence[Job],
        mode: Mode,
        *,
        gate: Gate | None = None,
        within: NodeTable | None = None,
    ) -> tuple[list[Outcome], int | None]:
        """Place ``jobs``, which start together or not at all (a het job's components:
        the group-placement seam, ``grouping.py``), all or none, in one go.

        Each job runs its own cycle in ``mode`` (NOW or TEST_ONLY) in order, on the nodes
        the earlier ones left, so no two of them count on the same resources. The first
        one that does not fit ends the try: NOW allocations already made are released
        and their Reserve plugins undone, so nothing of the group is left placed.
        Returns the outcomes so far and the index of the job that failed (None: all
        placed; the outcomes then hold every allocation).

        A job that does not fit on what the earlier ones left is tried again first, once
        per job: an earlier one may have taken the only nodes it can use (``-c1 : -w
        node1 -c2`` on two free nodes: the first on node1 left the second nothing,
        though node2 would have done for the first). Outcomes and the failed index are
        in ``jobs``' order whatever order placed them.

        ``within`` (backfill) is copied, and each placed job taken out of the copy, for
        the same reason the table is: a window is read-only and shared. ``keys.GROUP``
        in ``ctx.data`` holds ``jobs`` meanwhile, for plugins that judge what the jobs
        hold together (a counted resource's total)."""
        original = ctx.nodes
        ctx.data.write(GROUP, tuple(jobs))
        order = list(range(len(jobs)))
        try:
            for attempt in range(len(jobs)):
                window = within.copy() if within is not None else None
                if mode is _TEST_ONLY and window is None:
                    ctx.nodes = original.copy()  # a scratch table the jobs are taken from
                tried, failed = self._place_group(ctx, [jobs[i] for i in order], mode, gate, window)
                ctx.nodes = original
                if not failed or attempt == len(jobs) - 1:  # (0: the first tried fails)
                    break
                order.insert(0, order.pop(failed))  # the one that failed first next time
            outcomes = [tried[0]] * len(jobs)  # (only the failed one's is read then)
            for place, out in zip(order, tried, strict=False):
                outcomes[place] = out
            return outcomes, None if failed is None else order[failed]
        finally:
            ctx.data.delete(GROUP)
            ctx.nodes = original

    def _place_group(
        self,
        view: PassContext,
        jobs: Sequence[Job],
        mode: Mode,
        gate: Gate | None,
        window: NodeTable | None,
    ) -> tuple[list[Outcome], int | None]:
        done: list[tuple[Job, CycleState, list[tuple[int, Allocation]], Allocation]] = []
        outcomes: list[Outcome] = []
        for i, job in enumerate(jobs):
            state = CycleState()
            reserved: list[tuple[int, Allocation]] = []
            real = view.nodes
            self._current = ""
            try:
                out = self._cycle(
                    view,
                    state,
                    job,
                    mode=mode,
                    gate=gate,
                    fit_cache=None,  # resources grow again when a group is undone
                    reserved=reserved,
                    within=window,
                )
            except Exception as err:  # a plugin bug fails this group only
                view.nodes = real
                if reserved:
                    self._unreserve(view, state, job, reserved)
                plugin = self._current or "framework"
                out = Outcome(error(f"{type(err).__name__}: {err}", plugin), Stage.DONE)
            outcomes.append(out)
            allocation = out.allocation
            if not out.status.is_success or allocation is None:
                for placed, st, res, alloc in reversed(done):
                    if mode is Mode.NOW:
                        view.nodes.release(alloc, exclusive=placed.spec.exclusive)
                        self._unreserve(view, st, placed, res)
                return outcomes, i
            if mode is _TEST_ONLY and window is None:  # later jobs: taken
                view.nodes.take(allocation, exclusive=job.spec.exclusive)
            if window is not None:
                window.take(allocation, exclusive=job.spec.exclusive)
            done.append((job, state, reserved, allocation))
        return outcomes, None

    def new_pass(self, *, every_job: bool = True) -> None:
        """A pass begins: what ``pre_filter`` kept of jobs the last pass did not ask
        about is let go. ``every_job=False``: a pass that looks at part of the queue
        (a bounded one: ``default_queue_depth``), which lets nothing go and adds what it
        asks to what is kept, so the next full pass finds every job's plugins, not
        those of the hundred jobs the passes between looked at."""
        self._own_epoch += 1
        if every_job:
            self._own_before, self._own = self._own, {}
        else:
            self._own_before = self._own  # (read and added to as one)

    def pre_filter(self, ctx: PassContext, job: Job) -> Outcome | None:
        """PreFilter alone, for a job the pass will not place anyway (its partition is
        blocked): the job's own rejection, as ``place`` would give it, or None when
        every PreFilter plugin lets it through (it then waits behind the queue).

        Only a rejection is wanted here, so the plugins whose ``lets_through`` says the
        job passes them (``PreFilterWaiver``) are not called: worked out once and kept
        from pass to pass while the job waits with the same inputs (``new_pass``)."""
        self._current = ""
        try:
            inputs = _waiver_inputs(job)
            kept = self._own_before.get(job.id)
            if kept is None or kept[0] != inputs:  # (the spec: the same object, at once)
                kept = self._own_calls(job, inputs)
            self._own[job.id] = kept
            calls = kept[1]
            if not calls:
                return None
            state = CycleState()
            state.write(PLACEMENT_KEY, kept[2])
            return self._pre_filters(ctx, state, job, set(), calls)
        except Exception as err:  # a plugin bug fails this job only
            plugin = self._current or "framework"
            return Outcome(error(f"{type(err).__name__}: {err}", plugin), Stage.DONE)

    # -- a pass decided in a forked process (``hal.scheduler.forked``): what
    # ``pre_filter`` kept travels back, so that the next child does not ask every
    # waiting job's ``lets_through`` again (100,000 jobs behind a blocked queue: a tenth
    # to a fifth of a forked pass at 10,000 nodes, docs/benchmarks-scale.md)

    def pass_mark(self) -> FrameworkMark:
        """What the framework keeps from pass to pass, before a pass decided in a forked
        process (the child's): the release ledger's rows and the PreFilter calls kept
        for the waiting jobs."""
        return self.releases.pass_mark(), self.own_mark()

    def pass_changes(self, mark: FrameworkMark, snapshot: ClusterSnapshot) -> FrameworkChanges:
        """What the pass (on ``snapshot``) changed of it since ``mark`` (the child's)."""
        return self.releases.pass_changes(mark[0]), self.own_changes(mark[1], snapshot.pending)

    def adopt(self, changes: FrameworkChanges, snapshot: ClusterSnapshot) -> None:
        """A forked pass's ``changes`` (the parent's), with the parent's jobs of the
        pass's ``snapshot``: the next child starts with them."""
        rows, own = changes
        self.releases.adopt(rows, snapshot.running)
        self.adopt_own(own, snapshot.pending)

    def own_mark(self) -> OwnMark:
        """What ``pre_filter`` keeps before a pass (the child's)."""
        return self._own_epoch, dict(self._own)

    def own_changes(self, mark: OwnMark, pending: Sequence[Job]) -> OwnChanges | None:
        """What the pass changed of it since ``mark``, the jobs by their place in
        ``pending`` (the pass's snapshot's); None when no pass of this framework ran (a
        timed pass has a framework of its own)."""
        epoch, before = mark
        if self._own_epoch == epoch:
            return None
        own = self._own
        fresh = [(jid, entry) for jid, entry in own.items() if before.get(jid) is not entry]
        dropped = [jid for jid in before if jid not in own]
        changed: dict[int, tuple[int, tuple[int, ...]]] = {}
        if fresh:
            at = {job.id: i for i, job in enumerate(pending)}
            place = {id(call): i for i, call in enumerate(self._pre_filter_calls)}
            # (one tuple per set of calls: pickled once, however many jobs share it)
            shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
            for jid, (_, calls, _) in fresh:
                i = at.get(jid)
                if i is None:  # (never asked of a job not pending: not carried)
                    dropped.append(jid)
                    continue
                picked = tuple(place[id(call)] for call in calls)
                changed[jid] = (i, shapes.setdefault(picked, picked))
        return OwnChanges(epoch, self._own_epoch, changed, tuple(dropped))

    def adopt_own(self, changes: OwnChanges | None, pending: Sequence[Job]) -> None:
        """A forked pass's ``changes`` (the parent's), its entries made again with the
        parent's jobs of ``pending`` (the pass's snapshot's, which the child saw) and
        the parent's calls: what ``pre_filter`` would have kept, had the pass run here.
        Nothing when a pass ran here since the pass's mark: what is kept here is then
        as valid as it was."""
        if changes is None or self._own_epoch != changes.base_epoch:
            return
        own = self._own
        for jid in changes.dropped:
            own.pop(jid, None)
        calls = self._pre_filter_calls
        chosen: dict[tuple[int, ...], PreFilterCalls] = {}
        for jid, (i, picked) in changes.changed.items():
            job = pending[i] if i < len(pending) else None
            if job is None or job.id != jid:  # (not the pass's snapshot: let go)
                own.pop(jid, None)
                continue
            kept = chosen.get(picked)
            if kept is None:
                kept = chosen[picked] = tuple(calls[k] for k in picked)
            own[jid] = (_waiver_inputs(job), kept, placement_key(job))
        self._own_epoch = changes.epoch

    def _own_calls(self, job: Job, inputs: _WaiverInputs) -> _Own:
        """``job``'s ``_Own``: the PreFilter calls of the plugins that may reject it.
        (Asked of every job a pass finds new behind a blocked queue: the plugin asked is
        named in ``_current`` only if it raises.)"""
        calls = []
        name = ""
        try:
            for call, lets_through in self._waived_calls:
                if lets_through is not None:
                    name = call[0]
                    if lets_through(job):
                        continue
                calls.append(call)
        except Exception:
            self._current = name
            raise
        return inputs, tuple(calls), placement_key(job)

    def _pre_filters(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        skipped: set[str],
        calls: PreFilterCalls | None = None,
    ) -> Outcome | None:
        """Every PreFilter plugin in order (or those of ``calls``): the first rejection,
        or None (``skipped`` gains the plugins that answered SKIP). The plugin being
        called is named in ``_current`` only if it raises: this runs for every pending
        job."""
        name = ""
        try:
            for name, pre_filter in self._pre_filter_calls if calls is None else calls:
                st = pre_filter(ctx, state, job)
                code = st.code
                if code is _SUCCESS:
                    continue
                if code is _SKIP:
                    skipped.add(name)
                    continue
                return Outcome(st.with_plugin(name), _PRE_FILTER)
        except Exception:
            self._current = name
            raise
        return None

    # -- one cycle --------------------------------------------------------------------

    def _cycle(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        *,
        mode: Mode,
        gate: Gate | None,
        fit_cache: FitCache | None,
        reserved: list[tuple[int, Allocation]],
        within: NodeTable | None = None,
    ) -> Outcome:
        key = placement_key(job)
        state.write(PLACEMENT_KEY, key)
        skipped: set[str] = set()
        refused = self._pre_filters(ctx, state, job, skipped)
        if refused is not None:
            return refused
        if gate is not None:
            blocked = gate(job)
            if blocked is not None:
                return Outcome(blocked, _GATE)

        if fit_cache is not None:
            cached = fit_cache.get(key)
            if cached is not None:
                return Outcome(cached, _FILTER)
        real = ctx.nodes
        if within is not None:
            ctx.nodes = within  # Filter and Score see the window; restored below
            ctx.present_nodes = real
        try:
            status, rows, request = self._find_nodes(
                ctx, state, job, key, skipped, post_filter=mode is Mode.NOW and within is None
            )
            if rows is None or request is None:
                if JOB_BOUND in state:
                    # this job's own (its user's): blocks the partition as a shortage
                    # does, and is shared with no other job (as a placement failure)
                    return Outcome(status, Stage.PLACEMENT)
                # (a failure under a node cap holds for this job only: the cap is its own)
                if fit_cache is not None and MAX_NODES not in state:
                    fit_cache[key] = status
                return Outcome(status, Stage.FILTER)
            try:
                rows = self._select(ctx, state, job, request, rows)
            except _Rejected as rejected:
                return Outcome(rejected.status, rejected.stage)
            allocation = self._allocation(ctx, request, rows)
        finally:
            ctx.nodes = real
            ctx.present_nodes = None
        if mode is _TEST_ONLY:
            return Outcome(SUCCESS, _DONE, allocation, ctx.now)

        for i, res in enumerate(self.profile.reserve):
            self._current = res.name
            st = res.reserve(ctx, state, job, allocation)
            reserved.append((i, allocation))
            if st is not SUCCESS and st.is_rejection:  # (the usual answer: no property call)
                self._unreserve(ctx, state, job, reserved)
                return Outcome(st.with_plugin(res.name), Stage.RESERVE)
        for permit in self.profile.permit:
            self._current = permit.name
            st = permit.permit(ctx, state, job, allocation)
            if st.is_rejection:
                self._unreserve(ctx, state, job, reserved)
                return Outcome(st.with_plugin(permit.name), Stage.PERMIT)
        self._current = ""
        ctx.nodes.take(allocation, exclusive=job.spec.exclusive)
        return Outcome(SUCCESS, _DONE, allocation, ctx.now)

    def _unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, reserved: list[tuple[int, Allocation]]
    ) -> None:
        plugins = self.profile.reserve
        # Reverse order, like a stack of undo actions; each unreserve runs even if an
        # earlier one raised, so no plugin is left counting a job that did not start.
        for i, allocation in reversed(reserved):
            try:
                plugins[i].unreserve(ctx, state, job, allocation)
            except Exception:  # noqa: S112 - unreserve must not fail; keep undoing
                continue
        reserved.clear()

    # -- Filter -----------------------------------------------------------------------

    def _find_nodes(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        key: PlacementKey,
        skipped: set[str],
        *,
        post_filter: bool = False,
    ) -> tuple[Status, IndexArray | None, NodeRequest | None]:
        """The feasible rows for the largest node count in ``nodes_min..nodes_max`` (at
        most ``MAX_NODES``; the smallest for a job without -N, ``fewest_nodes``) that
        fits (all-or-nothing), or the reason none does.
        ``post_filter``: on a shortage, let the PostFilter plugins try (the main pass
        only)."""
        spec = job.spec
        counts = node_counts(spec, ctx.nodes)
        lo, hi = counts.start, counts.stop - 1
        if hi > lo:
            cap = state.get(MAX_NODES)
            if cap is not None:
                hi = max(min(hi, cap), lo)
        filters = self._filters_for(skipped)
        failed = _NO_NODES
        requests = ctx.data.get(REQUESTS)
        if requests is None:
            requests = {}
            ctx.data.write(REQUESTS, requests)
        sizes = range(lo, hi + 1) if spec.fewest_nodes else range(hi, lo - 1, -1)
        for retry in (False, True):
            # Most jobs have nodes_min == nodes_max; a range (-N 2-4) is tried from the
            # top because Slurm gives a job as many nodes as it asked for when it can,
            # a job without -N from the bottom (enough nodes for its tasks).
            for n in sizes:
                request = requests.get((key, n))
                if request is None:
                    request = requests[(key, n)] = NodeRequest.for_job(spec, n)
                feasible, fail = self._filter(ctx, state, job, request, filters)
                if fail is None:
                    # (the method, not np.flatnonzero: two Python wrappers less per job)
                    return SUCCESS, feasible.nonzero()[0], request
                failed = fail
            if retry or not post_filter or not self.profile.post_filter:
                break
            # PostFilter's what-if: built only here, off the path of jobs that fit
            fits: Callable[[NodeTable], bool] = partial(
                self._fits_on, ctx, state, job, key, sizes, filters
            )
            state.write(FITS, fits)
            made_room, failed = self._post_filter(ctx, state, job, failed)
            if not made_room:
                break
        return failed, None, None

    def _fits_on(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        key: PlacementKey,
        sizes: range,
        filters: FilterCalls,
        table: NodeTable,
    ) -> bool:
        """Would Filter pass on ``table`` for some node count of ``sizes``?"""
        what_if = ctx.fork(now=ctx.now, nodes=table, running=ctx.running)
        requests = ctx.data.get(REQUESTS) or {}
        for n in sizes:
            request = requests.get((key, n)) or NodeRequest.for_job(job.spec, n)
            if self._filter(what_if, state, job, request, filters)[1] is None:
                return True
        return False

    def _filters_for(self, skipped: set[str]) -> FilterCalls:
        """The Filter plugins to call when the PreFilter plugins in ``skipped`` answered
        SKIP (their Filter is not called), kept per set: a handful of sets per profile."""
        if not skipped:
            return self._filter_calls
        key = frozenset(skipped)
        found = self._filters_skipping.get(key)
        if found is None:
            found = tuple((n, call) for n, call in self._filter_calls if n not in key)
            self._filters_skipping[key] = found
        return found

    def _post_filter(
        self, ctx: PassContext, state: CycleState, job: Job, failed: Status
    ) -> tuple[bool, Status]:
        """Run the PostFilter plugins: (one made room, the verdict to keep)."""
        for post in self.profile.post_filter:
            self._current = post.name
            st = post.post_filter(ctx, state, job, failed)
            if st.is_success:
                self._current = ""
                return True, failed
            if st.is_rejection and (
                st.code is not Code.UNSCHEDULABLE or st.reason is PendingReason.RESOURCES
            ):
                failed = st.with_plugin(post.name)
        self._current = ""
        return False, failed

    def _filter(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        filters: FilterCalls,
    ) -> tuple[BoolArray, Status | None]:
        n = request.n_nodes
        mask: BoolArray | None = None
        name = ""
        try:
            for name, filter_call in filters:
                result = filter_call(ctx, state, job, request)
                mask = result.feasible if mask is None else mask & result.feasible
                if np.count_nonzero(mask) < n:
                    return mask, Status(_UNSCHEDULABLE, result.reason, result.message, name)
        except Exception:
            self._current = name  # (named only when it raises: see ``_pre_filters``)
            raise
        if mask is None:  # a profile without filters: every node will do
            mask = np.ones(len(ctx.nodes), dtype=np.bool_)
        required = job.spec.nodelist
        if required and not mask[ctx.nodes.names_mask(required)].all():
            # --nodelist: every named node must be in the allocation, and one is busy.
            names = ",".join(required)
            return mask, unschedulable(PendingReason.RESOURCES, f"nodes {names} are busy")
        return mask, None

    # -- Score and select -------------------------------------------------------------

    def _select(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> IndexArray:
        n = request.n_nodes
        if not job.spec.nodelist:
            forced: IndexArray | None = None
            candidates = feasible
            need = n
        else:
            named = ctx.nodes.names_mask(job.spec.nodelist)[feasible]
            forced, candidates = feasible[named], feasible[~named]
            need = n - len(forced)
            if need <= 0:
                return forced
        no_forced = forced is None or not len(forced)
        as_set = self.profile.placement_generate is not None and need >= 2 and no_forced
        if len(candidates) == need and not as_set:
            return _with_forced(forced, candidates)
        total = self._score(ctx, state, job, request, candidates)
        if as_set:
            chosen_set = self._place_set(ctx, state, job, candidates, total, need)
            if chosen_set is not None:
                return np.sort(chosen_set)
        if need == 1:
            # argmax returns the first maximum, i.e. the lowest row among ties.
            k = int(total.argmax()) if total is not None else 0
            picked: IndexArray = candidates[k : k + 1]
            if forced is None:
                return picked
        elif total is None:
            picked = candidates[:need]
        else:
            picked = candidates[(-total).argsort(kind="stable")[:need]]
        return _with_forced(forced, picked)

    def _place_set(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        candidates: IndexArray,
        total: FloatArray | None,
        need: int,
    ) -> IndexArray | None:
        """PlacementGenerate (and PlacementScore): the node set, None for "no opinion",
        or ``_Rejected`` at Stage.PLACEMENT."""
        generator = self.profile.placement_generate
        assert generator is not None
        ranked = candidates if total is None else candidates[np.argsort(-total, kind="stable")]
        self._current = generator.name
        found = generator.generate(ctx, state, job, ranked, need)
        if isinstance(found, Status):
            if found.code is Code.SKIP:
                self._current = ""
                return None
            if found.is_success:
                raise ValueError("generate returned SUCCESS; return node sets instead")
            raise _Rejected(found.with_plugin(generator.name), Stage.PLACEMENT)
        if not found:
            self._current = ""
            return None
        allowed = np.zeros(len(ctx.nodes), dtype=np.bool_)
        allowed[candidates] = True
        for rows in found:
            if len(rows) != need or not allowed[rows].all() or len(np.unique(rows)) != need:
                raise ValueError(f"generate returned a set that is not {need} feasible rows")
        best = found[0]
        if len(found) > 1 and self.profile.placement_score:
            top = -np.inf
            for rows in found:
                value = 0.0
                for scorer in self.profile.placement_score:
                    self._current = scorer.name
                    value += scorer.score_placement(ctx, state, job, rows)
                if value > top:
                    top, best = value, rows
        self._current = ""
        return np.asarray(best, dtype=np.intp)

    def _score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        candidates: IndexArray,
    ) -> FloatArray | None:
        # Only PreScore's SKIP drops a Score (PreFilter's drops that plugin's Filter):
        # a plugin may filter for some jobs and score for others (nvlink). A
        # ``WeightedScorer`` may say None instead, with no PreScore of its own.
        skipped: set[str] = set()
        for pre in self.profile.pre_score:
            self._current = pre.name
            st = pre.pre_score(ctx, state, job, candidates)
            if st is SUCCESS:  # (the usual answer: no property call, no enum look-up)
                continue
            if st.code is _SKIP:
                skipped.add(pre.name)
            elif st.is_rejection:
                raise _Rejected(st.with_plugin(pre.name), Stage.SCORE)
        self._current = ""
        total: FloatArray | None = None
        parts: dict[str, FloatArray] = {}  # for Reserve (``keys.NODE_SCORES``)
        name = ""
        try:
            for name, score, weight, normalize, weighted_scorer in self._scorers:
                if name in skipped:
                    continue
                scores = score(ctx, state, job, request, candidates)
                if scores is None:
                    if weighted_scorer:  # (a ``WeightedScorer`` with no opinion: SKIP)
                        continue
                    raise ValueError(f"Score plugin {name!r} returned None (not a WeightedScorer)")
                if normalize is not None:
                    scores = normalize(scores)
                if scores.shape != candidates.shape:
                    if scores.ndim:
                        raise ValueError(
                            f"Score plugin {name!r} returned {scores.shape[0]} values for "
                            f"{len(candidates)} nodes"
                        )
                    if not weighted_scorer:
                        raise ValueError(
                            f"Score plugin {name!r} returned a 0-d array for "
                            f"{len(candidates)} nodes (only a WeightedScorer may)"
                        )
                    # 0-d: the same score on every candidate (a ``WeightedScorer``'s,
                    # without a gather); added to each (broadcast), or made a vector
                    # when it comes first (argmax and argsort need one)
                    if total is None:
                        scores = np.full(candidates.shape, scores)
                # (``weight`` is None where no multiply is needed: see ``_scorer``)
                weighted = scores if weight is None else scores * weight
                parts[name] = weighted
                # (a new array: ``parts`` keeps each plugin's own; ``np.add``: the
                # same ufunc as ``+`` without the operator's checks for overrides)
                total = weighted if total is None else np.add(total, weighted)
        except Exception:
            self._current = name  # (named only when it raises: see ``_pre_filters``)
            raise
        state.write(NODE_SCORES, (candidates, parts))
        return total

    def _allocation(self, ctx: PassContext, request: NodeRequest, rows: IndexArray) -> Allocation:
        table = ctx.nodes
        names = table.names_of(rows)
        uniform = not request.exclusive and request.memory_bytes is not None
        if uniform:
            # The same on every node (the common case): one vector, shared.
            same = ResourceVector(request.cpus, request.memory_bytes or 0, request.gpus)
            per_node: tuple[ResourceVector, ...] = (same,) * len(names)
            gpus = request.gpus > 0
        else:
            per_node = tuple(request.on_node(table, int(r)) for r in rows)
            gpus = any(res.gpus for res in per_node)
        if gpus:
            gpu_ids = tuple(
                table.free_gpu_ids(int(r), res.gpus) for r, res in zip(rows, per_node, strict=True)
            )
            allocation = Allocation(names, per_node, gpu_ids)
        else:
            allocation = Allocation(names, per_node)
        if len(rows) >= _REMEMBER_FROM:  # taking it then needs no name look-ups
            table.remember(allocation, rows, uniform=uniform)
        return allocation

    # -- WILL_RUN ---------------------------------------------------------------------

    def _will_run(self, ctx: PassContext, job: Job) -> Outcome:
        return self._earliest(
            ctx, job.spec.begin_time, lambda at: self.place(at, job, Mode.TEST_ONLY)
        )

    def will_run_group(
        self, ctx: PassContext, jobs: Sequence[Job]
    ) -> tuple[list[Outcome], int | None]:
        """WILL_RUN for the components of a het job: the earliest instant at which all
        of them fit together (``place_group`` in TEST_ONLY at each instant). Returns what
        ``place_group`` returned there, or at the last instant tried."""
        last: list[tuple[list[Outcome], int | None]] = []

        def attempt(at: PassContext) -> Outcome:
            outcomes, failed = self.place_group(at, jobs, Mode.TEST_ONLY)
            last[:] = [(outcomes, failed)]
            return outcomes[-1] if failed is None else outcomes[failed]

        begins = [j.spec.begin_time for j in jobs if j.spec.begin_time is not None]
        self._earliest(ctx, max(begins) if begins else None, attempt)
        return last[0]

    def _earliest(
        self, ctx: PassContext, begin: float | None, attempt: Callable[[PassContext], Outcome]
    ) -> Outcome:
        """Try ``attempt`` now, then at every instant a running job is expected to end
        (or the job may begin, or a reservation window ends), until it succeeds."""
        table = ctx.nodes.copy()
        ends: list[tuple[float, int, Job, Allocation]] = []
        for r in ctx.running:
            held, _ = holding(r)
            if held is None or r.time_limit_s <= 0:
                continue  # unlimited: never frees its nodes
            start = r.start_time if r.start_time is not None else ctx.now
            # A job past its limit is about to be killed: it frees its nodes "now", but
            # only after the first try at ``now`` so test-only is never optimistic.
            ends.append((max(start + r.time_limit_s, ctx.now), r.id, r, held))
        ends.sort(key=lambda e: (e[0], e[1]))
        times = {e[0] for e in ends}
        if begin is not None and begin > ctx.now:
            times.add(begin)
        # an advance reservation's window ends: its nodes are open to everyone again
        times.update(r.window_at(ctx.now)[1] for r in ctx.snapshot.reservations)
        instants = sorted(t for t in times if t >= ctx.now)

        # TEST_ONLY never writes the table, so one copy serves every instant.
        still_running = list(ctx.running)
        ended: set[int] = set()
        k = 0
        first = ctx.fork(now=ctx.now, nodes=table, running=ctx.running)
        outcome = attempt(first)
        if outcome.status.is_success or outcome.status.code is Code.UNRESOLVABLE:
            return outcome
        for t in instants:
            while k < len(ends) and ends[k][0] <= t:
                _, _, finished, allocation = ends[k]
                table.release(allocation, exclusive=holding(finished)[1])
                ended.add(finished.id)
                k += 1
            still_running = [r for r in still_running if r.id not in ended]
            forked = ctx.fork(now=t, nodes=table, running=tuple(still_running))
            outcome = attempt(forked)
            if outcome.status.is_success or outcome.status.code is Code.UNRESOLVABLE:
                return outcome
        return outcome


# (None only from a ``WeightedScorer``: no opinion on the job)
ScoreCall = Callable[[PassContext, CycleState, Job, NodeRequest, IndexArray], FloatArray | None]
# (name, the call, the weight to multiply by or None, the normalizer, whether the call is
# a ``WeightedScorer``'s: only that may say None or give a 0-d array)
Scorer = tuple[str, ScoreCall, float | None, Callable[[FloatArray], FloatArray] | None, bool]


def _scorer(plugin: ScorePlugin, weight: float) -> Scorer:
    """How ``_score`` calls ``plugin``: x * 1.0 == x exactly, so a weight of 1 needs no
    multiply (None), nor does a ``WeightedScorer``'s, which gives its scores weighted
    (and may say None: it has no opinion on the job; called at any weight for that).
    The protocols are checked on the plugin itself, not on a sampled pass's timing
    proxy (``timing.unwrapped``: on Python 3.12+ isinstance against a runtime Protocol
    does not see the proxy's methods); the calls go through the proxy."""
    inner = unwrapped(plugin)
    if isinstance(inner, ScoreNormalizer):
        normalize = cast(ScoreNormalizer, plugin).normalize_scores
        return (plugin.name, plugin.score, None if weight == 1 else weight, normalize, False)
    if isinstance(inner, WeightedScorer):
        call = cast(WeightedScorer, plugin).weighted_score
        return (plugin.name, partial(call, weight), None, None, True)
    return (plugin.name, plugin.score, None if weight == 1 else weight, None, False)


def _with_forced(forced: IndexArray | None, picked: IndexArray) -> IndexArray:
    """The rows, sorted: ``picked`` plus the ``--nodelist`` rows (``forced``)."""
    if forced is None:
        return np.sort(picked)
    return np.sort(np.concatenate((forced, picked)))


class _Rejected(Exception):
    """A Score- or Placement-stage rejection, carried out of ``_select``."""

    def __init__(self, status: Status, stage: Stage) -> None:
        super().__init__(status.message)
        self.status = status
        self.stage = stage
