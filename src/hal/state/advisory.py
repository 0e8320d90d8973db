"""Pending reasons set outside the scheduler (the autoscaler's ``CloudBudget``).

Reasons are advisory, as the scheduler's are (``plan_applier``): kept in the mirror, not
written to the store, set under the cluster's lock so that no change reads half of them.
A reason goes only on a job still pending and not held; ``RESOURCES`` takes back only
``CLOUD_BUDGET`` (a reason someone else set since stays).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hal.core.states import JobState, PendingReason

if TYPE_CHECKING:
    from hal.state.cluster import Cluster


async def set_pending_reasons(cluster: Cluster, reasons: Mapping[int, PendingReason]) -> None:
    async with cluster.change():
        for job_id, reason in reasons.items():
            job = cluster.unfinished.get(job_id)
            if job is None or job.state is not JobState.PENDING or job.held:
                continue
            if reason is PendingReason.RESOURCES and job.reason is not PendingReason.CLOUD_BUDGET:
                continue
            if job.reason is not reason:
                cluster.jobs[job_id] = cluster.unfinished[job_id] = job.evolve(reason=reason)
