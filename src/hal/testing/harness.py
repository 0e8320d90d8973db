"""Run the real scheduler in tests and read its plan back as plain dicts."""

from __future__ import annotations

from collections.abc import Sequence

from hal.core.job import Allocation
from hal.core.states import PendingReason
from hal.scheduler.framework.interfaces import Plugin
from hal.scheduler.framework.profile import Profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.framework.snapshot import Plan


def scheduler_with(*plugins: Plugin, weights: dict[str, float] | None = None) -> Scheduler:
    """A scheduler over exactly ``plugins`` (one must be a QueueSort)."""
    return Scheduler(Profile.from_plugins(plugins, name="test", score_weights=weights))


def placed_nodes(plan: Plan) -> dict[int, tuple[str, ...]]:
    """job id → node names, for every placement."""
    return {p.job_id: p.allocation.nodes for p in plan.placements}


def expected_starts(scheduler: Scheduler, plan: Plan) -> dict[int, float | None]:
    """job id → expected start, for every update of ``plan``, the forecast's
    (``scheduler.forecast(plan)``, as the server applies it after the plan) included;
    ``plan`` must be the last pass of ``scheduler``."""
    found = {u.job_id: u.expected_start for u in plan.updates}
    found.update((u.job_id, u.expected_start) for u in scheduler.forecast(plan))
    return found


def allocations(plan: Plan) -> dict[int, Allocation]:
    return {p.job_id: p.allocation for p in plan.placements}


def reasons(plan: Plan, jobs: Sequence[int] | None = None) -> dict[int, PendingReason]:
    """job id → new pending reason, for every update (or only ``jobs``)."""
    found = {u.job_id: u.reason for u in plan.updates}
    if jobs is None:
        return found
    return {j: found[j] for j in jobs if j in found}
