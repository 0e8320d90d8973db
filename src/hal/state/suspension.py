"""Recording a suspension or a resume in ``job.extra`` (the keys and how they are read:
``hal.core.suspension``)."""

from __future__ import annotations

from hal.core.suspension import SUSPENDED_AT, SUSPENDED_S

__all__ = ["SUSPENDED_AT", "SUSPENDED_S", "suspension"]


def suspension(extra: dict[str, str], now: float) -> dict[str, str]:
    """``extra`` after a suspend (records when) or a resume (adds the time suspended)."""
    since = extra.get(SUSPENDED_AT)
    if since is None:
        return {**extra, SUSPENDED_AT: repr(now)}
    out = {k: v for k, v in extra.items() if k != SUSPENDED_AT}
    out[SUSPENDED_S] = repr(float(extra.get(SUSPENDED_S, 0.0)) + max(0.0, now - float(since)))
    return out
