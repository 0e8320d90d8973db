"""Fake plugins for framework tests: each serves one extension point and does one
obvious thing, so a test can wire exactly the behaviour it pins down."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping

import numpy as np

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.counted import Counts
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    CountedResourcePlugin,
    FilterPlugin,
    FilterResult,
    FloatArray,
    IndexArray,
    PermitPlugin,
    PreFilterPlugin,
    ReservePlugin,
    ScorePlugin,
)
from hal.scheduler.framework.keys import COUNTS_OVER_TIME, PLAN_END, PLAN_START
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SUCCESS, Status, unschedulable


class FakePreFilter:
    """Answers ``verdicts[job.id]``, SUCCESS for other jobs."""

    def __init__(self, name: str, verdicts: Mapping[int, Status]) -> None:
        self.name = name
        self.verdicts = dict(verdicts)

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        return self.verdicts.get(job.id, SUCCESS)


class FakeFilter:
    """Only the named nodes pass; too few gives ``reason``."""

    def __init__(
        self, name: str, allowed: Collection[str], reason: PendingReason = PendingReason.RESOURCES
    ) -> None:
        self.name = name
        self.allowed = frozenset(allowed)
        self.reason = reason

    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        return FilterResult(ctx.nodes.names_mask(self.allowed), self.reason)


class FixedScore:
    """Scores nodes by name (0 for unnamed nodes)."""

    def __init__(self, name: str, scores: Mapping[str, float]) -> None:
        self.name = name
        self.scores = dict(scores)

    def score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray:
        names = ctx.nodes.names
        return np.array([self.scores.get(names[i], 0.0) for i in feasible], dtype=np.float64)


class _Crash:
    def __init__(self, name: str, job_ids: Collection[int]) -> None:
        self.name = name
        self.job_ids = frozenset(job_ids)

    def _maybe_crash(self, job: Job) -> None:
        if job.id in self.job_ids:
            raise RuntimeError(f"{self.name} crashed on job {job.id}")


class CrashingPreFilter(_Crash):
    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        self._maybe_crash(job)
        return SUCCESS


class CrashingFilter(_Crash):
    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        self._maybe_crash(job)
        return FilterResult(np.ones(len(ctx.nodes), dtype=np.bool_))


class CrashingScore(_Crash):
    def score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray:
        self._maybe_crash(job)
        return np.zeros(len(feasible), dtype=np.float64)


class CrashingReserve(_Crash):
    def __init__(self, name: str, job_ids: Collection[int]) -> None:
        super().__init__(name, job_ids)
        self.unreserved: list[int] = []

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        self._maybe_crash(job)
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        self.unreserved.append(job.id)


class RecordingReserve:
    """Records every reserve/unreserve as ``("reserve", job_id)`` / ``("unreserve", id)``."""

    def __init__(self, name: str = "recorder") -> None:
        self.name = name
        self.calls: list[tuple[str, int]] = []

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        self.calls.append(("reserve", job.id))
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        self.calls.append(("unreserve", job.id))


class RejectingPermit:
    """Refuses to let the given jobs start (reason ``reason``)."""

    def __init__(
        self, name: str, job_ids: Collection[int], reason: PendingReason = PendingReason.PRIORITY
    ) -> None:
        self.name = name
        self.job_ids = frozenset(job_ids)
        self.reason = reason

    def permit(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        if job.id in self.job_ids:
            return unschedulable(self.reason, "permit refused", self.name)
        return SUCCESS


class FakeCounted:
    """A counted resource (``CountedResourcePlugin``) other than licenses: job ``id``
    holds ``holds[id]`` of counters whose cluster totals are ``totals``. Its PreFilter
    refuses a job whose counters are short now (running jobs' and this pass's, kept by
    Reserve), or, while backfill plans the job's run, anywhere in it (the framework's
    ``CountsOverTime`` under this plugin's name), saying from when they are free."""

    def __init__(
        self,
        name: str,
        totals: Mapping[str, int],
        holds: Mapping[int, Counts],
        reason: PendingReason = PendingReason.LICENSES,
    ) -> None:
        self.name = name
        self.totals = dict(totals)
        self.holds = dict(holds)
        self.reason = reason
        self._held: StateKey[Counter[str]] = StateKey(f"{name}.held")

    def counts(self, job: Job) -> Counts:
        return self.holds.get(job.id, ())

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        wanted = self.counts(job)
        if not wanted:
            return SUCCESS
        later = ctx.data.get(PLAN_START)
        if later is None and any(
            self._held_now(ctx)[name] + count > self.totals.get(name, 0) for name, count in wanted
        ):
            return unschedulable(self.reason, "short now", self.name)
        planned, end = ctx.data.get(COUNTS_OVER_TIME), ctx.data.get(PLAN_END)
        if planned is None or end is None:
            return SUCCESS
        start = ctx.now if later is None else later
        free_from = planned[self.name].earliest(wanted, self.totals, start, end - start)
        if free_from == start:
            return SUCCESS
        back = None if later is None else free_from
        return unschedulable(self.reason, "short over its run", self.name, earliest_start=back)

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        self._held_now(ctx).update(dict(self.counts(job)))
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        self._held_now(ctx).subtract(dict(self.counts(job)))

    def _held_now(self, ctx: PassContext) -> Counter[str]:
        held = ctx.data.get(self._held)
        if held is None:
            held = Counter()
            for running in ctx.running:
                held.update(dict(self.counts(running)))
            ctx.data.write(self._held, held)
        return held


# The extension points each fake serves, checked by mypy here (as the built-in plugins
# declare theirs): a fake that drifts from its Protocol fails the type check.
_FAKE_PRE_FILTER: type[PreFilterPlugin] = FakePreFilter
_FAKE_FILTER: type[FilterPlugin] = FakeFilter
_FIXED_SCORE: type[ScorePlugin] = FixedScore
_CRASHING_PRE_FILTER: type[PreFilterPlugin] = CrashingPreFilter
_CRASHING_FILTER: type[FilterPlugin] = CrashingFilter
_CRASHING_SCORE: type[ScorePlugin] = CrashingScore
_CRASHING_RESERVE: type[ReservePlugin] = CrashingReserve
_RECORDING_RESERVE: type[ReservePlugin] = RecordingReserve
_REJECTING_PERMIT: type[PermitPlugin] = RejectingPermit
_FAKE_COUNTED: type[CountedResourcePlugin] = FakeCounted
_FAKE_COUNTED_PRE_FILTER: type[PreFilterPlugin] = FakeCounted
_FAKE_COUNTED_RESERVE: type[ReservePlugin] = FakeCounted
