"""``Scheduler``: one full pass over the pending queue, snapshot in, plan out.

The pass (``run_pass``) is five stages, wired in ``_run_pass`` in this order::

    1. context   a PassContext: the NodeTable with every running allocation taken out
    2. main loop the pending jobs in QueueSort order (ties by job id), each through
                 ``Framework.place(NOW)`` behind the queue gate (``main_loop.py``):
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
       may change what PreFilter reads, so it clears the verdicts). Het jobs and jobs
       naming several partitions are decided by their group placements
       (``grouping.py``) and recorded as any job is.
    3. backfill  when the profile has a Backfill plugin (``backfill.py``): the jobs
                 held back in stage 2 (``Priority`` from the gate, ``Resources`` from
                 Filter, short of counted resources) are planned on an availability
                 profile; those that fit in a hole now are placed through the same
                 cycle, the others may get a reservation whose start becomes the
                 ``PendingUpdate.expected_start``
    4. changes   a PendingUpdate for every waiting job whose reason or expected start
                 differs from what the store has, and rejection counts
    5. plan      placements, updates, terminations, preemptions (victims a PostFilter
                 plugin chose for a job that did not fit), and the jobs to forecast
                 (``forecast``)

Only *changed* reasons are sent (not all): at 50,000 pending jobs a full set of updates
every pass would be 50,000 row writes for nothing. A job whose cycle crashed (``ERROR``)
gets no update at all; its verdict is in ``PassResult.statuses``.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

from hal.core.job import Allocation, Job
from hal.core.partition_list import in_partition, partitions_of
from hal.core.states import PendingReason
from hal.scheduler.framework.backfill import SettledStage, run_backfill
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.grouping import Groupings
from hal.scheduler.framework.hetjob import HetGroups
from hal.scheduler.framework.keys import PLACEMENT_NOTES, PREEMPTIONS
from hal.scheduler.framework.main_loop import MainLoop
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.partition_choice import PartitionLists
from hal.scheduler.framework.planner import BackfillResult, Forecast
from hal.scheduler.framework.profile import Profile
from hal.scheduler.framework.runtime import Framework, Mode, WillRunResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Placement, Plan
from hal.scheduler.framework.status import Code, Status
from hal.scheduler.framework.timing import PluginTimes, timed_profile, unwrapped

_SUCCESS, _ERROR = Code.SUCCESS, Code.ERROR


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """How a pass decided in a forked process went (``hal.scheduler.forked``), measured:
    the parent's taking of the plugins' fork locks and its ``fork`` call (``fork_s``:
    its page tables copied, the interpreter held), the child's CPU until its result
    was sent (``cpu_s``), and the parent's unpickling of that result and taking in of
    what it carried back (``load_s``, the interpreter held)."""

    fork_s: float
    cpu_s: float
    load_s: float


@dataclass(frozen=True, slots=True)
class PassResult:
    """The plan plus why: every pending job's verdict and rejection counts per plugin
    and reason (what ``hal explain`` and the metrics read)."""

    plan: Plan
    # (empty for a pass decided in a forked process: the server reads only their count,
    # ``looked``, and they would cost the parent their unpickling)
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
    # Whether the main loop looked at every pending job (False: it stopped at a queue
    # depth or at its most starts; the jobs after the stop have no verdict here, but for
    # those waiting for their begin time or other jobs: ``MainLoop.notice_eligible``).
    complete: bool = True
    # The partitions whose jobs the main loop passed over at their most starts
    # (``max_starts``), in the order it first did: () when it stopped at none.
    capped: tuple[str, ...] = ()
    # Wall seconds of the pass's stages (``PASS_STAGES``), measured, not part of the
    # decision: where a long pass went (the server's slow-pass log and ``/v1/diag``).
    stages: Mapping[str, float] = field(default_factory=dict)
    # The pass was decided in a process of its own (``hal.scheduler.forked``): how that
    # went, measured; None: on the caller's thread.
    process: ProcessFacts | None = None
    # The pending jobs the pass looked at (``len(statuses)`` as it made them): every
    # one, or those up to its stop (ADR 0029).
    looked: int = 0


# The stages ``PassResult.stages`` times, in the pass's order: the node table with the
# running allocations taken out, the queue's sort, the main loop, the backfill stage
# (0 when it did not run), the waiting jobs' changes and the plan.
PASS_STAGES = ("context", "sort", "main", "backfill", "changes", "plan")


@dataclass(frozen=True, slots=True)
class BackfillCycle:
    """One run of the backfill stage: how long it took (measured, not part of the
    decision), the jobs handed to it (held back by the queue), the jobs it started and
    the reservations it made."""

    duration_s: float
    considered: int
    started: int
    reservations: int
    # of ``duration_s``: the wait to take what the plugin holds for the stage
    # (``BackfillPlugin`` ``planning``: the server's predictor, which its trainer holds
    # while it learns)
    lock_s: float = 0.0


class Scheduler:
    """Pure: no clock, no I/O. Same snapshot, same plan. Between calls it keeps only
    what no decision depends on: the framework's ledger of running jobs' rows (a cache,
    ``Framework.releases``) and the last pass's forecast work, until ``forecast``."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.framework = Framework(profile)
        # the last forecast, until ``forecast`` has planned all of it or a pass that
        # runs the backfill stage begins
        self._forecast: _KeptForecast | None = None

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        """One full pass over ``snapshot.pending``."""
        return self.run_pass(snapshot).plan

    def forecast(
        self, plan: Plan, *, go_on: Callable[[], bool] | None = None
    ) -> tuple[PendingUpdate, ...]:
        """The forecast starts of ``plan.forecasting`` (``squeue --start``: the waiting
        jobs EASY backfill left without a reservation, ADR 0018), as updates of the jobs
        whose start they change, with the reasons the latest pass gave them. They are
        planned on the profile the backfill stage left, after its decisions; () for a
        plan that is not the last pass's. The server asks after applying the plan: the
        forecast is not part of the decisions, and not worth delaying them for.

        ``go_on`` (None: no bound): asked after each job planned, in order (one at
        least); False keeps the rest: the next pass that does not run the backfill
        stage names them in its plan's ``forecasting`` and this goes on from there (ADR
        0029). The caller owns the clock: ``PacedScheduler`` stops after the backfill
        plugin's ``yield_interval_s`` (``forecast_slice_s``). Each job is planned once,
        on the profile of the pass that ran the stage."""
        kept, self._forecast = self._forecast, None
        if kept is None or (kept.revision, kept.jobs) != (plan.revision, plan.forecasting):
            return ()
        updates = kept.updates(go_on)
        if kept.forecast.left:
            self._forecast = kept
        return updates

    @property
    def backfill_interval_s(self) -> float | None:
        """bf_interval of the profile's Backfill plugin (None: no backfill). Callers that
        honour it pass ``backfill=False`` to passes run sooner than this after the last
        one that backfilled."""
        plugin = self.profile.backfill
        return None if plugin is None else plugin.interval_s

    def drop_forecast(self) -> None:
        """Forget the last forecast's work (a pass decided elsewhere goes on with it)."""
        self._forecast = None

    @property
    def forecast_left(self) -> bool:
        """Whether the last forecast has jobs left to plan (``forecast`` stopped by its
        ``go_on``)."""
        return self._forecast is not None

    @property
    def forecast_slice_s(self) -> float | None:
        """bf_yield_interval of the profile's Backfill plugin: how long callers that
        spread the forecast over cycles let ``forecast`` plan each time (its ``go_on``;
        None: no backfill, or 0: the whole forecast at once)."""
        plugin = self.profile.backfill
        return None if plugin is None or plugin.yield_interval_s <= 0 else plugin.yield_interval_s

    def run_pass(
        self,
        snapshot: ClusterSnapshot,
        *,
        nodes: NodeTable | None = None,
        backfill: bool = True,
        explain: bool = True,
        updates: bool = True,
        time_plugins: bool = False,
        depth: int | None = None,
        max_starts: int | None = None,
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
        decisions, slower, so callers sample it.

        ``depth`` (Slurm's default_queue_depth) and ``max_starts`` (sched_max_job_start)
        bound the main loop: it looks at the first ``depth`` jobs in queue order at
        most, and passes over a partition's jobs once it has placed ``max_starts`` of
        them. A pass that stopped so (``PassResult.complete`` False) decides nothing for
        the jobs after the stop or passed over (no verdict, no update: they keep the
        reason and expected start the store has; but one waiting for its begin time or
        for other jobs gets its PreFilter's verdict, ``None`` once eligible:
        ``MainLoop.notice_eligible``). A pass that stopped at ``depth`` runs no
        backfill stage (the held-back jobs keep their expected starts, as with
        ``backfill=False``): backfill plans the whole queue behind the jobs placed. A
        pass without ``depth`` that passed over jobs at ``max_starts`` runs it when
        ``backfill`` (backfill's turn, as Slurm's backfill is not held back by
        sched_max_job_start): the first jobs it passed over in each such partition
        (``MainLoop.run``'s ``hand_over``) are handed to it with the verdict
        ``Priority``; it starts none of a capped partition's jobs, alone or in a group
        placement (the plan applier would not: ``max_job_starts`` a partition a plan),
        but plans those that fit now to start now (the next pass starts them; their
        nodes are held from the later jobs), reserves and forecasts the others; the
        partitions' names are in ``PassResult.capped``. The jobs the main loop looked at
        are decided as a full pass decides them: the same placements, in the same order,
        up to the stop. None (the default): every job."""
        # a forecast not yet planned whole is carried into a pass that runs no backfill
        # stage (what it holds is that stage's pass's, whole snapshot included)
        carried, self._forecast = self._forecast, None
        framework = self.framework
        times: PluginTimes | None = None
        if time_plugins:
            times = {}
            # the running jobs' rows kept from pass to pass are the same timed or not: a
            # timed pass that wrote them all again (a fresh ledger) cost a backfill stage
            # thousands of rows more than the passes around it, on the live server the
            # longest pass (docs/benchmarks-scale.md)
            framework = Framework(timed_profile(self.profile, times), self.framework.releases)
        # Python's cyclic garbage collector is off during the pass: a pass allocates tens
        # of thousands of short-lived objects (verdicts, outcomes) and makes no reference
        # cycles, but every so many allocations the collector walks every live object,
        # the whole snapshot included (180 ms of a 50,000-job pass on 10,000 nodes).
        # Reference counting still frees everything at once. Left alone when the caller
        # already turned it off.
        bounds = (depth, max_starts)
        if not gc.isenabled():
            result = self._run_pass(
                framework, snapshot, nodes, backfill, explain, updates, bounds, carried
            )
        else:
            gc.disable()
            try:
                result = self._run_pass(
                    framework, snapshot, nodes, backfill, explain, updates, bounds, carried
                )
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
        bounds: tuple[int | None, int | None],
        carried: _KeptForecast | None,
    ) -> PassResult:
        # The pass, stage by stage; each reads what the ones before it left.
        # 1. The context: the node table with every running allocation taken out.
        clock = time.perf_counter
        marks = [clock()]
        ctx = PassContext.from_snapshot(snapshot, nodes)
        marks.append(clock())
        # 2. The main loop: each pending job in queue order, placed now (taken out of
        #    the table at once) or held back. Het jobs and jobs naming several partitions
        #    are decided by their group placements, made for this pass.
        depth, max_starts = bounds
        framework.new_pass(every_job=depth is None)
        loop = MainLoop(framework, ctx, Groupings((HetGroups(), PartitionLists())), explain=explain)
        #    A bounded pass (``depth``, ``max_starts``) may stop before the end; one that
        #    looks at every job but stops placing a partition's at its cap hands backfill
        #    the first jobs it passes over (backfill's turn).
        turn = backfill and depth is None and max_starts is not None
        queue = framework.sort(snapshot.pending)
        marks.append(clock())
        complete = loop.run(queue, depth=depth, max_starts=max_starts, hand_over=turn)
        marks.append(clock())
        # 3. Backfill: the held-back jobs planned over time; those that delay no
        #    reservation start now, the first blocked ones get reservations.
        backfill = backfill and (complete or turn)
        planned, cycle = self._backfill(framework, ctx, loop, backfill, explain)
        marks.append(clock())
        loop.placed.extend(planned.placements)
        loop.statuses.update(planned.statuses)
        forecast = planned.forecast if want_updates else None
        # 4. What changed for the waiting jobs (reasons, expected starts), and why jobs
        #    were not placed (rejection counts).
        updates, rejections = _changes(loop, planned, forecast, want_updates)
        marks.append(clock())
        # 5. The plan, and what ``forecast`` will need of this pass.
        #    Backfill lowered some jobs' limits (--time-min), a plugin said why it chose
        #    some jobs' nodes: each Placement is made once with both (not remade by
        #    dataclasses.replace, which reads every field: the dissonance plugin notes
        #    hundreds of jobs a pass).
        limits = planned.limits
        notes = ctx.data.get(PLACEMENT_NOTES)
        if limits or notes:
            limits, notes = limits or {}, notes or {}
            placements = [
                Placement(job.id, alloc, job.partition, limits.get(job.id), notes.get(job.id, ""))
                for job, alloc in loop.placed
            ]
        else:
            placements = [Placement(job.id, alloc, job.partition) for job, alloc in loop.placed]
        nominated = ctx.data.get(PREEMPTIONS)
        forecasting: tuple[int, ...] = ()
        if forecast is not None:
            forecasting = tuple(j.id for j in forecast.jobs)
        elif carried is not None and not backfill and want_updates:
            # the stage was not due (bf_interval) or the pass stopped at its depth: the last one's
            # forecast goes on where it stopped. A pass whose stage was due drops it,
            # even with nothing held back: a full pass's plan depends on its snapshot
            # alone (the same snapshot, the same plan).
            forecasting = tuple(j.id for j in carried.forecast.left)
        plan = Plan(
            revision=snapshot.revision,
            placements=tuple(placements),
            updates=updates,
            terminations=tuple(loop.terminations),
            preemptions=tuple(nominated.values()) if nominated else (),
            forecasting=forecasting,
        )
        if forecast is not None:
            self._forecast = _KeptForecast(plan, forecast, loop.statuses)
        elif forecasting and carried is not None:
            self._forecast = carried.carried_into(plan, loop.statuses)
        settled = planned.settled if not loop.terminations else None
        marks.append(clock())
        stages = {name: marks[i + 1] - marks[i] for i, name in enumerate(PASS_STAGES)}
        return PassResult(
            plan,
            loop.statuses,
            rejections,
            planned.reservations,
            cycle,
            settled=settled,
            complete=complete,
            capped=tuple(loop.capped),
            stages=stages,
            looked=len(loop.statuses),
        )

    @staticmethod
    def _backfill(
        framework: Framework, ctx: PassContext, loop: MainLoop, run: bool, explain: bool
    ) -> tuple[BackfillResult, BackfillCycle | None]:
        """Stage 3: the backfill stage over the main loop's held-back jobs, when the
        profile has a Backfill plugin and ``run`` (bf_interval has elapsed)."""
        plugin = framework.profile.backfill
        if plugin is None:
            return BackfillResult(), None
        if not run:
            # bf_interval has not elapsed: the jobs still held back keep the start times
            # the last backfill pass gave them (as in Slurm) instead of losing them until
            # the next one; jobs now waiting for their own reasons lose theirs.
            kept = {j.id: j.expected_start for j in loop.held if j.expected_start is not None}
            return BackfillResult(expected_start=kept), None
        if not loop.held:
            return BackfillResult(), None
        began = time.perf_counter()
        # (a shared predictor held for the stage; ``planning`` is optional, and called
        # on the plugin itself, not its timing proxy: its wait is ``lock_s``)
        planning = getattr(unwrapped(plugin), "planning", None)
        held = planning() if planning is not None else nullcontext()
        with held:
            lock_s = time.perf_counter() - began
            planned = run_backfill(
                framework,
                ctx,
                plugin,
                loop.held,
                loop.held_stages,
                loop.placed,
                loop.groupings,
                explain=explain,
                capped=frozenset(loop.capped),
            )
        cycle = BackfillCycle(
            time.perf_counter() - began,
            len(loop.held),
            len(planned.placements),
            len(planned.reservations),
            lock_s,
        )
        return planned, cycle

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


def _changes(
    loop: MainLoop, planned: BackfillResult, forecast: Forecast | None, want_updates: bool
) -> tuple[tuple[PendingUpdate, ...], dict[tuple[str, PendingReason], int]]:
    """Stage 4: a ``PendingUpdate`` for every waiting job whose reason or expected start
    differs from what the store has, and the rejection counts per (plugin, reason) of
    the jobs not placed. ``want_updates=False``: no updates, and only the terminations
    counted (no walk over the waiting jobs)."""
    statuses, expected = loop.statuses, planned.expected_start
    forecasting = frozenset(j.id for j in forecast.jobs) if forecast is not None else ()
    # (a plain dict: a Counter's ``+=`` goes through its subclass lookups, per job)
    rejections: dict[tuple[str, PendingReason], int] = {}
    updates: list[PendingUpdate] = []
    for job in loop.waiting if want_updates else ():
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
    for term in loop.terminations:
        st = statuses[term.job_id]
        key = (st.plugin, st.reason)
        rejections[key] = rejections.get(key, 0) + 1
    return tuple(updates), rejections


class _KeptForecast:
    """What ``Scheduler.forecast`` needs of the pass that planned ``plan``: the backfill
    stage's forecast and the reasons the pass gave the waiting jobs (with those of the
    later passes it was carried into over them); ``revision`` and ``jobs`` say which
    plan it belongs to."""

    __slots__ = ("forecast", "jobs", "revision", "statuses")

    def __init__(self, plan: Plan, forecast: Forecast, statuses: Mapping[int, Status]) -> None:
        self.revision, self.jobs = plan.revision, plan.forecasting
        self.forecast, self.statuses = forecast, statuses

    def carried_into(self, plan: Plan, statuses: Mapping[int, Status]) -> _KeptForecast:
        """This forecast, going on in the pass that planned ``plan`` (its verdicts
        ``statuses``, newer than those kept for the jobs it looked at). Only the verdicts
        of the jobs left to plan are kept: at most a forecast's, not a pass's each."""
        kept = self.statuses
        left = {
            job.id: statuses[job.id] if job.id in statuses else kept[job.id]
            for job in self.forecast.left
        }
        return _KeptForecast(plan, self.forecast, left)

    def updates(self, go_on: Callable[[], bool] | None) -> tuple[PendingUpdate, ...]:
        """The updates of the next jobs planned (all left, or as many as ``go_on``
        allows), skipping those a later pass placed."""
        starts = self.forecast.starts(go_on)
        statuses = self.statuses
        return tuple(
            PendingUpdate(job.id, statuses[job.id].reason, starts[job.id])
            for job in self.forecast.jobs
            if job.id in starts
            and starts[job.id] != job.expected_start
            and statuses[job.id].code is not _SUCCESS
        )
