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


# -- --feedback-metrics: the agent scrapes the job's own Prometheus endpoint -----------
SCRAPE_PREFIX = "hal_feedback_"  # without a list of names: these gauges, the prefix dropped
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """``--feedback-metrics=URL[#name,...]``: where the job serves its metrics (on its
    own node), and the series to report; none named: every gauge ``hal_feedback_NAME``
    as ``NAME``."""

    url: str
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.url + ("#" + ",".join(self.names) if self.names else "")


def parse_scrape(text: str) -> ScrapeTarget:
    """Check ``--feedback-metrics``: an http(s) URL on a loopback address (the agent
    reads it on the job's node; nothing else may be reached in the job's name), and an
    optional ``#name,name`` of at most ``MAX_METRICS`` metric names."""
    import ipaddress
    from urllib.parse import urlsplit

    def bad(why: str) -> InvalidRequest:
        return InvalidRequest(
            f"--feedback-metrics: {text[:200]!r} {why} (e.g. "
            "http://localhost:9100/metrics or http://127.0.0.1:8000/metrics#samples_per_s)",
            field="feedback_metrics",
        )

    raw, _, fragment = text.strip().partition("#")
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as err:
        raise bad(f"is not a URL ({err})") from err
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad("is not an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise bad("carries a user or password; serve the metrics without one")
    host = parts.hostname.lower()
    if host not in _LOOPBACK_NAMES:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise bad(
                "is not on the job's own node: the agent scrapes loopback addresses only "
                "(localhost, 127.0.0.0/8, [::1]); have the job listen on one"
            )
    if port == 0:
        raise bad("names port 0")
    names = tuple(n.strip() for n in fragment.split(",") if n.strip())
    for name in names:
        check_name(name, "feedback_metrics")
    if len(set(names)) != len(names):
        raise bad("names a metric twice")
    if len(names) > MAX_METRICS:
        raise bad(f"names {len(names)} metrics; at most {MAX_METRICS}")
    return ScrapeTarget(raw, names)


def pick_scraped(text: str, names: Sequence[str]) -> dict[str, float]:
    """The values to report from a Prometheus text page: each of ``names`` (a sample of
    that name, the one without labels where there is one, else the first), or, with no
    names, each gauge ``hal_feedback_NAME`` as ``NAME``; at most ``MAX_METRICS``, finite
    values only. Raises ``ValueError`` on a page that is not Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = set(names)
    found: dict[str, float] = {}
    labelled: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if names:
                if sample.name not in wanted:
                    continue
                name = sample.name
            elif family.type == "gauge" and sample.name.startswith(SCRAPE_PREFIX):
                name = sample.name[len(SCRAPE_PREFIX) :]
                if len(name) > MAX_NAME or not _NAME.fullmatch(name):
                    continue
            else:
                continue
            value = float(sample.value)
            if not math.isfinite(value):
                continue
            if sample.labels:
                labelled.setdefault(name, value)
            else:
                found.setdefault(name, value)
    for name, value in labelled.items():
        found.setdefault(name, value)
    return dict(sorted(found.items())[:MAX_METRICS])
