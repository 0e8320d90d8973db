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

A job naming several partitions (``-p a,b``) comes as it waits in one of them (the
first where the main pass found it waiting for room) and is tried as it would run in
each that has a policy (``in_partition``), in the order listed: it starts now in the
first where it fits, and, when any of its partitions owes it a reservation, it is
reserved in the one where it starts first (``_Planner.start_listed``,
``reserve_listed``). With ``--time-min`` it is tried in each partition in turn whole,
then shortened (below), before the next partition: Slurm's backfill tries each (job,
partition) pair with its own time-min logic. Jobs of one partition never reach that code.

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
partitions is shortened the same way in each (``start_listed``).

Jobs are never started late because of this: a start that fits now is always taken
(the same or an earlier reservation would be made otherwise). Predicted run times only
shape the plan; jobs are killed at their own time limit, never at the prediction.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hal.core.job import Allocation, Job
from hal.core.partition_list import in_partition, partitions_of
from hal.core.suspension import suspended_seconds
from hal.scheduler.framework.availability import AvailabilityProfile, round_up
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.counted import CountsOverTime
from hal.scheduler.framework.interfaces import (
    BackfillMode,
    BackfillPlugin,
    BackfillPolicy,
    CountedResourcePlugin,
)
from hal.scheduler.framework.keys import COUNTS_OVER_TIME, PLAN_END, PLAN_START
from hal.scheduler.framework.request import NodeRequest, PlacementKey, placement_key
from hal.scheduler.framework.runtime import Framework, Mode, Outcome, Stage
from hal.scheduler.framework.status import Code, Status


@dataclass(slots=True)
class BackfillResult:
    """What the stage decided: jobs started now (in order), verdicts that changed, and
    planned start times of the jobs given a reservation."""

    placements: list[tuple[Job, Allocation]] = field(default_factory=list)
    statuses: dict[int, Status] = field(default_factory=dict)
    expected_start: dict[int, float] = field(default_factory=dict)
    # job id → (start, planned end, nodes) of each reservation made
    reservations: dict[int, tuple[float, float, Allocation]] = field(default_factory=dict)
    # set when the stage settled and the pass started nothing (``SettledStage``)
    settled: SettledStage | None = None
    # job id → the time limit it starts with, lowered within its ``--time-min``
    limits: dict[int, int] = field(default_factory=dict)
    # the jobs to forecast a start for after the pass (``Forecast``); None: nothing to
    # forecast (or not explaining)
    forecast: Forecast | None = None


class Forecast:
    """A stage's forecast, not yet worked out: ``jobs`` (``_Planner.to_forecast``: the
    waiting jobs of EASY partitions left without a start) and the planner whose
    profile, after the stage's decisions, ``starts`` plans them on (ADR 0018)."""

    __slots__ = ("_planner", "jobs")

    def __init__(self, planner: _Planner, jobs: Sequence[Job]) -> None:
        self._planner = planner
        self.jobs = tuple(jobs)

    def starts(self) -> dict[int, float | None]:
        """Job id → its forecast start (None: none within the window). Once: it uses the
        profile up."""
        return self._planner.forecast(self.jobs)


def _held_for(job: Job, runtime: float, protected: bool) -> float:
    """How long a job is planned to hold its nodes: its planned run time, or its time
    limit while its partition is protected (``protect_after_s``)."""
    if protected and job.time_limit_s > 0:
        return float(job.time_limit_s)
    return runtime


def _least_hold(job: Job, hold: float) -> float:
    """The shortest a job planned to hold its nodes for ``hold`` may be started for:
    its ``--time-min`` when that is shorter (a lower bound for the CPU screens)."""
    time_min = job.spec.time_min_s
    return float(time_min) if time_min and time_min < hold else hold


def _min_cpus(job: Job) -> int:
    """The fewest CPUs the job can run on in total (a cheap lower bound)."""
    spec = job.spec
    lo = max(spec.nodes_min, len(spec.nodelist), 1)
    if spec.ntasks_per_node is not None:
        return lo * spec.cpus_per_node(lo)
    return max(spec.ntasks * spec.cpus_per_task, lo * spec.cpus_per_task)


def run_backfill(
    framework: Framework,
    ctx: PassContext,
    plugin: BackfillPlugin,
    held: Sequence[Job],
    held_stages: Sequence[Stage],
    placed_now: Sequence[tuple[Job, Allocation]],
    *,
    explain: bool = True,
    listed: bool | None = None,
) -> BackfillResult:
    """Plan ``held`` (the jobs the main loop held back, in priority order; each stopped
    at the stage in ``held_stages``: the gate, or Filter) on ``ctx``, whose table already
    has ``placed_now`` (this pass's placements) taken out.

    ``explain=False`` leaves out the reservations that cannot change a placement (those
    owed after the last job that could still start): same placements, fewer expected
    starts. See ``_Planner`` for how reservations are deferred.

    ``listed``: whether some job of ``held`` names several partitions (``-p a,b``); None
    looks. The main pass knows, and a look costs a step per held job and pass (hundreds
    of thousands of steps over a busy simulation, for jobs that hardly ever name two)."""
    if listed is None:
        listed = any(len(j.spec.partitions) > 1 for j in held)
    policies: dict[str, BackfillPolicy | None] = {}
    for job in held:
        if job.partition not in policies:
            policies[job.partition] = plugin.policy_for(job.partition)
    if listed:
        held = _plan_listed(plugin, ctx, policies, held)
    jobs = [j for j in held if policies[j.partition] is not None]
    if not jobs:
        return BackfillResult()
    plugin.prepare([*ctx.running, *jobs])
    planner = _Planner(framework, ctx, plugin, policies, placed_now)
    planner.listed = listed
    planner.protect(jobs)
    # placement key → the earliest end time at which starting now failed. Free resources
    # only shrink during the stage and a longer window only has less free, so a job with
    # the same key and a window ending no earlier fails too (the fit-cache rule of the
    # main pass, extended over time). Jobs that failed Filter in the main pass start
    # with "fails at any end": the window never has more free than the table had then.
    failed_now: dict[PlacementKey, float] = {}
    filter_stage = Stage.FILTER  # (an enum lookup per held job otherwise: 80 ns each)
    for job, st in zip(held, held_stages, strict=True):
        if st is filter_stage:
            failed_now[placement_key(job)] = ctx.now
    tested: dict[str, int] = {}
    het_held = _het_groups(jobs)
    het_seen: set[int] = set()
    # This loop runs for every held-back job of every pass (hundreds on a busy cluster):
    # the CPU screen (``free_now``) and ``defer`` are written out inline, their tables in
    # locals; the decisions are theirs.
    now = ctx.now
    min_cpus = planner.min_cpus
    by_spec = planner._min_cpus
    free_now = planner.free_now
    deferred = planner.deferred
    reservations = planner.reservations
    conservative = BackfillMode.CONSERVATIVE
    ordered = _order(jobs, policies, planner)
    settled = _Settled.of(planner, ordered, het_held)
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
        spec = job.spec
        if spec.het is not None:  # the whole het job, as one unit, when its first comes up
            het = spec.het
            if het.job_id in het_seen:
                continue
            het_seen.add(het.job_id)
            members = het_held.get(het.job_id, ())
            if len(members) != het.size:
                continue  # a component waits for its own reason: the group cannot start
            planner.flush()
            if not planner.start_group_now(members):
                planner.defer_group(members)
            continue
        if listed and len(spec.partitions) > 1 and partition in spec.partitions:
            # -p a,b: tried in each of its partitions (``start_listed``)
            if not planner.start_listed(job, failed_now):
                planner.defer_listed(job)
            continue
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
        if spec.time_min_s and stage in _SHORTENABLE and planner.start_shortened(job, runtime):
            continue
        planner.defer(job)
    if explain:
        planner.flush()
        wanted = planner.to_forecast(jobs)
        if wanted:  # (a copy, as below: the planner's own result must not point back at it)
            return dataclasses.replace(
                planner.result,
                forecast=Forecast(planner, wanted),
            )
    elif (
        settled is not None
        and not placed_now
        and not planner.result.placements
        and planner.over_time is None  # (a later pass's verdicts would depend on them)
    ):
        # (a copy: the planner keeps its own result, which must not point back at it, or
        # the pair would wait for the cyclic collector, off during passes)
        left = SettledStage(planner, ordered[0], settled.partition)
        return dataclasses.replace(planner.result, settled=left)
    return planner.result


# Where a start-now try stopped for a lack of something a shorter run may leave free:
# CPUs (the screen: None), nodes (Filter, e.g. an advance reservation's), counters
# (PreFilter)
_SHORTENABLE = (None, Stage.FILTER, Stage.PRE_FILTER)
_MINUTE = 60  # time limits lowered within --time-min are whole minutes, as Slurm's


class _Planner:
    """The profile and the reservations of one backfill stage.

    Reservations are *deferred*: a job that cannot start now is queued, and its
    reservation (if it is owed one) is made only when a later job might start now, just
    before that job is tried, or at the end when explaining. The profile is thus changed
    in exactly the order of the eager algorithm, so placements are the same; a pass whose
    held-back jobs cannot start anyway builds no profile at all (a full machine, the
    common case in a busy simulation). The profile itself is built on first use.
    """

    def __init__(
        self,
        framework: Framework,
        ctx: PassContext,
        plugin: BackfillPlugin,
        policies: dict[str, BackfillPolicy | None],
        placed_now: Sequence[tuple[Job, Allocation]],
    ) -> None:
        self.framework = framework
        self.ctx = ctx
        self.plugin = plugin
        self.policies = policies
        self.placed_now = placed_now
        self.result = BackfillResult()
        self.reservations: dict[str, int] = {}  # partition → reservations made
        self.deferred: list[Job | tuple[Job, ...]] = []  # tuples: het jobs
        self._profile: AvailabilityProfile | None = None
        # counted resources held over time, by plugin: built when a job holding some
        # is first tried
        self.counted = framework.profile.counted
        self.over_time: dict[str, CountsOverTime] | None = None
        self._runtimes: dict[int, float] = {}
        self._free: dict[str, int] = {}  # partition → free CPUs now (cleared on a start)
        self._min_cpus: dict[int, int] = {}  # id(spec) → ``_min_cpus`` (specs are shared)
        # some job names several partitions (``run_backfill``'s ``listed``)
        self.listed = False
        # (job id, partition) → ``runtime`` of a job naming several, as it runs there
        self._listed_runtimes: dict[tuple[int, str], float] = {}
        # partitions whose first held-back job has waited past ``protect_after_s``
        self.protected: set[str] = set()

    def runtime(self, job: Job) -> float:
        found = self._runtimes.get(job.id)
        if found is None:
            found = self._runtimes[job.id] = self.plugin.runtime(job)
        return found

    def hold_for(self, job: Job) -> float:
        """How long ``job``, started now, is planned to hold its nodes: its planned run
        time, or its time limit while its partition is protected (the planned run time
        is asked either way, as a pinned predictor remembers what it was asked)."""
        return _held_for(job, self.runtime(job), job.partition in self.protected)

    def protect(self, held: Sequence[Job]) -> None:
        """Marks the partitions whose first held-back job has waited ``protect_after_s``."""
        now = self.ctx.now
        seen: set[str] = set()
        for job in held:
            if job.partition in seen:
                continue
            seen.add(job.partition)
            policy = self.policies.get(job.partition)
            waited = now - job.eligible_since(now)
            if policy is not None and 0 < policy.protect_after_s <= waited:
                self.protected.add(job.partition)
            if len(seen) == len(self.policies):
                break  # every partition's first job seen (not one step per held job)

    @property
    def has_profile(self) -> bool:
        return self._profile is not None

    @property
    def profile(self) -> AvailabilityProfile:
        if self._profile is None:
            self._profile = self._build()
        return self._profile

    def _build(self) -> AvailabilityProfile:
        used = [p for p in self.policies.values() if p is not None]
        resolution = min(p.resolution_s for p in used)
        window = 0.0 if any(p.window_s <= 0 for p in used) else max(p.window_s for p in used)
        now = self.ctx.now
        table = self.ctx.nodes
        horizon = now + window if window > 0 else math.inf
        # the running jobs' rows come from the framework's ledger (written once per job);
        # only their planned ends are asked again
        ledger = self.framework.releases
        ends: list[float] = []
        firsts: list[int] = []
        counts: list[int] = []
        exclusive: list[bool] = []
        seen: set[int] = set()
        runtime = self.plugin.runtime
        held_slot = ledger.held_slot
        for r in self.ctx.running:
            found = held_slot(table, r)  # where what the table took out for it is
            if found is None:
                continue
            first, count, excl = found
            start = r.start_time if r.start_time is not None else now
            if r.extra:
                # time suspended is not run time: its agent moves the deadline by as much
                start += suspended_seconds(r, now)
            ends.append(start + runtime(r, now - start))
            firsts.append(first)
            counts.append(count)
            exclusive.append(excl)
            seen.add(r.id)
        for j, alloc in self.placed_now:
            ends.append(now + self.runtime(j))
            first, count = ledger.slot(table, j.id, alloc)
            firsts.append(first)
            counts.append(count)
            exclusive.append(j.spec.exclusive)
            seen.add(j.id)
        gathered = ledger.gather(now, ends, firsts, counts, exclusive, resolution, horizon)
        ledger.keep_only(seen)
        profile = AvailabilityProfile(
            table,
            now,
            (),
            resolution=resolution,
            horizon=horizon,
            gathered=gathered,
            memo=ledger.start_rows,
        )
        profile.add_instants(_reservation_instants(self.ctx, horizon))
        return profile

    def plan_counts(self, *jobs: Job) -> None:
        """When one of ``jobs`` holds counters, builds the ``CountsOverTime`` of each
        counted resource (once) and hands them to the plugins: the running jobs' and
        this pass's starts' counters, each held until its planned end as the profile
        has it (rounded up, for ever past the horizon); the instants they come back are
        made rows of the profile (they already are: the same jobs' ends)."""
        counted = self.counted
        if not counted or self.over_time is not None:
            return  # (the common case first: it is asked for every job the stage tries)
        if not any(c.counts(j) for j in jobs for c in counted):
            return
        profile = self.profile
        ctx = self.ctx
        now = ctx.now
        over_time = self.over_time = {c.name: CountsOverTime() for c in counted}
        runtime = self.plugin.runtime
        for r in ctx.running:
            held = [(c.name, n) for c in counted if (n := c.counts(r))]
            if held and r.state.is_active:
                # (the planned end as ``_build`` computes it)
                start = r.start_time if r.start_time is not None else now
                if r.extra:
                    start += suspended_seconds(r, now)
                end = _planned_end(profile, start + runtime(r, now - start))
                for name, counts in held:
                    over_time[name].hold(counts, now, end)
        for j, _ in self.placed_now:
            held = [(c.name, n) for c in counted if (n := c.counts(j))]
            if held:
                end = _planned_end(profile, now + self.runtime(j))
                for name, counts in held:
                    over_time[name].hold(counts, now, end)
        profile.add_instants(t for each in over_time.values() for t in each.instants())
        ctx.data.write(COUNTS_OVER_TIME, over_time)

    def min_cpus(self, job: Job) -> int:
        found = self._min_cpus.get(id(job.spec))
        if found is None:
            found = self._min_cpus[id(job.spec)] = _min_cpus(job)
        return found

    def free_now(self, partition: str) -> int:
        """CPUs free on the partition's nodes right now: a job needing more cannot start
        now (the profile's windows never hold more than the table does now)."""
        free = self._free.get(partition)
        if free is None:
            table = self.ctx.nodes
            mask = table.partition_mask(partition)
            free = self._free[partition] = int(table.free_cpus[mask].sum())
        return free

    def defer(self, job: Job) -> None:
        policy = self.policies[job.partition]
        if policy is not None and (
            policy.mode is BackfillMode.CONSERVATIVE or not self.reservations.get(job.partition, 0)
        ):
            self.deferred.append(job)

    def defer_group(self, members: tuple[Job, ...]) -> None:
        """A het job that cannot start now: reserved as one unit when owed."""
        partition = members[0].partition
        policy = self.policies[partition]
        if policy is not None and (
            policy.mode is BackfillMode.CONSERVATIVE or not self.reservations.get(partition, 0)
        ):
            self.deferred.append(members)

    def start_group_now(self, members: tuple[Job, ...]) -> bool:
        """Start every component of a het job now, in holes that delay no reservation,
        or none of them."""
        runtime = max(self.runtime(j) for j in members)
        ctx = self.ctx
        end = ctx.now + runtime
        self.plan_counts(*members)
        ctx.data.write(PLAN_END, end)
        outcomes, failed = self.framework.place_group(
            ctx, members, Mode.NOW, within=self.profile.window(0, end)
        )
        ctx.data.delete(PLAN_END)
        if failed is not None:
            return False
        for job, out in zip(members, outcomes, strict=True):
            assert out.allocation is not None
            rows = ctx.nodes.rows_of(out.allocation)
            self.profile.reserve(ctx.now, end, rows, job.spec.exclusive)
            _hold_counts(self.counted, ctx, self.profile, job, ctx.now, end)
            self.result.placements.append((job, out.allocation))
            self.result.statuses[job.id] = out.status
        self._free.clear()
        return True

    def flush(self) -> None:
        for item in self.deferred:
            if isinstance(item, tuple):
                head = item[0].partition
                self.plan_counts(*item)
                if _reserve_group(self.framework, self.ctx, self.profile, item, self):
                    self.reservations[head] = self.reservations.get(head, 0) + 1
                continue
            job = item
            if (
                self.listed
                and len(job.spec.partitions) > 1
                and job.partition in job.spec.partitions
            ):
                if self.owed_listed(job):
                    self.reserve_listed(job)
                continue
            policy = self.policies[job.partition]
            owed = policy is not None and (
                policy.mode is BackfillMode.CONSERVATIVE
                or not self.reservations.get(job.partition, 0)
            )
            if not owed:
                continue
            self.plan_counts(job)
            found = _reserve(
                self.framework, self.ctx, self.profile, job, self.runtime(job), self.result
            )
            if found is not None:
                self.reservations[job.partition] = self.reservations.get(job.partition, 0) + 1
        self.deferred.clear()

    def start_shortened(self, job: Job, hold: float, into: BackfillResult | None = None) -> bool:
        """``--time-min``: start ``job``, which cannot start now to hold its nodes for
        ``hold``, with the longest time limit from its time-min up (whole minutes) that
        fits now without delaying a reservation; True when it started. Its placement,
        verdicts and limit go to ``into`` (absent: the stage's result). A window from
        now loses free resources only where a reservation starts (the profile's dips),
        and an advance reservation's plugin judges the run at its window's boundaries:
        the limit is tried ending at each such instant before ``now + hold``, latest
        first, then at the time-min itself. (``failed_now`` is not asked: a Filter
        verdict of the full run, e.g. nodes kept for a maintenance window it would
        meet, may not hold for a shorter one.)"""
        time_min = job.spec.time_min_s
        if not time_min or time_min >= hold:
            return False  # (a run planned shorter than its time-min gains nothing)
        ctx = self.ctx
        now = ctx.now
        last = now + hold
        self.flush()  # earlier reservations first: they constrain this job
        self.plan_counts(job)
        profile = self.profile
        instants = {*profile.dip_instants, *_reservation_instants(ctx, profile.horizon)}
        ends = sorted((t for t in instants if now + time_min < t < last), reverse=True)
        tried: set[int] = set()
        needs = self.min_cpus(job)
        result = self.result if into is None else into
        for end in [*ends, now + time_min]:
            limit = max(time_min, int((end - now) // _MINUTE) * _MINUTE)
            if limit in tried:
                continue
            tried.add(limit)
            shortened = job.evolve(time_limit_s=limit)  # what every plugin judges
            stage = _start_now(self.framework, ctx, profile, shortened, float(limit), needs, result)
            if stage is Stage.DONE:
                result.limits[job.id] = limit
                self._free.clear()
                return True
        return False

    # -- jobs naming several partitions (-p a,b) ----------------------------------------
    # Such a job waits in each of its partitions' queues (Slurm's backfill plans it in
    # every one): the stage gets it as it is in the first where it waits for room, and
    # tries it as it would run in each (``in_partition``: that partition's nodes, and its
    # DefaultTime when it named no --time), in the order listed.

    def forms(self, job: Job) -> list[Job]:
        """``job`` as it would run in each of its partitions that backfill plans."""
        policies, partitions = self.policies, self.ctx.partitions
        return [
            in_partition(job, partitions, name)
            for name in partitions_of(job)
            if policies.get(name) is not None
        ]

    def runtime_in(self, form: Job) -> float:
        """``runtime`` of one of ``forms``: its time limit may differ per partition."""
        key = (form.id, form.partition)
        found = self._listed_runtimes.get(key)
        if found is None:
            found = self._listed_runtimes[key] = self.plugin.runtime(form)
        return found

    def start_listed(self, job: Job, failed_now: dict[PlacementKey, float]) -> bool:
        """Start ``job`` now in the first of its partitions where it fits without
        delaying a reservation (each tried as the stage tries any job: its CPUs free
        now, no failed fit of the same key over as long a window, then the cycle; and,
        with ``--time-min``, shortened there before the next partition is tried)."""
        time_min = job.spec.time_min_s
        for form in self.forms(job):
            tried = BackfillResult()
            if self._start_form(form, failed_now, tried, bool(time_min)):
                self._free.clear()
                self.result.placements.extend(tried.placements)
                self.result.statuses.update(tried.statuses)
                self.result.limits.update(tried.limits)
                return True
            if form is job:  # its own verdict where it waits (not another partition's)
                self.result.statuses.update(tried.statuses)
        return False

    def _start_form(
        self,
        form: Job,
        failed_now: dict[PlacementKey, float],
        tried: BackfillResult,
        shortenable: bool,
    ) -> bool:
        """One partition of ``start_listed``: its whole run, then (``shortenable``: the
        job has a time-min) its shortened run where the whole one stopped for something a
        shorter run may leave free (``_SHORTENABLE``), as ``run_backfill`` tries a job of
        one partition. Slurm's backfill likewise tries each (job, partition) pair in turn
        with its own time-min logic, so a shortened start in a partition listed earlier
        comes before a whole one in a later partition."""
        now = self.ctx.now
        needs = self.min_cpus(form)
        if needs > self.free_now(form.partition):
            return False  # (not enough CPUs even now: no shorter run fits either)
        runtime = _held_for(form, self.runtime_in(form), form.partition in self.protected)
        key = placement_key(form)
        if now + runtime >= failed_now.get(key, math.inf):
            return shortenable and self.start_shortened(form, runtime, tried)
        self.flush()  # earlier reservations first: they constrain this job
        self.plan_counts(form)
        stage = _start_now(self.framework, self.ctx, self.profile, form, runtime, needs, tried)
        if stage is Stage.DONE:
            return True
        if stage is Stage.FILTER:
            failed_now[key] = min(failed_now.get(key, math.inf), now + runtime)
        return shortenable and stage in _SHORTENABLE and self.start_shortened(form, runtime, tried)

    def owed_listed(self, job: Job) -> bool:
        """Whether ``job`` is owed a reservation: when any of its partitions owes one
        (conservative, or EASY without one yet)."""
        for name in partitions_of(job):
            policy = self.policies.get(name)
            if policy is not None and (
                policy.mode is BackfillMode.CONSERVATIVE or not self.reservations.get(name, 0)
            ):
                return True
        return False

    def defer_listed(self, job: Job) -> None:
        if self.owed_listed(job):
            self.deferred.append(job)

    def reserve_listed(self, job: Job) -> None:
        """Reserve ``job`` in the partition where it can start first (a tie: the one
        listed first); its start is its ``expected_start``. It held a place in every
        one of its partitions' queues, so the reservation counts in each."""
        profile = self.profile
        best: tuple[float, Job, float, Allocation] | None = None
        for form in self.forms(job):
            self.plan_counts(form)
            runtime = self.runtime_in(form)
            found = _reserve(self.framework, self.ctx, profile, form, runtime, None)
            if found is not None and (best is None or profile.times[found[0]] < best[0]):
                best = (profile.times[found[0]], form, runtime, found[1])
        if best is None:
            return
        start, form, runtime, allocation = best
        _hold(self.framework, self.ctx, profile, form, start, runtime, allocation, self.result)
        for name in partitions_of(job):
            self.reservations[name] = self.reservations.get(name, 0) + 1

    def to_forecast(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of EASY partitions this stage left without a start (``jobs``: priority
        order), up to ``max_job_test`` per partition; a het job's components are left
        out."""
        result = self.result
        started = {job.id for job, _ in result.placements}
        seen: dict[str, int] = {}
        wanted: list[Job] = []
        for job in jobs:
            policy = self.policies[job.partition]
            if policy is None or policy.mode is not BackfillMode.EASY:
                continue
            count = seen[job.partition] = seen.get(job.partition, 0) + 1
            if policy.max_job_test and count > policy.max_job_test:
                continue
            spec = job.spec
            if not (job.id in result.expected_start or job.id in started or spec.het is not None):
                wanted.append(job)
        return wanted

    def forecast(self, jobs: Sequence[Job]) -> dict[int, float | None]:
        """Expected starts of ``jobs`` (``to_forecast``'s; ``squeue --start``: Slurm's
        backfill gives one to every job it tests): each planned in turn on the stage's
        profile after its decisions, as conservative backfilling would reserve it (a job
        naming several partitions: in the one where it starts first); None where none
        fits within the window. Only shown: nothing starts from these plans and no
        reservation is recorded. Called once, after the pass (``Forecast.starts``): it uses
        the profile up."""
        profile = self.profile
        starts: dict[int, float | None] = {}
        for job in jobs:
            listed = len(job.spec.partitions) > 1 and job.partition in job.spec.partitions
            best: tuple[float, Job, float, Allocation] | None = None
            for form in self.forms(job) if listed else [job]:
                self.plan_counts(form)
                runtime = self.runtime_in(form) if listed else self.runtime(form)
                found = _reserve(self.framework, self.ctx, profile, form, runtime, None)
                if found is not None and (best is None or profile.times[found[0]] < best[0]):
                    best = (profile.times[found[0]], form, runtime, found[1])
            if best is None:
                starts[job.id] = None
                continue
            start, form, runtime, allocation = best
            starts[job.id] = start
            rows = self.ctx.nodes.rows_of(allocation)
            profile.reserve(start, start + runtime, rows, form.spec.exclusive)
            _hold_counts(self.counted, self.ctx, profile, form, start, start + runtime)
        return starts

    def start_now(self, job: Job, runtime: float, *, screened: bool = False) -> Stage | None:
        """``screened``: the caller knows the job's CPUs are free all through its run
        (``_Settled.next_candidate`` on this very profile)."""
        needs = 0 if screened else self.min_cpus(job)
        self.plan_counts(job)
        stage = _start_now(self.framework, self.ctx, self.profile, job, runtime, needs, self.result)
        if stage is Stage.DONE:
            self._free.clear()
        return stage


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
    (no ``max_job_test``), no het job. A job is then owed no reservation, so one that
    cannot start now leaves no trace: the stage's loop changes something only for a job
    whose CPUs fit both now (``free_now``) and all through the window it would run in
    (``free_cpus_from_now``). ``next_candidate`` finds the next such job with one array
    comparison over the rest and the step function of the window's free CPUs, asking
    the run times of the jobs the loop itself would ask (those with their CPUs free
    now, in order; a pinned predictor remembers what it was asked), and the loop takes
    it from there with every check of its own. When the plugin's run times do not
    depend on what was asked (``fixed_runtimes``: the requested time), they are read
    for every job at once and the window's comparison is made for all of them together.
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

    def __init__(self, planner: _Planner, ordered: list[Job], partition: str) -> None:
        self._planner = planner
        self._ordered = ordered
        self.partition = partition
        self._needs: npt.NDArray[np.int64] | None = None  # min_cpus of each, when asked
        # ``hold_for`` of each, when the run times are fixed (asked once)
        self._holds: npt.NDArray[np.float64] | None = None
        self._asked_holds = False
        self._candidates: _Candidates | None = None  # ``_screen``'s, until a job starts

    @classmethod
    def of(
        cls, planner: _Planner, ordered: list[Job], het: dict[int, tuple[Job, ...]]
    ) -> _Settled | None:
        policies = planner.policies
        if len(policies) != 1 or het or not ordered:
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
            by_spec = planner._min_cpus  # (min_cpus's cache, read inline: per job and pass)
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
                [_held_for(j, r, True) for j, r in zip(self._ordered, runtimes, strict=True)],
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

    def __init__(self, planner: _Planner, head: Job, partition: str) -> None:
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
        for job in new:
            spec = job.spec
            if (
                job.partition != partition
                or spec.reservation != head.spec.reservation
                or spec.het is not None
                or spec.time_min_s  # it may start shortened: let the pass decide
                or len(spec.partitions) > 1  # may start in another partition
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


def _plan_listed(
    plugin: BackfillPlugin,
    ctx: PassContext,
    policies: dict[str, BackfillPolicy | None],
    held: Sequence[Job],
) -> list[Job]:
    """Adds the policies of every partition a held job names (``-p a,b``) to
    ``policies``; a job waiting in one that backfill does not plan (mode ``none``) is
    handed over as it is in the first of its others that it does."""
    out = []
    for job in held:
        if len(job.spec.partitions) > 1:
            names = partitions_of(job)
            for name in names:
                if name not in policies:
                    policies[name] = plugin.policy_for(name)
            if policies[job.partition] is None:
                planned = [n for n in names if policies[n] is not None]
                if planned:
                    job = in_partition(job, ctx.partitions, planned[0])
        out.append(job)
    return out


def _order(
    jobs: list[Job], policies: dict[str, BackfillPolicy | None], planner: _Planner
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


def _start_now(
    framework: Framework,
    ctx: PassContext,
    profile: AvailabilityProfile,
    job: Job,
    runtime: float,
    min_cpus: int,
    result: BackfillResult,
) -> Stage | None:
    """Start ``job`` (which needs ``min_cpus`` at least; 0: already screened) now if it
    fits without delaying a reservation. Returns the stage its cycle stopped at (``DONE``
    when placed; ``None`` when the CPU screen said no)."""
    end = ctx.now + runtime
    if min_cpus:
        mask = ctx.nodes.partition_mask(job.partition)
        if min_cpus > profile.free_cpus_from_now(end, mask, job.partition):
            return None  # not enough CPUs free all through its run: skip the cycle
    ctx.data.write(PLAN_END, end)
    out = framework.place(ctx, job, Mode.NOW, within=profile.window(0, end))
    ctx.data.delete(PLAN_END)
    if out.status.is_success and out.allocation is not None:
        profile.reserve(ctx.now, end, ctx.nodes.rows_of(out.allocation), job.spec.exclusive)
        _hold_counts(framework.profile.counted, ctx, profile, job, ctx.now, end)
        result.placements.append((job, out.allocation))
        result.statuses[job.id] = out.status
        return Stage.DONE
    if out.stage not in (Stage.FILTER, Stage.GATE):
        result.statuses[job.id] = out.status  # its own verdict (hold, limits, an error)
    return out.stage


def _reserve(
    framework: Framework,
    ctx: PassContext,
    profile: AvailabilityProfile,
    job: Job,
    runtime: float,
    result: BackfillResult | None,
) -> tuple[int, Allocation] | None:
    """Reserve ``job`` from the earliest row after now where the framework finds it
    nodes, and return that row and the nodes; None when no row within the horizon has
    room. ``result=None`` only finds them: nothing is reserved, and the start bound
    (kept for the one job that asks pass after pass, in one partition) is left alone."""
    spec = job.spec
    table = ctx.nodes
    counts = None
    ledger = framework.releases
    if spec.nodes_min == spec.nodes_max and not spec.nodelist:
        request = NodeRequest.for_job(spec, spec.nodes_min)
        mask = table.partition_mask(job.partition) & table.up
        if result is not None:
            # the start of its last reservation, when no earlier row can have come free
            k = ledger.start_bound.row(profile, ledger, job.id, request, mask, runtime)
            if k is not None:
                found = _reserve_at(framework, ctx, profile, job, runtime, k, result)
                if isinstance(found, Allocation):
                    return k, found
        rows, counts = profile.screen(request, mask, runtime)
        if profile.has_dips or result is None:
            counts = None  # not rising from row to row (or not kept): nothing for the bound
    else:
        rows = list(range(len(profile)))  # node ranges: let the framework try each row
    not_before = -math.inf
    for k in rows:
        if k == 0:
            continue  # "now" was just tried
        start = profile.times[k]
        if start >= profile.horizon:
            break
        if start < not_before:
            continue
        found = _reserve_at(framework, ctx, profile, job, runtime, k, result)
        if isinstance(found, Allocation):
            if counts is not None:
                ledger.start_bound.remember(
                    profile, ledger, job.id, request, mask, runtime, k, counts
                )
            return k, found
        later = _not_before(found, start)
        if later is None:
            return None
        if later > start:
            not_before = later  # e.g. its licenses are back only then
    return None


def _not_before(out: Outcome, start: float) -> float | None:
    """After a failed try at ``start``: the instant from which trying again may succeed
    (a PreFilter verdict that names a later one: licenses back only then), ``start``
    itself for a shortage of nodes, or None when no later row can help (unresolvable,
    or the job is not ready at all)."""
    st = out.status
    if st.code is Code.UNRESOLVABLE:
        return None
    if out.stage is Stage.PRE_FILTER:
        later = st.earliest_start
        return later if later is not None and later > start else None
    return start


def _reserve_at(
    framework: Framework,
    ctx: PassContext,
    profile: AvailabilityProfile,
    job: Job,
    runtime: float,
    k: int,
    result: BackfillResult | None,
) -> Allocation | Outcome:
    """The nodes the framework finds ``job`` from row ``k`` (reserved there unless
    ``result`` is None), else its outcome."""
    start = profile.times[k]
    ctx.data.write(PLAN_START, start)
    ctx.data.write(PLAN_END, start + runtime)
    try:
        within = profile.window(k, start + runtime)
        out = framework.place(ctx, job, Mode.TEST_ONLY, within=within)
    finally:
        ctx.data.delete(PLAN_START)
        ctx.data.delete(PLAN_END)
    if not out.status.is_success or out.allocation is None:
        return out
    if result is not None:
        _hold(framework, ctx, profile, job, start, runtime, out.allocation, result)
    return out.allocation


def _hold(
    framework: Framework,
    ctx: PassContext,
    profile: AvailabilityProfile,
    job: Job,
    start: float,
    runtime: float,
    allocation: Allocation,
    result: BackfillResult,
) -> None:
    """Reserve ``allocation`` (and the job's counters) for ``job`` from ``start``."""
    profile.reserve(start, start + runtime, ctx.nodes.rows_of(allocation), job.spec.exclusive)
    _hold_counts(framework.profile.counted, ctx, profile, job, start, start + runtime)
    result.expected_start[job.id] = start
    result.reservations[job.id] = (start, start + runtime, allocation)


def _het_groups(jobs: Sequence[Job]) -> dict[int, tuple[Job, ...]]:
    """Het job id → its held-back components, by offset."""
    groups: dict[int, list[Job]] = {}
    for job in jobs:
        if job.spec.het is not None:
            groups.setdefault(job.spec.het.job_id, []).append(job)
    return {
        hid: tuple(sorted(members, key=lambda j: j.spec.het.offset if j.spec.het else 0))
        for hid, members in groups.items()
    }


def _reserve_group(
    framework: Framework,
    ctx: PassContext,
    profile: AvailabilityProfile,
    members: tuple[Job, ...],
    planner: _Planner,
) -> bool:
    """Reserve every component of a het job at one start time: the earliest row of the
    profile where all of them fit together for the longest one's run time."""
    runtime = max(planner.runtime(j) for j in members)
    table = ctx.nodes
    not_before = -math.inf
    for k in range(1, len(profile)):
        start = profile.times[k]
        if start >= profile.horizon:
            break
        if start < not_before:
            continue
        ctx.data.write(PLAN_START, start)
        ctx.data.write(PLAN_END, start + runtime)
        try:
            within = profile.window(k, start + runtime)
            outcomes, failed = framework.place_group(ctx, members, Mode.TEST_ONLY, within=within)
        finally:
            ctx.data.delete(PLAN_START)
            ctx.data.delete(PLAN_END)
        if failed is None:
            for job, out in zip(members, outcomes, strict=True):
                assert out.allocation is not None
                rows = table.rows_of(out.allocation)
                profile.reserve(start, start + runtime, rows, job.spec.exclusive)
                _hold_counts(planner.counted, ctx, profile, job, start, start + runtime)
                planner.result.expected_start[job.id] = start
                planner.result.reservations[job.id] = (start, start + runtime, out.allocation)
            return True
        later = _not_before(outcomes[failed], start)
        if later is None:
            return False
        not_before = later
    return False


def _planned_end(profile: AvailabilityProfile, end: float) -> float:
    """Where the profile puts a running job's release planned for ``end``: one step from
    now at the soonest, rounded up; ``math.inf`` from the horizon on."""
    step = max(profile.resolution, 1.0)
    t = round_up(max(end, profile.now + step), profile.resolution)
    return math.inf if t >= profile.horizon else t


def _hold_counts(
    counted: Sequence[CountedResourcePlugin],
    ctx: PassContext,
    profile: AvailabilityProfile,
    job: Job,
    start: float,
    end: float,
) -> None:
    """A job started or reserved from ``start`` holds its counters until ``end``, rounded
    up and past the horizon as ``AvailabilityProfile.reserve`` takes its nodes (once
    the stage plans counters: ``_Planner.plan_counts``)."""
    over_time = ctx.data.get(COUNTS_OVER_TIME)
    if over_time is None:
        return
    end = round_up(end, profile.resolution)
    if end >= profile.horizon:
        end = math.inf
    for each in counted:
        counts = each.counts(job)
        if counts:
            over_time[each.name].hold(counts, start, end)


def _reservation_instants(ctx: PassContext, horizon: float) -> list[float]:
    """The starts and ends of the advance reservations' windows in ``(now, horizon)``
    (recurring ones: every window up to the horizon, at most 1,000 per reservation)."""
    now = ctx.now
    found: set[float] = set()
    for r in ctx.snapshot.reservations:
        t = now
        for _ in range(1000):
            start, end = r.window_at(t)
            if end <= t or start >= horizon:
                break
            found.update(x for x in (start, end) if now < x < horizon)
            t = end
    return sorted(found)
