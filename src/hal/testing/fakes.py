"""Fake plugins for framework tests: each serves one extension point and does one
obvious thing, so a test can wire exactly the behaviour it pins down."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import FilterResult, FloatArray, IndexArray
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
