"""The scheduler's async shell: wake on change, snapshot, decide, hand the plan over.

Runs in the server process. It never writes state: ``SchedulerHost`` (the state layer's
``Cluster``) supplies snapshots and applies plans after re-checking them.

Cycle triggers: any committed change (submit, finish, node up/down) sets ``changed``;
bursts are coalesced by a short debounce so 10,000 submissions cost a handful of cycles,
not 10,000, and consecutive cycles are spaced by at least the last cycle's own duration so
that scheduling never takes more than about half of the process while requests pour in.
With pending jobs present a cycle also runs every ``interval`` seconds (begin times pass,
nodes recover); an idle cluster does no work at all.

``PacedScheduler`` gives the passes Slurm's bf_interval: the backfill stage runs once
per the plugin's ``interval_s`` (30 s by default), also in a pass that stopped at
``max_job_starts`` (its turn, as Slurm's backfill thread is not held back by
sched_max_job_start), the main pass on every cycle;
and Slurm's bounds on the main pass (ADR 0029): a pass looks at every pending job only
every ``sched_interval`` (and when backfill is due), the others at the first
``default_queue_depth`` in queue order, and every pass passes over a partition's jobs
once it has placed ``max_job_starts`` of them. The forecast of expected starts goes in
slices of bf_yield_interval, one per cycle.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hal.core.errors import Unavailable
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan

log = logging.getLogger("hal.scheduler")


class SchedulerHost(Protocol):
    changed: asyncio.Event

    def has_pending(self) -> bool:
        """Whether a job waits for a pass (pending and not held): the snapshot's
        ``pending`` would not be empty."""
        ...

    def snapshot(self) -> ClusterSnapshot: ...

    async def fill_related(self, snap: ClusterSnapshot) -> ClusterSnapshot: ...

    async def apply_plan(self, plan: Plan, started: list[int] | None = None) -> list[int]:
        """Commit what still holds of ``plan``; the ids started, added to ``started``
        (given: the caller's list, which keeps those committed before a failure)."""
        ...


class PassRunner(Protocol):
    """What the server's decide functions call: a ``Scheduler`` or a ``PacedScheduler``."""

    def run_pass(self, snapshot: ClusterSnapshot) -> PassResult: ...

    def schedule(self, snapshot: ClusterSnapshot) -> Plan: ...

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]: ...


class PassScheduler(Protocol):
    """What ``PacedScheduler`` runs its passes with: a ``Scheduler``, or a
    ``hal.scheduler.forked.ForkedScheduler`` deciding them in a process of their own."""

    @property
    def backfill_interval_s(self) -> float | None: ...

    @property
    def forecast_slice_s(self) -> float | None: ...

    def run_pass(
        self,
        snapshot: ClusterSnapshot,
        *,
        backfill: bool = ...,
        time_plugins: bool = ...,
        depth: int | None = ...,
        max_starts: int | None = ...,
    ) -> PassResult: ...

    def forecast(
        self, plan: Plan, *, go_on: Callable[[], bool] | None = ...
    ) -> tuple[PendingUpdate, ...]: ...


@dataclass(frozen=True, slots=True)
class PassBounds:
    """The main pass's bounds (Slurm's SchedulerParameters of the same names, ADR 0029).

    ``queue_depth`` (default_queue_depth): a pass that is not full looks at the first
    this many pending jobs in queue order, the others keep the reasons and expected
    starts the last pass that looked at them gave (0: every pass full); a full pass
    every ``sched_interval_s`` (sched_interval) and whenever backfill is due (it plans
    the whole queue); ``max_starts`` (sched_max_job_start): every pass passes over a
    partition's jobs once it has placed this many of them (0: no limit), and a pass that
    stopped so does not count as full, so the next one is full again; when backfill was
    due it runs the stage all the same (backfill's turn: ``Scheduler.run_pass``), so
    backfill still runs once per bf_interval while every pass reaches the cap. A full
    pass that did not stop decides what ``Scheduler.run_pass`` without bounds decides.
    The default: none."""

    queue_depth: int = 0
    sched_interval_s: float = 0.0
    max_starts: int = 0


class PacedScheduler:
    """``scheduler``'s passes with bf_interval honoured: the backfill stage runs when at
    least ``scheduler.backfill_interval_s`` has passed (on the snapshots' clock) since the
    last pass that ran it (one that stopped at ``max_job_starts`` too: its turn); the
    passes in between keep the expected starts it gave.

    Slurm runs its main scheduler on events and backfill every bf_interval for the same
    reason: a backfill pass plans the whole queue over time and costs more than a main
    pass. Set the plugin's ``interval_s = 0`` to backfill on every pass (the simulator's
    literature setting). Called from one thread at a time (the scheduler's worker).

    ``time_plugins_every_s``: one pass in that many seconds runs with its plugin calls
    timed (``PassResult.plugin_seconds``, the per-plugin metric); 0: every pass; None:
    never. A pass whose backfill stage is due (the heaviest) puts its timing off to the
    next pass once: if that pass has backfill due as well (``interval_s = 0``, or passes
    as far apart as the backfill interval) it is timed, backfill stage and all, so
    timing never stops.

    ``bounds``: the main pass's (``PassBounds``), replaced whole when the server is
    reconfigured, as ``scheduler`` is."""

    def __init__(
        self,
        scheduler: PassScheduler,
        *,
        time_plugins_every_s: float | None = None,
        bounds: PassBounds | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.last_backfill = -math.inf
        self.time_plugins_every_s = time_plugins_every_s
        self.last_timed = -math.inf
        self.timing_put_off = False  # the last due pass put its timing off to the next
        self.bounds = bounds or PassBounds()
        self.last_full = -math.inf
        self.stopped = False  # the last pass stopped at max_starts: the next one is full

    def backfill_due(self, now: float) -> bool:
        interval = self.scheduler.backfill_interval_s
        if interval is None:
            return False
        # a clock stepped backwards must not postpone backfilling until it catches up
        return now - self.last_backfill >= interval or now < self.last_backfill

    def full_due(self, now: float) -> bool:
        """Whether the next pass looks at every pending job (sched_interval elapsed)."""
        bounds = self.bounds
        return (
            not bounds.queue_depth
            or now - self.last_full >= bounds.sched_interval_s
            or now < self.last_full
        )

    def run_pass(self, snapshot: ClusterSnapshot) -> PassResult:
        now = snapshot.now
        due = self.backfill_due(now)
        full = due or self.stopped or self.full_due(now)
        every = self.time_plugins_every_s
        timed = every is not None and (now - self.last_timed >= every or now < self.last_timed)
        # (not a pass that runs the backfill stage, the heaviest, when passes are timed
        # one in a while: a timed pass costs up to twice its CPU, and on backfill's turn
        # at 10,000 nodes it was the longest pass; the next pass is timed instead), but
        # once only: with backfill due on every pass, none would ever be timed
        if timed and due and every and not self.timing_put_off:
            timed, self.timing_put_off = False, True
        if timed:
            self.last_timed, self.timing_put_off = now, False
        result = self.scheduler.run_pass(
            snapshot,
            backfill=due,
            time_plugins=timed,
            depth=None if full else self.bounds.queue_depth,
            max_starts=self.bounds.max_starts or None,
        )
        if due:  # (a pass that stopped at max_starts ran the stage too: backfill's turn)
            self.last_backfill = now
        # (one stopped at max_starts: the next one is full, though backfill is not due)
        self.stopped = bool(result.capped)
        if full and result.complete:
            self.last_full = now
        return result

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        return self.run_pass(snapshot).plan

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]:
        """The next slice of the forecast: jobs planned for bf_yield_interval (one at
        least) on the process's clock, which the pure ``Scheduler`` does not read."""
        budget = self.scheduler.forecast_slice_s
        if budget is None:
            return self.scheduler.forecast(plan)
        deadline = time.perf_counter() + budget
        return self.scheduler.forecast(plan, go_on=lambda: time.perf_counter() < deadline)


@dataclass(slots=True)
class CycleStats:
    """What the last cycle took, as its hooks (``SchedulerService.on_cycle``) read it.

    ``last_duration_s``: the whole cycle's decision work, the pass and the forecast slice
    after it (what paces the next cycle); ``last_pass_s``: the pass alone (its main loop
    and, when due, its backfill stage: Slurm's main and backfill schedulers in one);
    ``last_forecast_s``: the forecast slice the cycle ran after applying the plan (None:
    it ran none)."""

    cycles: int = 0
    last_duration_s: float = 0.0
    last_pass_s: float = 0.0
    last_forecast_s: float | None = None
    last_pending: int = 0
    last_started: int = 0
    total_started: int = 0
    # of ``last_pass_s``: how long the pass waited for a worker thread before it began
    # (``last_pass_wait_s``) and the CPU its thread ran (``last_pass_cpu_s``; the rest
    # of its time the thread waited for the interpreter, which the event loop shares,
    # or for the machine); ``last_pass_handback_s``: from the pass's end on its thread
    # to the event loop taking its plan back (the loop busy with other work);
    # ``last_pass_began``: when it was handed to the worker
    # (``time.perf_counter``); ``last_snapshot_s``: the snapshot and its related jobs
    # before it, ``last_apply_s``: the writing of its plan after it (on the event loop)
    last_pass_wait_s: float = 0.0
    last_pass_cpu_s: float = 0.0
    last_pass_handback_s: float = 0.0
    last_pass_began: float = 0.0
    last_snapshot_s: float = 0.0
    last_apply_s: float = 0.0


class SchedulerService:
    """``decide`` runs a pass; ``forecast`` (a ``PassRunner``'s) works out the forecast
    starts of a plan that has some (``Plan.forecasting``) once it is applied: None, a
    plan's forecast is never asked for."""

    def __init__(
        self,
        host: SchedulerHost,
        decide: Callable[[ClusterSnapshot], Plan],
        *,
        forecast: Callable[[Plan], tuple[PendingUpdate, ...]] | None = None,
        interval_s: float = 1.0,
        debounce_s: float = 0.01,
    ) -> None:
        self.host = host
        self.decide = decide
        self.forecast = forecast
        self.interval_s = interval_s
        self.debounce_s = debounce_s
        self.stats = CycleStats()
        self.on_cycle: list[Callable[[CycleStats, ClusterSnapshot, Plan], None]] = []
        # True: no pass runs, nothing starts (``hal up`` stopping its cluster with its
        # jobs: a pending job started on the CPUs a cancelled one gave back would be
        # left running when the agents stop)
        self.paused = False
        # clear while ``decide`` runs (on the worker thread, or in a forked process the
        # thread waits for): work on the event loop that could hold the interpreter for
        # seconds gives way, or waits for it (``hal.api.job_list``)
        self.undecided = asyncio.Event()
        self.undecided.set()

    @property
    def deciding(self) -> bool:
        """Whether a pass is being decided (``undecided`` clear)."""
        return not self.undecided.is_set()

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        pending_work = True
        unavailable = False  # the last cycle found the database away
        while not stop.is_set():
            timeout = self.interval_s if pending_work else None
            try:
                await asyncio.wait_for(self.host.changed.wait(), timeout=timeout)
                await asyncio.sleep(max(self.debounce_s, min(1.0, self.stats.last_duration_s)))
            except TimeoutError:
                pass
            if stop.is_set():
                break
            self.host.changed.clear()
            try:
                pending_work = await self.cycle(loop)
                unavailable = False
            except Unavailable as err:
                # the database is away (its outage is logged where it is seen): the
                # plan's changes before the one that failed are committed and launched
                # (counted in ``stats``), its others not; the pass runs again every
                # interval until it is back and places those again
                if not unavailable:
                    log.warning("scheduling paused: %s", err)
                unavailable = pending_work = True
            except Exception:
                # a failed cycle must not kill the scheduler; the next change retries
                log.exception("scheduling cycle failed")
                pending_work = True

    def _timed_decide(self, snap: ClusterSnapshot) -> tuple[Plan, float, float, float]:
        """``decide`` on the worker thread: its plan, when it began and ended
        (``perf_counter``) and the CPU seconds its thread ran."""
        began, cpu = time.perf_counter(), time.thread_time()
        plan = self.decide(snap)
        cpu = time.thread_time() - cpu
        return plan, began, time.perf_counter(), cpu

    async def cycle(self, loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """One pass; returns whether pending jobs remain."""
        loop = loop or asyncio.get_running_loop()
        # nothing pending: no snapshot (it sorts every node when one changed; nodes
        # registering woke a cycle every few milliseconds, each sorting up to 10,000)
        if self.paused or not self.host.has_pending():
            return False
        snapped = time.perf_counter()
        snap = await self.host.fill_related(self.host.snapshot())
        if not snap.pending:
            return False
        stats = self.stats
        started = time.perf_counter()
        self.undecided.clear()
        try:
            plan, began, ended, cpu = await loop.run_in_executor(None, self._timed_decide, snap)
        finally:
            self.undecided.set()
        back = time.perf_counter()
        stats.last_duration_s = stats.last_pass_s = back - started
        stats.last_pass_handback_s = max(0.0, back - ended)
        stats.last_pass_began, stats.last_snapshot_s = started, started - snapped
        stats.last_pass_wait_s, stats.last_pass_cpu_s = max(0.0, began - started), cpu
        stats.last_forecast_s = None
        applied: list[int] = []
        try:
            await self.host.apply_plan(plan, applied)
        finally:  # (a plan applied in part: its changes before the failed one started)
            stats.last_started = len(applied)
            stats.total_started += len(applied)
            stats.last_apply_s = time.perf_counter() - started - stats.last_pass_s
        if plan.forecasting and self.forecast is not None:  # after the starts: only shown
            began = time.perf_counter()
            updates = await loop.run_in_executor(None, self.forecast, plan)
            stats.last_forecast_s = time.perf_counter() - began
            stats.last_duration_s += stats.last_forecast_s
            if updates:
                await self.host.apply_plan(Plan(plan.revision, updates=updates))
        self.stats.cycles += 1
        self.stats.last_pending = len(snap.pending)
        for hook in self.on_cycle:
            hook(self.stats, snap, plan)
        return len(snap.pending) > len(applied)
