"""At most ``array_max_running`` elements of one array hold resources at a time.

The count is the elements running in the snapshot plus those placed earlier in this pass
(Reserve adds them), so a pass never overshoots the limit even when all elements fit.
"""

from __future__ import annotations

from collections import Counter

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import PreFilterPlugin, PreFilterWaiver, ReservePlugin
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.status import SUCCESS, Status, unschedulable

NAME = "arraythrottle"

# array_job_id → elements holding resources (snapshot + placed this pass).
RUNNING_ELEMENTS: StateKey[Counter[int]] = StateKey("arraythrottle.running_elements")


def _throttled(job: Job) -> bool:
    return job.array_job_id is not None and job.array_max_running > 0


class ArrayThrottle:
    name = NAME

    def _counts(self, ctx: PassContext) -> Counter[int]:
        counts = ctx.data.get(RUNNING_ELEMENTS)
        if counts is None:
            counts = Counter(
                r.array_job_id
                for r in ctx.running
                if r.array_job_id is not None and r.state.is_active
            )
            ctx.data.write(RUNNING_ELEMENTS, counts)
        return counts

    def lets_through(self, job: Job) -> bool:
        return not _throttled(job)

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        array_id = job.array_job_id  # (``_throttled`` inline: this runs for every job)
        if array_id is None or job.array_max_running <= 0:
            return SUCCESS
        running = self._counts(ctx)[array_id]
        if running >= job.array_max_running:
            return unschedulable(
                PendingReason.JOB_ARRAY_TASK_LIMIT,
                f"{running} of at most {job.array_max_running} elements running",
                NAME,
            )
        return SUCCESS

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        if _throttled(job) and job.array_job_id is not None:
            self._counts(ctx)[job.array_job_id] += 1
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        if _throttled(job) and job.array_job_id is not None:
            counts = self._counts(ctx)
            if counts[job.array_job_id] > 0:
                counts[job.array_job_id] -= 1


def new(args: PluginArgs) -> ArrayThrottle:
    reject_unknown_args(args, ())
    return ArrayThrottle()


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = ArrayThrottle
_WAIVER: type[PreFilterWaiver] = ArrayThrottle
_RESERVE: type[ReservePlugin] = ArrayThrottle
