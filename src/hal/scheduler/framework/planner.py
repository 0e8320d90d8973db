"""``Planner``: the availability profile and the reservations of one backfill stage, and
the moves the stage makes on them: start a job now in a hole, reserve it at its earliest
start, hold what it holds over time (nodes and counted resources), forecast the rest.

The stage's loop (which job, in what order, what is owed) is ``backfill.py``; jobs a
group placement decides (a het job's components, a job naming several partitions:
``grouping.py``) are planned by their kind through the same moves (``start_together``,
``reserve_together``, ``try_start``, ``find_reservation``, ``hold``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hal.core.job import Allocation, Job
from hal.core.suspension import suspended_seconds
from hal.scheduler.framework.availability import AvailabilityProfile, round_up
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.counted import CountsOverTime
from hal.scheduler.framework.interfaces import BackfillMode, BackfillPlugin, BackfillPolicy
from hal.scheduler.framework.keys import COUNTS_OVER_TIME, PLAN_END, PLAN_START
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.runtime import Framework, Mode, Outcome, Stage
from hal.scheduler.framework.status import Code, Status

if TYPE_CHECKING:
    from hal.scheduler.framework.backfill import SettledStage
    from hal.scheduler.framework.grouping import Groupings, GroupPlacement

# Where a start-now try stopped for a lack of something a shorter run may leave free:
# CPUs (the screen: None), nodes (Filter, e.g. an advance reservation's), counters
# (PreFilter)
SHORTENABLE = (None, Stage.FILTER, Stage.PRE_FILTER)
_MINUTE = 60  # time limits lowered within --time-min are whole minutes, as Slurm's
# (start, the job as it would run, planned run time, nodes) of a reservation found
Found = tuple[float, Job, float, Allocation]


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
    """A stage's forecast, not yet worked out: ``jobs`` (``Planner.to_forecast``: the
    waiting jobs of EASY partitions left without a start) and the planner whose
    profile, after the stage's decisions, ``starts`` plans them on (ADR 0018), in
    order, all at once or a slice at a time (ADR 0029)."""

    __slots__ = ("_done", "_planner", "jobs")

    def __init__(self, planner: Planner, jobs: Sequence[Job]) -> None:
        self._planner = planner
        self.jobs = tuple(jobs)
        self._done = 0  # how many of ``jobs`` have their start

    @property
    def left(self) -> tuple[Job, ...]:
        """The jobs ``starts`` has not planned yet, in order."""
        return self.jobs[self._done :]

    def starts(self, go_on: Callable[[], bool] | None = None) -> dict[int, float | None]:
        """Job id → its forecast start (None: none within the window), for the jobs
        ``left``: every one, or, with ``go_on``, as many as are planned before it says
        False (one at least; it is asked after each). Each job once: it uses the profile
        up, and the next call goes on from where this one stopped."""
        found, planned = self._planner.forecast(self.left, go_on)
        self._done += planned
        return found


def held_for(job: Job, runtime: float, protected: bool) -> float:
    """How long a job is planned to hold its nodes: its planned run time, or its time
    limit while its partition is protected (``protect_after_s``)."""
    if protected and job.time_limit_s > 0:
        return float(job.time_limit_s)
    return runtime


def _min_cpus(job: Job) -> int:
    """The fewest CPUs the job can run on in total (a cheap lower bound)."""
    spec = job.spec
    lo = max(spec.nodes_min, len(spec.nodelist), 1)
    if spec.ntasks_per_node is not None:
        return lo * spec.cpus_per_node(lo)
    return max(spec.ntasks * spec.cpus_per_task, lo * spec.cpus_per_task)


class Planner:
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
        groupings: Groupings,
        jobs: Sequence[Job],
        capped: frozenset[str] = frozenset(),
    ) -> None:
        self.framework = framework
        self.ctx = ctx
        self.plugin = plugin
        self.policies = policies
        self.placed_now = placed_now
        self.groupings = groupings
        self.jobs = jobs  # the jobs the stage plans, in priority order
        # the partitions whose starts the pass reached its cap at (backfill's turn):
        # none of their jobs starts here; one that fits now is held from now
        # (``try_start``, ``start_together``; ``start_shortened`` tries none)
        self.capped = capped
        self.result = BackfillResult()
        self.reservations: dict[str, int] = {}  # partition → reservations made
        # a job owed a reservation, or a group placement's jobs (``GroupPlacement.reserve``)
        self.deferred: list[Job | tuple[GroupPlacement, tuple[Job, ...]]] = []
        self._profile: AvailabilityProfile | None = None
        # counted resources held over time, by plugin: built when a job holding some
        # is first tried
        self.counted = framework.profile.counted
        self.over_time: dict[str, CountsOverTime] | None = None
        self._runtimes: dict[int, float] = {}
        self._free: dict[str, int] = {}  # partition → free CPUs now (cleared on a start)
        # id(spec) → ``_min_cpus`` (specs are shared); the stage's loop reads it inline
        self.min_cpus_by_spec: dict[int, int] = {}
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
        return held_for(job, self.runtime(job), job.partition in self.protected)

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
        ledger.same_nodes(table)
        ends: list[float] = []
        firsts: list[int] = []
        counts: list[int] = []
        exclusive: list[bool] = []
        seen: set[int] = set()
        runtime = self.plugin.runtime
        running = self.ctx.running
        # where what the table took out for each is (None: it holds nothing)
        for r, found in zip(running, ledger.held_slots(table, running), strict=True):
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
        placed = self.placed_now
        if placed:
            placed_firsts, placed_counts = ledger.slots(table, placed)
            firsts.extend(placed_firsts)
            counts.extend(placed_counts)
            for j, _ in placed:
                ends.append(now + self.runtime(j))
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
        profile.add_instants(reservation_instants(self.ctx, horizon))
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
        found = self.min_cpus_by_spec.get(id(job.spec))
        if found is None:
            found = self.min_cpus_by_spec[id(job.spec)] = _min_cpus(job)
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

    def _taken(self, allocation: Allocation) -> None:
        """``allocation`` was just taken out of the pass's table (a job started now):
        the free CPUs ``free_now`` keeps lose what it holds on each partition's nodes,
        as a new sum over the table would find (one started job changes a few nodes;
        the sum reads every node of the partition)."""
        free = self._free
        if not free:
            return
        table = self.ctx.nodes
        ar = table.rows_of(allocation)
        if len(ar.rows) == 1:
            row, cpus = int(ar.rows[0]), int(ar.cpus[0])
            for partition in free:
                if table.partition_mask(partition)[row]:
                    free[partition] -= cpus
            return
        for partition in free:
            free[partition] -= int(ar.cpus[table.partition_mask(partition)[ar.rows]].sum())

    def started(self) -> None:
        """A job started now: the free CPUs ``free_now`` kept are stale."""
        self._free.clear()

    def owes(self, partition: str) -> bool:
        """Whether the next job held back in ``partition`` is owed a reservation:
        conservative, every one; EASY, the first (none made there yet)."""
        policy = self.policies.get(partition)
        return policy is not None and (
            policy.mode is BackfillMode.CONSERVATIVE or not self.reservations.get(partition, 0)
        )

    def reserved_in(self, partition: str) -> None:
        """One more reservation made in ``partition`` (EASY then owes no more there)."""
        self.reservations[partition] = self.reservations.get(partition, 0) + 1

    def defer(self, job: Job) -> None:
        if self.owes(job.partition):
            self.deferred.append(job)

    def flush(self) -> None:
        """Make the reservations deferred so far, in order."""
        for item in self.deferred:
            if isinstance(item, tuple):
                kind, jobs = item
                kind.reserve(self, jobs)
                continue
            job = item
            if not self.owes(job.partition):
                continue
            self.plan_counts(job)
            found = _reserve(self, job, self.runtime(job), self.result)
            if found is not None:
                self.reserved_in(job.partition)
        self.deferred.clear()

    def start_now(self, job: Job, runtime: float, *, screened: bool = False) -> Stage | None:
        """``screened``: the caller knows the job's CPUs are free all through its run
        (``_Settled.next_candidate`` on this very profile)."""
        needs = 0 if screened else self.min_cpus(job)
        self.plan_counts(job)
        result = self.result
        placed = len(result.placements)
        stage = self.try_start(job, runtime, needs, result)
        if stage is Stage.DONE:
            if len(result.placements) > placed:
                self._taken(result.placements[-1][1])
            else:
                self._free.clear()  # (held from now: the table is as it was)
        return stage

    def try_start(
        self, job: Job, runtime: float, min_cpus: int, result: BackfillResult
    ) -> Stage | None:
        """Start ``job`` (which needs ``min_cpus`` at least; 0: already screened) now if
        it fits for ``runtime`` without delaying a reservation; its placement and
        verdict go to ``result``. A job of a ``capped`` partition that fits is not
        started but held from now (``hold``: its expected start now, the next pass
        starts it; its nodes kept from the later jobs as a started job's are).
        Returns the stage its cycle stopped at (``DONE`` when placed or held; ``None``
        when the CPU screen said no)."""
        ctx = self.ctx
        profile = self.profile
        end = ctx.now + runtime
        if min_cpus:
            mask = ctx.nodes.partition_mask(job.partition)
            if min_cpus > profile.free_cpus_from_now(end, mask, job.partition):
                return None  # not enough CPUs free all through its run: skip the cycle
        ctx.data.write(PLAN_END, end)
        out = self.framework.place(ctx, job, Mode.NOW, within=profile.window(0, end))
        ctx.data.delete(PLAN_END)
        if out.status.is_success and out.allocation is not None:
            if job.partition in self.capped:
                self.hold(job, ctx.now, runtime, out.allocation)
                return Stage.DONE
            profile.reserve(ctx.now, end, ctx.nodes.rows_of(out.allocation), job.spec.exclusive)
            self._hold_counts(job, ctx.now, end)
            result.placements.append((job, out.allocation))
            result.statuses[job.id] = out.status
            return Stage.DONE
        if out.stage not in (Stage.FILTER, Stage.GATE):
            result.statuses[job.id] = out.status  # its own verdict (hold, limits, an error)
        return out.stage

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
        if not time_min or time_min >= hold or job.partition in self.capped:
            # (a run planned shorter than its time-min gains nothing; a capped
            # partition's job is held whole: the next pass starts it with its own limit)
            return False
        ctx = self.ctx
        now = ctx.now
        last = now + hold
        self.flush()  # earlier reservations first: they constrain this job
        self.plan_counts(job)
        profile = self.profile
        instants = {*profile.dip_instants, *reservation_instants(ctx, profile.horizon)}
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
            stage = self.try_start(shortened, float(limit), needs, result)
            if stage is Stage.DONE:
                result.limits[job.id] = limit
                self._free.clear()
                return True
        return False

    def find_reservation(self, job: Job, runtime: float) -> tuple[int, Allocation] | None:
        """The earliest row after now where ``job`` fits for ``runtime``, and the nodes
        it would get there (None: no row within the horizon has room). Nothing is
        reserved."""
        return _reserve(self, job, runtime, None)

    def hold(self, job: Job, start: float, runtime: float, allocation: Allocation) -> None:
        """Reserve ``allocation`` (and the job's counters) for ``job`` from ``start``: its
        expected start."""
        profile = self.profile
        rows = self.ctx.nodes.rows_of(allocation)
        profile.reserve(start, start + runtime, rows, job.spec.exclusive)
        self._hold_counts(job, start, start + runtime)
        self.result.expected_start[job.id] = start
        self.result.reservations[job.id] = (start, start + runtime, allocation)

    def start_together(self, jobs: Sequence[Job]) -> bool:
        """Start every one of ``jobs`` now, in holes that delay no reservation, or none of
        them (``Framework.place_group``), each planned to hold its nodes as long as the
        longest of them runs. When one of them is of a ``capped`` partition, none starts:
        they are held from now together (``hold``), as ``try_start`` holds one job."""
        runtime = max(self.runtime(j) for j in jobs)
        ctx = self.ctx
        end = ctx.now + runtime
        self.plan_counts(*jobs)
        ctx.data.write(PLAN_END, end)
        outcomes, failed = self.framework.place_group(
            ctx, jobs, Mode.NOW, within=self.profile.window(0, end)
        )
        ctx.data.delete(PLAN_END)
        if failed is not None:
            return False
        capped = self.capped and any(job.partition in self.capped for job in jobs)
        for job, out in zip(jobs, outcomes, strict=True):
            assert out.allocation is not None
            if capped:
                self.hold(job, ctx.now, runtime, out.allocation)
                continue
            rows = ctx.nodes.rows_of(out.allocation)
            self.profile.reserve(ctx.now, end, rows, job.spec.exclusive)
            self._hold_counts(job, ctx.now, end)
            self.result.placements.append((job, out.allocation))
            self.result.statuses[job.id] = out.status
        self._free.clear()
        return True

    def reserve_together(self, jobs: Sequence[Job]) -> bool:
        """Reserve every one of ``jobs`` at one start time: the earliest row of the
        profile where all of them fit together for the longest one's run time."""
        self.plan_counts(*jobs)
        runtime = max(self.runtime(j) for j in jobs)
        ctx = self.ctx
        profile = self.profile
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
                outcomes, failed = self.framework.place_group(
                    ctx, jobs, Mode.TEST_ONLY, within=within
                )
            finally:
                ctx.data.delete(PLAN_START)
                ctx.data.delete(PLAN_END)
            if failed is None:
                for job, out in zip(jobs, outcomes, strict=True):
                    assert out.allocation is not None
                    rows = table.rows_of(out.allocation)
                    profile.reserve(start, start + runtime, rows, job.spec.exclusive)
                    self._hold_counts(job, start, start + runtime)
                    self.result.expected_start[job.id] = start
                    self.result.reservations[job.id] = (start, start + runtime, out.allocation)
                return True
            later = _not_before(outcomes[failed], start)
            if later is None:
                return False
            not_before = later
        return False

    def to_forecast(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of EASY partitions this stage left without a start (``jobs``: priority
        order), up to ``max_job_test`` per partition; the jobs of a group placement that
        forecasts none (a het job's components) are left out."""
        result = self.result
        started = {job.id for job, _ in result.placements}
        seen: dict[str, int] = {}
        wanted: list[Job] = []
        kind_of = self.groupings.of
        for job in jobs:
            policy = self.policies[job.partition]
            if policy is None or policy.mode is not BackfillMode.EASY:
                continue
            count = seen[job.partition] = seen.get(job.partition, 0) + 1
            if policy.max_job_test and count > policy.max_job_test:
                continue
            if job.id in result.expected_start or job.id in started:
                continue
            kind = kind_of(job)
            if kind is None or kind.forecasts:
                wanted.append(job)
        return wanted

    def forecast(
        self, jobs: Sequence[Job], go_on: Callable[[], bool] | None = None
    ) -> tuple[dict[int, float | None], int]:
        """Expected starts of ``jobs`` (``to_forecast``'s; ``squeue --start``: Slurm's
        backfill gives one to every job it tests): each planned in turn on the stage's
        profile after its decisions, as conservative backfilling would reserve it (a
        group placement's job: where its kind would reserve it); None where none fits
        within the window. Only shown: nothing starts from these plans and no
        reservation is recorded. Called after the pass (``Forecast.starts``): it uses
        the profile up. ``go_on``: asked after each job; False stops here (the jobs
        planned so far are returned, the profile holds them for the next call). Also
        returns how many of ``jobs`` it planned (the next call starts after them: not
        ``len`` of the starts, which counts job ids)."""
        profile = self.profile
        starts: dict[int, float | None] = {}
        kind_of = self.groupings.of
        planned = 0
        for job in jobs:
            planned += 1
            kind = kind_of(job)
            best: Found | None = None
            if kind is not None:
                best = kind.reservation(self, job)
            else:
                self.plan_counts(job)
                runtime = self.runtime(job)
                found = self.find_reservation(job, runtime)
                if found is not None:
                    best = (profile.times[found[0]], job, runtime, found[1])
            if best is None:
                starts[job.id] = None
            else:
                start, form, runtime, allocation = best
                starts[job.id] = start
                rows = self.ctx.nodes.rows_of(allocation)
                profile.reserve(start, start + runtime, rows, form.spec.exclusive)
                self._hold_counts(form, start, start + runtime)
            if go_on is not None and not go_on():
                break
        return starts, planned

    def _hold_counts(self, job: Job, start: float, end: float) -> None:
        """A job started or reserved from ``start`` holds its counters until ``end``,
        rounded up and past the horizon as ``AvailabilityProfile.reserve`` takes its
        nodes (once the stage plans counters: ``plan_counts``)."""
        over_time = self.over_time
        if over_time is None:
            return
        profile = self.profile
        end = round_up(end, profile.resolution)
        if end >= profile.horizon:
            end = math.inf
        for each in self.counted:
            counts = each.counts(job)
            if counts:
                over_time[each.name].hold(counts, start, end)


def _reserve(
    planner: Planner, job: Job, runtime: float, result: BackfillResult | None
) -> tuple[int, Allocation] | None:
    """Reserve ``job`` from the earliest row after now where the framework finds it
    nodes, and return that row and the nodes; None when no row within the horizon has
    room. ``result=None`` only finds them: nothing is reserved, and the start bound
    (kept for the one job that asks pass after pass, in one partition) is left alone."""
    spec = job.spec
    table = planner.ctx.nodes
    profile = planner.profile
    counts = None
    ledger = planner.framework.releases
    if spec.nodes_min == spec.nodes_max and not spec.nodelist:
        request = NodeRequest.for_job(spec, spec.nodes_min)
        mask = table.partition_mask(job.partition) & table.up
        if result is not None:
            # the start of its last reservation, when no earlier row can have come free
            k = ledger.start_bound.row(profile, ledger, job.id, request, mask, runtime)
            if k is not None:
                found = _reserve_at(planner, job, runtime, k, result)
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
        found = _reserve_at(planner, job, runtime, k, result)
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
            not_before = later  # e.g. its counted resources are back only then
    return None


def _not_before(out: Outcome, start: float) -> float | None:
    """After a failed try at ``start``: the instant from which trying again may succeed
    (a PreFilter verdict that names a later one: counters back only then), ``start``
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
    planner: Planner, job: Job, runtime: float, k: int, result: BackfillResult | None
) -> Allocation | Outcome:
    """The nodes the framework finds ``job`` from row ``k`` (reserved there unless
    ``result`` is None), else its outcome."""
    ctx = planner.ctx
    profile = planner.profile
    start = profile.times[k]
    ctx.data.write(PLAN_START, start)
    ctx.data.write(PLAN_END, start + runtime)
    try:
        within = profile.window(k, start + runtime)
        out = planner.framework.place(ctx, job, Mode.TEST_ONLY, within=within)
    finally:
        ctx.data.delete(PLAN_START)
        ctx.data.delete(PLAN_END)
    if not out.status.is_success or out.allocation is None:
        return out
    if result is not None:
        planner.hold(job, start, runtime, out.allocation)
    return out.allocation


def _planned_end(profile: AvailabilityProfile, end: float) -> float:
    """Where the profile puts a running job's release planned for ``end``: one step from
    now at the soonest, rounded up; ``math.inf`` from the horizon on."""
    step = max(profile.resolution, 1.0)
    t = round_up(max(end, profile.now + step), profile.resolution)
    return math.inf if t >= profile.horizon else t


def reservation_instants(ctx: PassContext, horizon: float) -> list[float]:
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
