"""Application feedback on the wire (REST ``/v1/jobs/{id}/feedback``, ``hal feedback``,
``hal.feedback.report``; docs/feedback.md)."""

from __future__ import annotations

from pydantic import Field

from hal.wire.base import WireModel


class FeedbackReport(WireModel):
    """One report of a running job's: metric name → value (names of letters, digits and
    '_', at most 16, finite numbers)."""

    metrics: dict[str, float] = Field(max_length=64)


class FeedbackMetric(WireModel):
    name: str
    goal: str | None  # "max" or "min" as the job declared (--feedback-goal); None: none
    count: int  # reports of it so far
    latest: float
    latest_time: float  # Unix seconds
    # (time, value), oldest first; at most 1,000, the older half thinned beyond
    points: list[tuple[float, float]] = Field(default_factory=list)


class JobFeedback(WireModel):
    id: int  # the job's own id (an array task's too)
    job_id: str  # as squeue shows it: 12, 12_3
    metrics: list[FeedbackMetric] = Field(default_factory=list)  # by name


class FeedbackList(WireModel):
    """Several jobs' latest values (``GET /v1/feedback?jobs=1,2``, sacct -o Feedback)."""

    jobs: list[JobFeedback] = Field(default_factory=list)
