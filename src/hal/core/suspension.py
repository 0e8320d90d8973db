"""The ``job.extra`` record of a job's suspensions (``scontrol suspend``, or a preemptor
in mode ``suspend``): when the current one began and the seconds of the earlier ones. A
job's time limit does not count them (its agent moves the deadline by as much), so run
times, planned ends and overruns leave them out (``suspended_seconds``)."""

from __future__ import annotations

from collections.abc import Mapping

from hal.core.job import Job

SUSPENDED_AT = "suspended_at"
SUSPENDED_S = "suspended_s"


def suspended_seconds(job: Job, now: float) -> float:
    """What ``job`` has spent suspended until ``now`` (or its end, when it ended
    suspended)."""
    return suspended_in(job.extra, job.end_time if job.end_time is not None else now)


def suspended_in(extra: Mapping[str, str], until: float) -> float:
    """The seconds of suspension a job's ``extra`` records, the current one counted to
    ``until``."""
    if not extra:
        return 0.0
    total = float(extra.get(SUSPENDED_S, 0.0))
    since = extra.get(SUSPENDED_AT)
    if not since:
        return total
    return total + max(0.0, until - float(since))
