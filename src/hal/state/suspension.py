"""The ``job.extra`` record of a job's suspensions (``scontrol suspend``, or a preemptor
in mode ``suspend``): when the current one began and the seconds of the earlier ones, so
run times can leave them out (``hal.api.convert.suspended_seconds``)."""

from __future__ import annotations

SUSPENDED_AT = "suspended_at"
SUSPENDED_S = "suspended_s"


def suspension(extra: dict[str, str], now: float) -> dict[str, str]:
    """``extra`` after a suspend (records when) or a resume (adds the time suspended)."""
    since = extra.get(SUSPENDED_AT)
    if since is None:
        return {**extra, SUSPENDED_AT: repr(now)}
    out = {k: v for k, v in extra.items() if k != SUSPENDED_AT}
    out[SUSPENDED_S] = repr(float(extra.get(SUSPENDED_S, 0.0)) + max(0.0, now - float(since)))
    return out
