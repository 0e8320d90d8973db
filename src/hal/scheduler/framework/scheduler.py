"""``Scheduler``: one full pass over the pending queue, snapshot in, plan out.

The pass (``run_pass``), in the order it happens::

    1. build a PassContext: the NodeTable with every running allocation taken out
    2. QueueSort the pending jobs (ties by job id)
    3. for each job, ``Framework.place(NOW)`` with the queue gate:
       - PreFilter rejects (hold, dependency, limits, throttle) → that reason; the job
         does not hold back anyone behind it
       - its partition already blocked → ``Priority``
       - Filter finds too few nodes for reason ``Resources`` → ``Resources``, and the
         partition is blocked for every later (lower-priority) job in it (the same for
         a Placement-stage ``Resources``: no node set meets a required topology)
       - otherwise it is placed; its allocation is taken out of the table at once
    4. the plan: placements, terminations, and a PendingUpdate for every pending job
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

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.backfill import run_backfill
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.profile import Profile
from hal.scheduler.framework.runtime import FitCache, Framework, Mode, Stage, WillRunResult
from hal.scheduler.framework.snapshot import (
    ClusterSnapshot,
    PendingUpdate,
    Placement,
    Plan,
    Termination,
)
from hal.scheduler.framework.status import Code, Status, unschedulable

QUEUE = "queue"  # Status.plugin for verdicts the pass itself gives (Priority)
# Stages whose ``Resources`` verdict is a shortage of nodes: the job blocks its partition
# and backfill may reserve for it (Placement: no node set meets a required topology).
_SHORTAGE = (Stage.FILTER, Stage.PLACEMENT)


@dataclass(frozen=True, slots=True)
class PassResult:
    """The plan plus why: every pending job's verdict and rejection counts per plugin
    and reason (what ``hal explain`` and the metrics read)."""

    plan: Plan
    statuses: Mapping[int, Status] = field(default_factory=dict)
    rejections: Mapping[tuple[str, PendingReason], int] = field(default_factory=dict)
    # Backfill's reservations: job id → (start, planned end, the nodes it would get).
    reservations: Mapping[int, tuple[float, float, Allocation]] = field(default_factory=dict)


class Scheduler:
    """Pure: no clock, no I/O, no state between calls. Same snapshot, same plan."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.framework = Framework(profile)

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        """One full pass over ``snapshot.pending``."""
        return self.run_pass(snapshot).plan

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
    ) -> PassResult:
        """One pass. ``nodes``: the snapshot's table, kept up to date by the caller (see
        ``PassContext.from_snapshot``); it is consumed. ``backfill=False`` skips the
        backfill stage (bf_interval not yet elapsed); held-back jobs then keep the
        expected start the last backfill pass gave them.

        ``explain=False`` (the simulator) decides the same placements but does not work
        out the own reason of a job behind a blocked partition: it is held back without
        its PreFilter cycle and shows ``Priority`` unless backfill runs its cycle. The
        backfill stage runs the full cycle before placing or reserving any job, so
        nothing is started or reserved that PreFilter would refuse."""
        ctx = PassContext.from_snapshot(snapshot, nodes)
        blocked: dict[str, int] = {}  # partition → the job that blocks it

        def gate(job: Job) -> Status | None:
            blocker = blocked.get(job.partition)
            if blocker is None:
                return None
            return unschedulable(
                PendingReason.PRIORITY,
                f"job {blocker} is ahead in partition {job.partition}",
                QUEUE,
            )

        fit_cache: FitCache = {}
        placed: list[tuple[Job, Allocation]] = []
        waiting: list[Job] = []
        held: list[Job] = []  # held back by the queue, not by their own reasons
        held_stages: list[Stage] = []
        terminations: list[Termination] = []
        statuses: dict[int, Status] = {}

        for job in self.framework.sort(snapshot.pending):
            if not explain and job.partition in blocked:
                gated = gate(job)
                assert gated is not None  # the partition is blocked
                statuses[job.id] = gated
                held.append(job)
                held_stages.append(Stage.GATE)
                waiting.append(job)
                continue
            out = self.framework.place(ctx, job, Mode.NOW, gate=gate, fit_cache=fit_cache)
            st = out.status
            statuses[job.id] = st
            if st.is_success and out.allocation is not None:
                placed.append((job, out.allocation))
                continue
            short = out.stage in _SHORTAGE and st.reason is PendingReason.RESOURCES
            if st.code is Code.UNSCHEDULABLE and (out.stage is Stage.GATE or short):
                held.append(job)
                held_stages.append(out.stage)
                if short and job.partition not in blocked:
                    blocked[job.partition] = job.id
            if st.terminal_state is not None:
                terminations.append(Termination(job.id, st.terminal_state, st.reason))
            else:
                waiting.append(job)

        expected: dict[int, float] = {}
        reservations: dict[int, tuple[float, float, Allocation]] = {}
        plugin = self.profile.backfill
        if backfill and plugin is not None and held:
            bf = run_backfill(
                self.framework, ctx, plugin, held, held_stages, placed, explain=explain
            )
            placed.extend(bf.placements)
            statuses.update(bf.statuses)
            expected = bf.expected_start
            reservations = bf.reservations
        elif not backfill and plugin is not None:
            # bf_interval has not elapsed: the jobs still held back keep the start times the
            # last backfill pass gave them (as in Slurm) instead of losing them until the
            # next one; jobs now waiting for their own reasons lose theirs.
            expected = {j.id: j.expected_start for j in held if j.expected_start is not None}

        rejections: Counter[tuple[str, PendingReason]] = Counter()
        updates: list[PendingUpdate] = []
        for job in waiting:
            st = statuses[job.id]
            if st.is_success:
                continue  # backfilled
            rejections[(st.plugin, st.reason)] += 1
            if st.code is Code.ERROR:
                continue
            start = expected.get(job.id)
            if st.reason != job.reason or start != job.expected_start:
                updates.append(PendingUpdate(job.id, st.reason, start))
        placements = [Placement(job.id, alloc) for job, alloc in placed]
        for term in terminations:
            st = statuses[term.job_id]
            rejections[(st.plugin, st.reason)] += 1
        plan = Plan(
            revision=snapshot.revision,
            placements=tuple(placements),
            updates=tuple(updates),
            terminations=tuple(terminations),
        )
        return PassResult(plan, statuses, dict(rejections), reservations)

    def will_run(self, snapshot: ClusterSnapshot, job: Job) -> WillRunResult | Status:
        """Earliest start and nodes for ``job`` (``sbatch --test-only``), or the Status
        saying why it cannot be placed at any foreseeable time (held, dependency,
        unresolvable, or blocked by jobs that never end)."""
        ctx = PassContext.from_snapshot(snapshot)
        out = self.framework.place(ctx, job, Mode.WILL_RUN)
        if out.status.is_success and out.allocation is not None and out.start_time is not None:
            return WillRunResult(job.id, out.start_time, out.allocation)
        return out.status

    def test_only(self, snapshot: ClusterSnapshot, job: Job) -> Allocation | Status:
        """Would ``job`` start now on this snapshot (ignoring the other pending jobs)?"""
        ctx = PassContext.from_snapshot(snapshot)
        out = self.framework.place(ctx, job, Mode.TEST_ONLY)
        if out.status.is_success and out.allocation is not None:
            return out.allocation
        return out.status
