"""The backfill stage: after the main loop, plan the jobs it held back on an
``AvailabilityProfile`` and start those that delay no reservation.

Called by ``Scheduler.run_pass`` when the profile has a Backfill plugin. In order:

    1. policies: ``plugin.policy_for(partition)`` for each partition with held-back jobs;
       a partition without a policy stays strictly in priority order
    2. the profile: the pass's table (running jobs and this pass's placements out), each
       job giving its nodes back at start + ``plugin.runtime(job)``
    3. for each held-back job, in priority order (EASY-SJBF: the partition heads first,
       then the others by shortest expected run time), up to ``max_job_test`` per
       partition:
       - try to start it now, on the least free over ``[now, now + runtime)``: it then
         fits in a hole and delays no reservation (``Framework.place(NOW, within=...)``,
         the same cycle as the main loop)
       - otherwise, if it is owed a reservation (EASY: the first one of its partition;
         conservative: every one), find the earliest row whose window fits (screened on
         resources for all rows at once, confirmed by the framework with TEST_ONLY) and
         subtract it from the profile; its start is the job's ``expected_start``. A job
         asking again (EASY's head, pass after pass) is first tried at its last start
         when no earlier row can have come free since (``start_bound.py``)

The moves on the profile (start now, reserve, hold, forecast) are the ``Planner``'s
(``planner.py``). Jobs a group placement claims (``grouping.py``) are handed to their
kind when they come up: a het job's components start now together or are reserved at
one start (``hetjob.py``); a job naming several partitions (``-p a,b``), handed over as
it waits in one of them, is tried as it would run in each that has a policy, starts in
the first where it fits and is reserved where it starts first (``partition_choice.py``).
Jobs of one partition and no group never reach that code.

Advance reservations (``snapshot.reservations``) enter in two ways: each window's
start and end within the horizon is a row of the profile, so a job kept off reserved
nodes is planned for right after the window; and while a future row is tried,
``PLAN_START`` in ``ctx.data`` holds its instant, so the ``reservation`` plugin's Filter
judges the job's run from then (not from ``ctx.now``).

Counted resources (a ``CountedResourcePlugin``'s counters, e.g. licenses) are planned
over time too (Slurm's ``bf_licenses``), in a ``CountsOverTime`` per plugin built when
the stage first plans a job holding some: the running jobs' counters come back at their
planned ends (rows of the profile), and each job started now or reserved holds its
counters until its planned end. While a job is tried, ``PLAN_END`` (and ``PLAN_START``
for a future row) and ``COUNTS_OVER_TIME`` in ``ctx.data`` let the plugin's PreFilter
judge its whole run: a job started now takes no counter a reservation made before it
needs, and a reservation starts where the counters are back (the plugin's verdict says
from when, ``earliest_start``, and the search goes on from there). Stages planning no
job holding counters build none.

A job with ``--time-min`` (``JobSpec.time_min_s``, Slurm's TimeMin) that cannot start
now for its planned run is tried again with its time limit lowered: the longest whole
minute from its time-min up whose run ends before every reservation start it would
meet (the instants where a window from now loses free resources: the profile's dips)
and every advance reservation boundary, longest first. A fit starts with that limit
(``BackfillResult.limits``; the plan's ``Placement.time_limit_s``), which the job then
keeps. Jobs without one take exactly the path they took before. A job naming several
partitions is shortened the same way in each.

Jobs are never started late because of this: a start that fits now is always taken
(the same or an earlier reservation would be made otherwise). Predicted run times only
shape the plan; jobs are killed at their own time limit, never at the prediction.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hal.core.job import Allocation, Job
from hal.scheduler.framework.availability import round_up
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.grouping import Groupings
from hal.scheduler.framework.interfaces import BackfillMode, BackfillPlugin, BackfillPolicy
from hal.scheduler.framework.planner import (
    SHORTENABLE,
    BackfillResult,
    Forecast,
    Planner,
    held_for,
)
from hal.scheduler.framework.request import PlacementKey, placement_key
from hal.scheduler.framework.runtime import Framework, Mode, Stage


def run_backfill(
    framework: Framework,
    ctx: PassContext,
    plugin: BackfillPlugin,
    held: Sequence[Job],
    held_stages: Sequence[Stage],
    placed_now: Sequence[tuple[Job, Allocation]],
    groupings: Groupings,
    *,
    explain: bool = True,
    capped: frozenset[str] = frozenset(),
) -> BackfillResult:
    """Plan ``held`` (the jobs the main loop held back, in priority order; each stopped
    at the stage in ``held_stages``: the gate, or Filter) on ``ctx``, whose table already
    has ``placed_now`` (this pass's placements) taken out.

    ``explain=False`` leaves out the reservations that cannot change a placement (those
    owed after the last job that could still start): same placements, fewer expected
    starts. See ``Planner`` for how reservations are deferred.

    ``groupings``: the pass's group placements; those that held jobs back in the main
    loop (``Groupings.held``) hand them over first (``GroupPlacement.hand_over``), and
    each job one of them claims is planned by it.

    ``capped``: the partitions whose starts this pass reached its cap (backfill's turn in
    a pass that stopped there): none of their jobs starts, alone, in a job naming
    several partitions or in a het job; one that fits now is held from now instead
    (``Planner.capped``: its expected start now, its nodes kept from the later jobs),
    whole (the next pass's main loop starts it with its own limit, not shortened); the
    others are reserved or forecast as usual."""
    policies: dict[str, BackfillPolicy | None] = {}
    for job in held:
        if job.partition not in policies:
            policies[job.partition] = plugin.policy_for(job.partition)
    grouped = groupings.held()  # (none, in most passes: no step per held job then)
    for kind in grouped:
        held = kind.hand_over(plugin, ctx, policies, held)
    jobs = [j for j in held if policies[j.partition] is not None]
    if not jobs:
        return BackfillResult()
    plugin.prepare([*ctx.running, *jobs])
    planner = Planner(framework, ctx, plugin, policies, placed_now, groupings, jobs, capped)
    planner.protect(jobs)
    failed_now = _failed_now(held, held_stages, ctx.now)
    tested: dict[str, int] = {}
    kind_of = groupings.of if grouped else None
    # This loop runs for every held-back job of every pass (hundreds on a busy cluster):
    # the CPU screen (``free_now``) and ``defer`` are written out inline, their tables in
    # locals; the decisions are theirs.
    now = ctx.now
    min_cpus = planner.min_cpus
    by_spec = planner.min_cpus_by_spec
    free_now = planner.free_now
    deferred = planner.deferred
    reservations = planner.reservations
    conservative = BackfillMode.CONSERVATIVE
    ordered = _order(jobs, policies, planner)
    # (not in a turn: a job held from now changes the profile without a placement, so
    # ``_Settled``'s key, which changes with the stage's placements, would go stale)
    settled = None if capped else _Settled.of(planner, ordered, bool(grouped))
    i, n = 0, len(ordered)
    while i < n:
        screened = False  # next_candidate screens CPUs over the window as start_now would
        if settled is not None and settled.now_settled():
            screened = True
            i = settled.next_candidate(i)  # the jobs before it would change nothing
            if i >= n:
                break
        job = ordered[i]
        i += 1
        partition = job.partition
        policy = policies[partition]
        if policy is None:
            continue
        if policy.max_job_test:
            count = tested.get(partition, 0)
            if count >= policy.max_job_test:
                continue
            tested[partition] = count + 1
        if kind_of is not None:
            grouped_by = kind_of(job)
            if grouped_by is not None:  # its group placement starts it now or defers it
                grouped_by.backfill(planner, job, failed_now)
                continue
        spec = job.spec
        owed = policy.mode is conservative or not reservations.get(partition, 0)
        needs = by_spec.get(id(spec))
        if needs is None:
            needs = min_cpus(job)
        if needs > free_now(partition):
            # cannot start now: only its reservation (if owed) matters
            if owed:
                deferred.append(job)
            continue
        runtime = planner.hold_for(job)
        key = placement_key(job)
        if now + runtime >= failed_now.get(key, math.inf):
            if spec.time_min_s and planner.start_shortened(job, runtime):
                continue
            if owed:
                deferred.append(job)
            continue
        planner.flush()  # earlier reservations first: they constrain this job
        stage = planner.start_now(job, runtime, screened=screened)
        if stage is Stage.DONE:
            continue
        if stage is Stage.FILTER:  # only a resource failure carries over to the key
            failed_now[key] = min(failed_now.get(key, math.inf), now + runtime)
        if spec.time_min_s and stage in SHORTENABLE and planner.start_shortened(job, runtime):
            continue
        planner.defer(job)
    return _result(planner, ordered, settled, explain=explain)


def _failed_now(
    held: Sequence[Job], held_stages: Sequence[Stage], now: float
) -> dict[PlacementKey, float]:
    """Placement key → the earliest end time at which starting now failed. Free resources
    only shrink during the stage and a longer window only has less free, so a job with
    the same key and a window ending no earlier fails too (the fit-cache rule of the
    main pass, extended over time). Jobs that failed Filter in the main pass start with
    "fails at any end": the window never has more free than the table had then."""
    failed_now: dict[PlacementKey, float] = {}
    filter_stage = Stage.FILTER  # (an enum lookup per held job otherwise: 80 ns each)
    for job, st in zip(held, held_stages, strict=True):
        if st is filter_stage:
            failed_now[placement_key(job)] = now
    return failed_now


def _result(
    planner: Planner, ordered: list[Job], settled: _Settled | None, *, explain: bool
) -> BackfillResult:
    """The stage's result, with what comes after the pass: explaining, the jobs to
    forecast (``Forecast``); else, when the stage settled and the pass started nothing,
    the ``SettledStage`` a later pass may skip by. (Either is set on a copy: the planner
    keeps its own result, which must not point back at it, or the pair would wait for
    the cyclic collector, off during passes.)"""
    if explain:
        planner.flush()
        wanted = planner.to_forecast(planner.jobs)
        if wanted:
            return dataclasses.replace(planner.result, forecast=Forecast(planner, wanted))
    elif (
        settled is not None
        and not planner.placed_now
        and not planner.result.placements
        and planner.over_time is None  # (a later pass's verdicts would depend on them)
    ):
        left = SettledStage(planner, ordered[0], settled.partition)
        return dataclasses.replace(planner.result, settled=left)
    return planner.result


def _least_hold(job: Job, hold: float) -> float:
    """The shortest a job planned to hold its nodes for ``hold`` may be started for:
    its ``--time-min`` when that is shorter (a lower bound for the CPU screens)."""
    time_min = job.spec.time_min_s
    return float(time_min) if time_min and time_min < hold else hold


def _order(
    jobs: list[Job], policies: dict[str, BackfillPolicy | None], planner: Planner
) -> list[Job]:
    if not any(p is not None and p.shortest_first for p in policies.values()):
        return jobs
    heads: list[Job] = []
    rest: list[tuple[float, int, Job]] = []
    seen: set[str] = set()
    for pos, job in enumerate(jobs):
        if job.partition not in seen:
            seen.add(job.partition)
            heads.append(job)
            continue
        policy = policies[job.partition]
        key = planner.runtime(job) if policy is not None and policy.shortest_first else 0.0
        rest.append((key, pos, job))
    rest.sort(key=lambda e: (e[0], e[1]))
    return heads + [job for _, _, job in rest]


# (jobs started and reservations made in the stage when screened, positions of the
# jobs whose CPUs are free now, their CPUs, the window's step function: dip instants
# and free CPUs per step; or, with ``decided``, the positions of the candidates only)
@dataclass(slots=True)
class _Candidates:
    changes: tuple[int, int]
    positions: list[int]
    wanted: list[int]
    dips: list[float]
    values: list[int]
    decided: bool


class _Settled:
    """Skips the held-back jobs that would change nothing, once an EASY stage has
    settled: one partition, its reservation made, nothing deferred, every job tested
    (no ``max_job_test``), no job of a group placement. A job is then owed no
    reservation, so one that cannot start now leaves no trace: the stage's loop changes
    something only for a job whose CPUs fit both now (``free_now``) and all through the
    window it would run in (``free_cpus_from_now``). ``next_candidate`` finds the next
    such job with one array comparison over the rest and the step function of the
    window's free CPUs, asking the run times of the jobs the loop itself would ask
    (those with their CPUs free now, in order; a pinned predictor remembers what it was
    asked), and the loop takes it from there with every check of its own. When the
    plugin's run times do not depend on what was asked (``fixed_runtimes``: the
    requested time), they are read for every job at once and the window's comparison is
    made for all of them together.
    """

    __slots__ = (
        "_asked_holds",
        "_candidates",
        "_holds",
        "_needs",
        "_ordered",
        "_planner",
        "partition",
    )

    def __init__(self, planner: Planner, ordered: list[Job], partition: str) -> None:
        self._planner = planner
        self._ordered = ordered
        self.partition = partition
        self._needs: npt.NDArray[np.int64] | None = None  # min_cpus of each, when asked
        # ``hold_for`` of each, when the run times are fixed (asked once)
        self._holds: npt.NDArray[np.float64] | None = None
        self._asked_holds = False
        self._candidates: _Candidates | None = None  # ``_screen``'s, until a job starts

    @classmethod
    def of(cls, planner: Planner, ordered: list[Job], grouped: bool) -> _Settled | None:
        """None unless the stage can settle so: ``grouped``, some held job is a group
        placement's (a het job's component, one naming several partitions)."""
        policies = planner.policies
        if len(policies) != 1 or grouped or not ordered:
            return None
        ((partition, policy),) = policies.items()
        if policy is None or policy.mode is BackfillMode.CONSERVATIVE or policy.max_job_test:
            return None
        return cls(planner, ordered, partition)

    def now_settled(self) -> bool:
        planner = self._planner
        return (
            not planner.deferred
            and bool(planner.reservations.get(self.partition, 0))
            and planner.has_profile
        )

    def next_candidate(self, first: int) -> int:
        """The position, from ``first`` on, of the next job the loop must look at
        (``len(ordered)``: none)."""
        planner = self._planner
        ordered = self._ordered
        found = self._candidates
        changes = (len(planner.result.placements), planner.reservations.get(self.partition, 0))
        if found is None or found.changes != changes:
            # (only a start or a reservation changes the free CPUs or the profile)
            found = self._candidates = self._screen(first, changes)
        positions = found.positions
        at = bisect.bisect_left(positions, first)
        if found.decided:
            return positions[at] if at < len(positions) else len(ordered)
        wanted, dips, values = found.wanted, found.dips, found.values
        lowest = values[-1]  # a window covering every dip
        now = planner.ctx.now
        hold_for = planner.hold_for
        for i in range(at, len(positions)):
            need = wanted[i]
            if need <= lowest:
                return positions[i]
            # (a run time is asked only where the window's end decides, in order)
            job = ordered[positions[i]]
            hold = hold_for(job)
            if job.spec.time_min_s:
                hold = _least_hold(job, hold)  # it may start shortened
            if need <= values[bisect.bisect_left(dips, now + hold)]:
                return positions[i]
        return len(ordered)

    def _screen(self, first: int, changes: tuple[int, int]) -> _Candidates:
        """The jobs from ``first`` on whose CPUs are free now, with the window's free
        CPUs as a step function of its end: both hold until a job starts (the stage is
        settled: only a start changes the free CPUs or the profile)."""
        planner = self._planner
        partition = self.partition
        needs = self._needs
        if needs is None:
            by_spec = planner.min_cpus_by_spec  # (min_cpus's cache, read inline: per job and pass)
            min_cpus = planner.min_cpus
            needs = self._needs = np.array(
                [by_spec.get(id(j.spec)) or min_cpus(j) for j in self._ordered], dtype=np.int64
            )
        rest = needs[first:]
        fits_now = np.flatnonzero(rest <= planner.free_now(partition))
        mask = planner.ctx.nodes.partition_mask(partition)
        dips, values = planner.profile.free_cpus_steps(mask, partition)
        holds = self._fixed_holds()
        if holds is None:
            return _Candidates(
                changes, (fits_now + first).tolist(), rest[fits_now].tolist(), dips, values, False
            )
        # the loop's test for every job at once: its CPUs free all through its window
        wanted = rest[fits_now]
        at = fits_now + first
        ends = planner.ctx.now + holds[at]
        # (the free CPUs only fall as a window covers more dips: values[-1] is the least)
        window = np.asarray(values, dtype=np.int64)[np.searchsorted(dips, ends, side="left")]
        return _Candidates(changes, at[wanted <= window].tolist(), [], [], [], True)

    def _fixed_holds(self) -> npt.NDArray[np.float64] | None:
        """``hold_for`` of every job, when the plugin's run times are fixed; else None."""
        if self._asked_holds:
            return self._holds
        self._asked_holds = True
        planner = self._planner
        runtimes = planner.plugin.fixed_runtimes(self._ordered)
        if runtimes is not None and self.partition in planner.protected:
            runtimes = np.array(
                [held_for(j, r, True) for j, r in zip(self._ordered, runtimes, strict=True)],
                dtype=np.float64,
            )
        if runtimes is not None:
            mins = [j.spec.time_min_s for j in self._ordered]
            if any(mins):  # a job with --time-min may start shortened: screen that run
                runtimes = np.minimum(runtimes, [m or math.inf for m in mins])
        self._holds = runtimes
        return self._holds


class SettledStage:
    """What a one-partition EASY stage leaves when the pass started nothing: its head
    (the first held-back job) and the profile with the head's reservation. A later pass
    in which nothing but new jobs changed (no job started or ended since, no planned end
    moved, and no plugin's verdict depends on the clock: the caller's to know) decides
    the old jobs as this one did: the head gets the same reservation, and a window of an
    old job's run holds no more free than it did then (no event lies between). Such a
    pass starts something only if a new job starts, and ``could_start`` asks each new
    job what that pass would ask: its CPUs free now, then through its run's window on
    this profile, then the framework's TEST_ONLY cycle on that window. The simulator
    skips the pass when no new job could start."""

    __slots__ = ("_head", "_partition", "_planner")

    def __init__(self, planner: Planner, head: Job, partition: str) -> None:
        self._planner = planner
        self._head = head
        self._partition = partition

    def outlasts(self, ends: Sequence[float]) -> bool:
        """Whether running jobs whose planned ends moved later, to ``ends`` (expired
        predictions, corrected; nothing else changed), leave this stage's verdicts as
        they were: True when each new end still comes no later than the head's
        reserved start. Without reservations of others, free resources only grow
        over time, so every start the head could have before its reservation still
        fails and its reservation's window is untouched: the same start on the same
        nodes. A window of any other job's run holds no more free than before (a
        release moved later), so nothing that failed starts now; and this profile,
        which releases those jobs sooner, stays the optimistic one ``could_start``
        may keep using."""
        start = self._head_start(self._planner.ctx)
        if start is None:
            return False
        profile = self._planner.profile
        step = max(profile.resolution, 1.0)
        return all(round_up(end + step, profile.resolution) <= start for end in ends)

    def _head_start(self, ctx: PassContext) -> float | None:
        """The head's reserved start on this stage's profile (made now if the pass left
        it deferred); None when there is none or it cannot be relied on for a pass on
        ``ctx``: a planning horizon, or advance reservations."""
        planner = self._planner
        planner.flush()
        found = planner.result.reservations.get(self._head.id)
        if found is None or planner.profile.horizon < math.inf or ctx.snapshot.reservations:
            return None
        return found[0]

    def could_start(self, ctx: PassContext, new: Sequence[Job]) -> bool:
        """Whether the pass on ``ctx`` could start one of ``new``, the jobs submitted
        since this stage's pass (True also when this state cannot tell). Asks the run
        times that pass would ask."""
        planner = self._planner
        head = self._head
        if self._head_start(ctx) is None:
            return True
        profile = planner.profile
        now = ctx.now
        step = max(profile.resolution, 1.0)  # an end sooner than this is planned at it
        # the next event must stay where it is when the profile starts at ``now``
        if len(profile) > 1 and profile.times[1] < round_up(now + step, profile.resolution):
            return True
        partition = self._partition
        policy = planner.policies[partition]
        assert policy is not None
        sort_key = planner.framework.profile.queue_sort.sort_key
        head_key = (sort_key(head), head.id)
        planner.plugin.prepare(new)
        free = planner.free_now(partition)
        mask = ctx.nodes.partition_mask(partition)
        kind_of = planner.groupings.of
        for job in new:
            spec = job.spec
            if (
                job.partition != partition
                or spec.reservation != head.spec.reservation
                or spec.time_min_s  # it may start shortened: let the pass decide
                or kind_of(job) is not None  # a group placement's (another partition, ...)
                or (sort_key(job), job.id) < head_key
            ):
                return True  # not simply behind the head: let the pass decide
            if policy.shortest_first:
                planner.runtime(job)  # the stage orders every held job by it
            needs = planner.min_cpus(job)
            if needs > free:
                continue
            end = now + planner.hold_for(job)
            if needs > profile.free_cpus_from_now(end, mask, partition):
                continue
            out = planner.framework.place(ctx, job, Mode.TEST_ONLY, within=profile.window(0, end))
            if out.status.is_success:
                return True
        return False
