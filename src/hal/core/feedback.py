"""Application feedback: the figures a running job reports about itself (samples per
second, request latency ...), and which way each is better (docs/feedback.md).

What is checked here is the shape of a report and of a goal list, and how a metric's
series stays bounded; the token, the rate limit and the storage are the server's
(``hal.server.feedback``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hal.core.errors import InvalidRequest, Unauthenticated

MAX_METRICS = 16  # per report, and per job in all
MAX_NAME = 64
MAX_POINTS = 1000  # kept per metric; beyond, older points are thinned (``add_point``)
GOALS = ("max", "min")
ENV_TOKEN = "HAL_FEEDBACK_TOKEN"  # the job's token, in its environment
_PREFIX = "halfb_"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_name(name: str, field: str = "metrics") -> str:
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"metric name {name[:80]!r} is not allowed: use letters, digits and '_' (not "
            f"first), at most {MAX_NAME} characters, e.g. samples_per_s",
            field=field,
        )
    return name


def check_report(metrics: Mapping[str, float]) -> dict[str, float]:
    """The report's metrics, checked: 1 to ``MAX_METRICS`` names as ``check_name``
    takes them, each a finite number. Raises ``InvalidRequest`` naming the first fault."""
    if not metrics:
        raise InvalidRequest("a report needs at least one metric, e.g. samples_per_s=1830")
    if len(metrics) > MAX_METRICS:
        raise InvalidRequest(
            f"{len(metrics)} metrics in one report; at most {MAX_METRICS}", field="metrics"
        )
    found: dict[str, float] = {}
    for name, value in metrics.items():
        check_name(name)
        # bool is an int to Python; a report of True is a mistake, not 1
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidRequest(f"metric {name}: {value!r} is not a number", field="metrics")
        if not math.isfinite(value):
            raise InvalidRequest(f"metric {name}: {value} is not a finite number", field="metrics")
        found[name] = float(value)
    return found


def parse_goals(texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--feedback-goal=samples_per_s:max,latency_ms:min`` (each entry may list several,
    comma-separated) → ((name, "max"|"min"), ...) in the order given; a name twice or a
    goal other than max/min is refused."""
    goals: dict[str, str] = {}
    for text in texts:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, goal = part.partition(":")
            name, goal = name.strip(), goal.strip().lower()
            if not sep or goal not in GOALS:
                raise InvalidRequest(
                    f"--feedback-goal: {part!r} is not NAME:max or NAME:min "
                    "(e.g. samples_per_s:max,latency_ms:min)",
                    field="feedback_goal",
                )
            check_name(name, "feedback_goal")
            if name in goals:
                raise InvalidRequest(
                    f"--feedback-goal: {name} is given twice", field="feedback_goal"
                )
            goals[name] = goal
    if len(goals) > MAX_METRICS:
        raise InvalidRequest(
            f"--feedback-goal: {len(goals)} metrics; at most {MAX_METRICS}",
            field="feedback_goal",
        )
    return tuple(goals.items())


def format_goals(goals: Sequence[tuple[str, str]]) -> str:
    return ",".join(f"{n}:{g}" for n, g in goals)


@dataclass(frozen=True, slots=True)
class FeedbackSeries:
    """One metric of one job: every value it reported (``count``), the latest, and a
    bounded series of (time, value) points, oldest first. Past ``MAX_POINTS`` the oldest
    half is thinned (every other point dropped, the first kept), so a long run keeps its
    whole span at a coarser grain, its recent points in full, and only values it did
    report (a mean of two would be a value no one measured)."""

    job_id: int
    metric: str
    count: int
    last_time: float
    last_value: float
    points: tuple[tuple[float, float], ...]

    def add_point(self, time: float, value: float, limit: int = MAX_POINTS) -> FeedbackSeries:
        points = [*self.points, (time, value)]
        if len(points) > limit:
            half = len(points) // 2
            old, recent = points[:half], points[half:]
            points = old[::2] + recent  # every other one of the older half
        return FeedbackSeries(self.job_id, self.metric, self.count + 1, time, value, tuple(points))

    @staticmethod
    def first(job_id: int, metric: str, time: float, value: float) -> FeedbackSeries:
        return FeedbackSeries(job_id, metric, 1, time, value, ((time, value),))


def job_token(key: bytes, job_id: int, attempt: int) -> str:
    """The token of run ``attempt`` of job ``job_id``."""
    mac = hmac.new(key, f"feedback:{job_id}.{attempt}".encode(), hashlib.sha256).digest()
    return _PREFIX + base64.urlsafe_b64encode(mac).decode().rstrip("=")


def check_token(key: bytes, job_id: int, attempt: int, authorization: str | None) -> None:
    """Raise ``Unauthenticated`` unless ``authorization`` is ``Bearer <token>`` of
    run ``attempt`` of job ``job_id``."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthenticated(
            f"missing token: a job reports with 'Authorization: Bearer ${ENV_TOKEN}' "
            "(hal feedback and hal.feedback.report send it)"
        )
    given = authorization[7:].strip()
    if not hmac.compare_digest(given.encode(), job_token(key, job_id, attempt).encode()):
        raise Unauthenticated(
            f"this token is not job {job_id}'s: a job reports only for itself, "
            f"with the {ENV_TOKEN} of its current run"
        )
