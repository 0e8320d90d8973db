"""``Scheduler``: one full pass over the pending queue, snapshot in, plan out.

The pass (``run_pass``), in the order it happens::

    1. build a PassContext: the NodeTable with every running allocation taken out
    2. QueueSort the pending jobs (ties by job id)
    3. for each job, ``Framework.place(NOW)`` with the queue gate:
       - PreFilter rejects (hold, dependency, limits, throttle) → that reason; the job
         does not hold back anyone behind it
       - its queue (partition, or partition and advance reservation: ``Queue``)
         already blocked → ``Priority``
       - Filter finds too few nodes for reason ``Resources`` → ``Resources``, and the
         queue is blocked for every later (lower-priority) job in it (the same for
         a Placement-stage ``Resources``: no node set meets a required topology)
       - short of a counted resource (a CountedResource plugin's PreFilter, e.g.
         ``Licenses``) → that reason; with backfill, the job goes to it (for a
         reservation from when its counters are back) and every later job asking one
         of the same counters is left to backfill too (the plugin's reason, from the
         gate), which starts it only if it delays no reservation (see
         ``interfaces.CountedResourcePlugin``: Slurm's bf_licenses)
       - otherwise it is placed; its allocation is taken out of the table at once
       The same verdicts, for less: a job behind a blocked partition runs PreFilter
       alone (``Framework.pre_filter``: its own reason, else ``Priority``), and an
       array element whose group (``request.element_group``) has a verdict since the
       last placement takes it without a cycle (Slurm decides an array's pending
       elements as one record; a failed placement changes nothing, a successful one
       may change what PreFilter reads, so it clears the verdicts)
    4. the plan: placements, terminations, preemptions (victims a PostFilter plugin
       chose for a job that did not fit), and a PendingUpdate for every pending job
       whose reason (or expected start) differs from what the store has (after step 5)

Only *changed* reasons are sent (not all): at 50,000 pending jobs a full set of updates
every pass would be 50,000 row writes for nothing. A job whose cycle crashed (``ERROR``)
gets no update at all; its verdict is in ``PassResult.statuses``.

    5. backfill, when the profile has a Backfill plugin (``framework/backfill.py``): the
       jobs held back in step 3 (``Priority`` from the gate, ``Resources`` from Filter)
       are planned on an availability profile; those that fit in a hole now are placed
       through the same cycle, the others may get a reservation whose start becomes the
       ``PendingUpdate.expected_start``

An update is sent when a job's reason or expected start differs from the store's.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hal.core.job import Allocation, Job
from hal.core.partition_list import in_partition, partitions_of
from hal.core.states import PendingReason
from hal.scheduler.framework.backfill import Forecast, SettledStage, run_backfill
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.hetjob import decide_group, pending_het_groups
from hal.scheduler.framework.interfaces import CountedResourcePlugin
from hal.scheduler.framework.keys import PREEMPTIONS
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.partition_choice import place_in_partitions
from hal.scheduler.framework.profile import Profile
from hal.scheduler.framework.request import ElementGroup, element_group, placement_key
from hal.scheduler.framework.runtime import (
    FitCache,
    Framework,
    Mode,
    Stage,
    WillRunResult,
)
from hal.scheduler.framework.snapshot import (
    ClusterSnapshot,
    PendingUpdate,
    Placement,
    Plan,
    Termination,
)
from hal.scheduler.framework.status import Code, Status, unschedulable
from hal.scheduler.framework.timing import PluginTimes, timed_profile

QUEUE = "queue"  # Status.plugin for verdicts the pass itself gives (Priority)
# Stages whose ``Resources`` verdict is a shortage of nodes: the job blocks its partition
# and backfill may reserve for it (Placement: no node set meets a required topology).
_SHORTAGE = (Stage.FILTER, Stage.PLACEMENT)
# Stages a cycle reaches only after Reserve ran (DONE: also a crash anywhere).
_COMMITTING = (Stage.RESERVE, Stage.PERMIT, Stage.DONE)
# Enum members as plain constants for the per-job loop: ``Stage.GATE`` is a lookup
# through the enum class (about 80 ns on Python 3.11), a dozen of them per job.
_GATE, _PRE_FILTER, _FILTER, _DONE = Stage.GATE, Stage.PRE_FILTER, Stage.FILTER, Stage.DONE
_NOW = Mode.NOW
# (a Status only as a marker, compared by identity: no verdict kept for the group)
_UNKNOWN = Status(Code.ERROR, message="no verdict kept")
_SUCCESS, _UNSCHEDULABLE, _ERROR = Code.SUCCESS, Code.UNSCHEDULABLE, Code.ERROR
_RESOURCES = PendingReason.RESOURCES
# The queue a job waits in: its partition, and the advance reservation it runs in (None
# for most). A reservation's jobs run only on its nodes, which no other job may use
# meanwhile, so they neither wait behind the partition's blocked head nor block it.
Queue = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class PassResult:
    """The plan plus why: every pending job's verdict and rejection counts per plugin
    and reason (what ``hal explain`` and the metrics read)."""

    plan: Plan
    statuses: Mapping[int, Status] = field(default_factory=dict)
    rejections: Mapping[tuple[str, PendingReason], int] = field(default_factory=dict)
    # Backfill's reservations: job id → (start, planned end, the nodes it would get).
    reservations: Mapping[int, tuple[float, float, Allocation]] = field(default_factory=dict)
    # The backfill stage of this pass (sdiag's backfill statistics); None: it did not run.
    backfill: BackfillCycle | None = None
    # Seconds per (plugin, extension point); None: the pass was not timed (timing.py).
    plugin_seconds: Mapping[tuple[str, str], float] | None = None
    # The backfill stage settled and nothing started: see ``backfill.SettledStage``.
    settled: SettledStage | None = None


@dataclass(frozen=True, slots=True)
class BackfillCycle:
    """One run of the backfill stage: how long it took (measured, not part of the
    decision), the jobs handed to it (held back by the queue), the jobs it started and
    the reservations it made."""

    duration_s: float
    considered: int
    started: int
    reservations: int


class Scheduler:
    """Pure: no clock, no I/O, no state between calls. Same snapshot, same plan."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.framework = Framework(profile)
        # the last pass's forecast, until ``forecast`` asks for it or the next pass begins
        self._forecast: _KeptForecast | None = None

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        """One full pass over ``snapshot.pending``."""
        return self.run_pass(snapshot).plan

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]:
        """The forecast starts of ``plan.forecasting`` (``squeue --start``: the waiting
        jobs EASY backfill left without a reservation, ADR 0018), as updates of the jobs
        whose start they change, with the reasons the pass gave them. They are planned
        on the profile the pass's backfill stage left, after its decisions, which the
        scheduler keeps until asked (once) or until the next pass begins; () for a plan
        that is not the last pass's. The server asks after applying the plan: the
        forecast is not part of the decisions, and not worth delaying them for."""
        kept, self._forecast = self._forecast, None
        if kept is None or (kept.revision, kept.jobs) != (plan.revision, plan.forecasting):
            return ()
        return kept.updates()

    @property
    def backfill_interval_s(self) -> float | None:
        """bf_interval of the profile's Backfill plugin (None: no backfill). Callers that
        honour it pass ``backfill=False`` to passes run sooner than this after the last
        one that backfilled."""
        plugin = self.profile.backfill
        return None if plugin is None else plugin.interval_s

    def run_pass(
        self,
        snapshot: ClusterSnapshot,
        *,
        nodes: NodeTable | None = None,
        backfill: bool = True,
        explain: bool = True,
        updates: bool = True,
        time_plugins: bool = False,
    ) -> PassResult:
        """One pass. ``nodes``: the snapshot's table, kept up to date by the caller (see
        ``PassContext.from_snapshot``); it is consumed. ``backfill=False`` skips the
        backfill stage (bf_interval not yet elapsed); held-back jobs then keep the
        expected start the last backfill pass gave them.

        ``explain=False`` (the simulator) decides the same placements but does not work
        out the own reason of a job behind a blocked partition: it is held back without
        its PreFilter cycle and shows ``Priority`` unless backfill runs its cycle. The
        backfill stage runs the full cycle before placing or reserving any job, so
        nothing is started or reserved that PreFilter would refuse.

        ``updates=False`` (the simulator, which keeps no pending reasons) decides the
        same placements, terminations and reservations, but the plan carries no
        ``PendingUpdate`` (reason, expected start) and the rejection counts only the
        terminations: no walk over the waiting jobs after the pass.

        ``time_plugins=True`` runs the pass with every plugin call timed and returns the
        seconds per (plugin, extension point) in ``plugin_seconds`` (``timing.py``): same
        decisions, slower, so callers sample it."""
        self._forecast = None  # (what it holds is the last pass's, whole snapshot included)
        framework = self.framework
        times: PluginTimes | None = None
        if time_plugins:
            times = {}
            framework = Framework(timed_profile(self.profile, times))
        # Python's cyclic garbage collector is off during the pass: a pass allocates tens
        # of thousands of short-lived objects (verdicts, outcomes) and makes no reference
        # cycles, but every so many allocations the collector walks every live object,
        # the whole snapshot included (180 ms of a 50,000-job pass on 10,000 nodes).
        # Reference counting still frees everything at once. Left alone when the caller
        # already turned it off.
        if not gc.isenabled():
            result = self._run_pass(framework, snapshot, nodes, backfill, explain, updates)
        else:
            gc.disable()
            try:
                result = self._run_pass(framework, snapshot, nodes, backfill, explain, updates)
            finally:
                gc.enable()
        return result if times is None else dataclasses.replace(result, plugin_seconds=times)

    def _run_pass(
        self,
        framework: Framework,
        snapshot: ClusterSnapshot,
        nodes: NodeTable | None,
        backfill: bool,
        explain: bool,
        want_updates: bool,
    ) -> PassResult:
        ctx = PassContext.from_snapshot(snapshot, nodes)
        # queue → the verdict of every later job there (Priority, naming the blocker)
        blocked: dict[Queue, Status] = {}

        def gate(job: Job) -> Status | None:
            return blocked.get((job.partition, job.spec.reservation))

        plugin = framework.profile.backfill
        counted = framework.profile.counted
        # (CountedResource plugin, counter) → the first job handed to backfill that holds
        # it (None: no backfill or no such plugin; empty: the gate stays the plain one
        # above, so passes without counters handed over pay nothing)
        counters_ahead: dict[tuple[str, str], Job] | None = (
            {} if plugin is not None and counted else None
        )
        planned: dict[str, bool] = {}  # partition → has a backfill policy

        def backfilled(partition: str) -> bool:
            found = planned.get(partition)
            if found is None:
                assert plugin is not None
                found = planned[partition] = plugin.policy_for(partition) is not None
            return found

        def counted_gate(job: Job) -> Status | None:
            """``gate``, and: a job asking a counter that a job ahead of it waits for is
            left to backfill, which starts it only if it delays no reservation."""
            found = blocked.get((job.partition, job.spec.reservation))
            if found is not None:
                return found
            assert counters_ahead is not None
            for each in counted:
                asked = each.counts(job)
                if not asked or not backfilled(job.partition):
                    continue
                for name, _ in asked:
                    first = counters_ahead.get((each.name, name))
                    if first is not None:
                        return unschedulable(
                            each.reason,
                            f"{name}: job {first.id} ahead in the queue waits for it",
                            QUEUE,
                        )
            return None

        def hand_to_backfill(job: Job) -> None:
            """``job`` (holding counters) was handed to backfill: its counters now go to
            later jobs only through backfill (``counted_gate``)."""
            nonlocal gate
            if counters_ahead is None or not backfilled(job.partition):
                return
            for each in counted:
                for name, _ in each.counts(job):
                    counters_ahead.setdefault((each.name, name), job)
            gate = counted_gate

        fit_cache: FitCache = {}
        # array elements: the group's PreFilter verdict (None: passed) since the last
        # cycle that reached Reserve. A PostFilter plugin may change what PreFilter
        # reads, so profiles with one decide every element on its own.
        verdicts: dict[ElementGroup, Status | None] = {}
        grouping = not self.profile.post_filter
        placed: list[tuple[Job, Allocation]] = []
        waiting: list[Job] = []
        held: list[Job] = []  # held back by the queue, not by their own reasons
        held_stages: list[Stage] = []
        terminations: list[Termination] = []
        statuses: dict[int, Status] = {}
        listed = False  # a job naming several partitions was not placed

        # heterogeneous jobs: het job id → its pending components by offset; decided as
        # one unit when the first of them comes up (framework/hetjob.py). Gathered when
        # the first het job comes up: most queues have none.
        het_groups: dict[int, list[Job]] | None = None
        het_verdicts: dict[int, tuple[Status, Stage]] = {}

        for job in framework.sort(snapshot.pending):
            het = job.spec.het
            if het is not None:
                if job.id not in het_verdicts:
                    verdicts.clear()  # Reserve may have run (and been undone)
                    if het_groups is None:
                        het_groups = pending_het_groups(snapshot.pending)
                    members = het_groups[het.job_id]
                    het_verdicts.update(decide_group(framework, ctx, members, gate, placed))
                st, stage = het_verdicts[job.id]
                statuses[job.id] = st
                if st.code is _SUCCESS:
                    continue
                if self._not_placed(
                    job, st, stage, held, held_stages, blocked, terminations, waiting, counted
                ):
                    hand_to_backfill(job)
                continue
            if len(job.spec.partitions) > 1 and job.partition in job.spec.partitions:
                # -p a,b: tried in each partition (framework/partition_choice.py)
                verdicts.clear()  # Reserve may have run (and been undone)
                tried, job, short = place_in_partitions(framework, ctx, job, gate, fit_cache)
                st, stage = tried.status, tried.stage
                statuses[job.id] = st
                if st.code is _SUCCESS and tried.allocation is not None:
                    placed.append((job, tried.allocation))
                    continue
                listed = True  # backfill may get it: it tries it in each partition too
                for name in short:  # holds back each partition it waits in
                    self._block(blocked, job, name)
                if self._not_placed(
                    job, st, stage, held, held_stages, blocked, terminations, waiting, counted
                ):
                    hand_to_backfill(job)
                continue
            gated = blocked.get((job.partition, job.spec.reservation))  # gate(job)
            if gated is not None and not explain:
                statuses[job.id] = gated
                held.append(job)
                held_stages.append(_GATE)
                waiting.append(job)
                continue
            # (element_group is None for a job that is no array element: asked only then)
            group = element_group(job) if grouping and job.array_job_id is not None else None
            known = verdicts.get(group, _UNKNOWN) if group is not None else _UNKNOWN
            out = None
            if known is not _UNKNOWN:
                # an earlier element's verdict, still valid (nothing placed since)
                if known is not None:
                    st, stage = known, _PRE_FILTER
                elif gated is not None:
                    st, stage = gated, _GATE
                else:
                    failed = fit_cache.get(placement_key(job))
                    if failed is not None:
                        st, stage = failed, _FILTER
                    else:
                        out = framework.place(ctx, job, _NOW, gate=gate, fit_cache=fit_cache)
            elif gated is not None:
                # behind the queue whatever Filter says: only its own reason is wanted
                own = framework.pre_filter(ctx, job)
                if own is None:
                    if group is not None:
                        verdicts[group] = None
                    # held back by the queue (``_not_placed``'s gate case, inline)
                    statuses[job.id] = gated
                    held.append(job)
                    held_stages.append(_GATE)
                    waiting.append(job)
                    continue
                st, stage = own.status, own.stage
                if group is not None and stage is not _DONE:
                    verdicts[group] = st if stage is _PRE_FILTER else None
            else:
                out = framework.place(ctx, job, _NOW, gate=gate, fit_cache=fit_cache)
            if out is not None:
                st, stage = out.status, out.stage
                if stage in _COMMITTING:
                    verdicts.clear()  # Reserve ran: what PreFilter reads may have changed
                    if st.code is _SUCCESS and out.allocation is not None:
                        statuses[job.id] = st
                        placed.append((job, out.allocation))
                        continue
                elif group is not None:
                    verdicts[group] = st if stage is _PRE_FILTER else None
            statuses[job.id] = st
            if self._not_placed(
                job, st, stage, held, held_stages, blocked, terminations, waiting, counted
            ):
                hand_to_backfill(job)

        expected: dict[int, float] = {}
        reservations: dict[int, tuple[float, float, Allocation]] = {}
        limits: dict[int, int] = {}  # backfill lowered these jobs' limits (--time-min)
        forecast = None  # backfill's forecast, worked out after the pass (``forecast``)
        forecasting: frozenset[int] = frozenset()
        cycle = None
        settled = None
        if backfill and plugin is not None and held:
            began = time.perf_counter()
            bf = run_backfill(
                framework, ctx, plugin, held, held_stages, placed, explain=explain, listed=listed
            )
            cycle = BackfillCycle(
                time.perf_counter() - began, len(held), len(bf.placements), len(bf.reservations)
            )
            placed.extend(bf.placements)
            statuses.update(bf.statuses)
            expected = bf.expected_start
            reservations = bf.reservations
            limits = bf.limits
            forecast = bf.forecast
            if forecast is not None:
                forecasting = frozenset(j.id for j in forecast.jobs)
            if not terminations:
                settled = bf.settled
        elif not backfill and plugin is not None:
            # bf_interval has not elapsed: the jobs still held back keep the start times the
            # last backfill pass gave them (as in Slurm) instead of losing them until the
            # next one; jobs now waiting for their own reasons lose theirs.
            expected = {j.id: j.expected_start for j in held if j.expected_start is not None}

        # (a plain dict: a Counter's ``+=`` goes through its subclass lookups, per job)
        rejections: dict[tuple[str, PendingReason], int] = {}
        updates: list[PendingUpdate] = []
        for job in waiting if want_updates else ():
            st = statuses[job.id]
            code = st.code
            if code is _SUCCESS:
                continue  # backfilled
            key = (st.plugin, st.reason)
            rejections[key] = rejections.get(key, 0) + 1
            if code is _ERROR:
                continue
            start = expected.get(job.id, st.earliest_start)
            if start is None and job.id in forecasting:
                start = job.expected_start  # its last forecast stands until this one's
            if st.reason != job.reason or start != job.expected_start:
                updates.append(PendingUpdate(job.id, st.reason, start))
        placements = [Placement(job.id, alloc, job.partition) for job, alloc in placed]
        if limits:
            placements = [
                dataclasses.replace(p, time_limit_s=limits[p.job_id]) if p.job_id in limits else p
                for p in placements
            ]
        for term in terminations:
            st = statuses[term.job_id]
            key = (st.plugin, st.reason)
            rejections[key] = rejections.get(key, 0) + 1
        nominated = ctx.data.get(PREEMPTIONS)
        plan = Plan(
            revision=snapshot.revision,
            placements=tuple(placements),
            updates=tuple(updates),
            terminations=tuple(terminations),
            preemptions=tuple(nominated.values()) if nominated else (),
            forecasting=tuple(j.id for j in forecast.jobs) if forecast and want_updates else (),
        )
        if forecast is not None and want_updates:
            self._forecast = _KeptForecast(plan, forecast, waiting, statuses)
        return PassResult(plan, statuses, rejections, reservations, cycle, settled=settled)

    @staticmethod
    def _not_placed(
        job: Job,
        st: Status,
        stage: Stage,
        held: list[Job],
        held_stages: list[Stage],
        blocked: dict[Queue, Status],
        terminations: list[Termination],
        waiting: list[Job],
        counted: Sequence[CountedResourcePlugin],
    ) -> bool:
        """A job this pass did not place: ended (a terminal verdict) or waiting. A job
        the queue holds back (gate), short of nodes or short of a counted resource also
        goes to backfill; a shortage of nodes also blocks its queue for every later job.
        True when a job holding counters went to backfill for its own shortage (not the
        gate's): later jobs asking the same counters are then left to backfill too."""
        if st.terminal_state is not None:
            terminations.append(Termination(job.id, st.terminal_state, st.reason))
        else:
            waiting.append(job)
        if st.code is not _UNSCHEDULABLE:
            return False
        if stage is _PRE_FILTER:
            if not any(st.reason is each.reason for each in counted):
                return False
            held.append(job)  # its counters are planned over time: see ``run_backfill``
            held_stages.append(stage)
            return True
        if stage is _GATE or (stage in _SHORTAGE and st.reason is _RESOURCES):
            held.append(job)
            held_stages.append(stage)
            if stage is _GATE:
                return False
            Scheduler._block(blocked, job, job.partition)
            return any(each.counts(job) for each in counted)
        return False

    @staticmethod
    def _block(blocked: dict[Queue, Status], job: Job, partition: str) -> None:
        """``job`` is short of nodes in ``partition``: every later job of that queue
        waits behind it (the first such job names the reason)."""
        queue = (partition, job.spec.reservation)
        if queue not in blocked:
            blocked[queue] = unschedulable(
                PendingReason.PRIORITY,
                f"job {job.spec.het.display_id if job.spec.het else job.id} is ahead "
                f"in partition {partition}",
                QUEUE,
            )

    def will_run(self, snapshot: ClusterSnapshot, job: Job) -> WillRunResult | Status:
        """Earliest start and nodes for ``job`` (``sbatch --test-only``), or the Status
        saying why it cannot be placed at any foreseeable time (held, dependency,
        unresolvable, or blocked by jobs that never end)."""
        ctx = PassContext.from_snapshot(snapshot)
        found: WillRunResult | Status | None = None
        for name in partitions_of(job):  # -p a,b: where it would start first
            there = in_partition(job, ctx.partitions, name)
            out = self.framework.place(ctx, there, Mode.WILL_RUN)
            if out.status.is_success and out.allocation is not None and out.start_time is not None:
                if not isinstance(found, WillRunResult) or out.start_time < found.start_time:
                    found = WillRunResult(job.id, out.start_time, out.allocation, name)
            elif found is None:
                found = out.status
        assert found is not None  # partitions_of gives at least one
        return found

    def will_run_group(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job]
    ) -> list[WillRunResult] | Status:
        """Earliest common start and nodes of every component of a het job
        (``sbatch --test-only`` with components), or why it cannot start (the blocking
        component's Status)."""
        ctx = PassContext.from_snapshot(snapshot)
        outcomes, failed = self.framework.will_run_group(ctx, jobs)
        if failed is not None:
            return outcomes[failed].status
        results = []
        for job, out in zip(jobs, outcomes, strict=True):
            assert out.allocation is not None and out.start_time is not None
            results.append(WillRunResult(job.id, out.start_time, out.allocation))
        return results

    def test_only(self, snapshot: ClusterSnapshot, job: Job) -> Allocation | Status:
        """Would ``job`` start now on this snapshot (ignoring the other pending jobs)?"""
        ctx = PassContext.from_snapshot(snapshot)
        out = self.framework.place(ctx, job, Mode.TEST_ONLY)
        if out.status.is_success and out.allocation is not None:
            return out.allocation
        return out.status


class _KeptForecast:
    """What ``Scheduler.forecast`` needs of the pass that planned ``plan``: the backfill
    stage's forecast and the reasons the pass gave the waiting jobs; ``revision`` and
    ``jobs`` say which plan it belongs to."""

    __slots__ = ("forecast", "jobs", "revision", "statuses", "waiting")

    def __init__(
        self,
        plan: Plan,
        forecast: Forecast,
        waiting: Sequence[Job],
        statuses: Mapping[int, Status],
    ) -> None:
        self.revision, self.jobs = plan.revision, plan.forecasting
        self.forecast, self.waiting, self.statuses = forecast, waiting, statuses

    def updates(self) -> tuple[PendingUpdate, ...]:
        starts = self.forecast.starts()
        return tuple(
            PendingUpdate(job.id, self.statuses[job.id].reason, starts[job.id])
            for job in self.waiting
            if job.id in starts and starts[job.id] != job.expected_start
        )
