"""Application feedback on the server: the job's token, the rate limit, the series kept.

A job reports with the token in its environment (``HAL_FEEDBACK_TOKEN``): an HMAC-SHA256
of its id and run (attempt) under a key of the server's, kept in the data directory
(``feedback.key``, mode 0600; a server without one makes a key per start, so its jobs'
tokens end with it). Nothing per job is stored: the server recomputes the token of the
job the path names and compares. A token is good for one run of one job: another job's,
or its own from before a requeue, is refused.

Each job has a token bucket (``RATE_BURST`` reports, refilled at ``RATE_PER_S``): a flood
is a 429 and stores nothing. The series are kept in the state store (``job_feedback``),
one row per job and metric, bounded (``hal.core.feedback.FeedbackSeries``), kept after the
job ends for sacct; the running jobs' latest values are held here for ``/metrics``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

from hal.core.clock import Clock
from hal.core.errors import Conflict, TooManyRequests
from hal.core.feedback import MAX_METRICS, FeedbackSeries, check_report, check_token, job_token
from hal.core.job import Job
from hal.core.states import JobState
from hal.state.cluster import Cluster

KEY_FILE = "feedback.key"
RATE_BURST = 20  # reports a job may send at once
RATE_PER_S = 1.0  # and then one a second, on average


def load_key(data_dir: Path | None) -> bytes:
    """The server's feedback key: ``data_dir/feedback.key`` (made, mode 0600, when
    missing), or a new random key for this process where there is no data directory."""
    if data_dir is None:
        return secrets.token_bytes(32)
    path = data_dir / KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if len(text) >= 32:
            return bytes.fromhex(text)
    key = secrets.token_bytes(32)
    data_dir.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(key.hex() + "\n")
    return key


class RateLimit:
    """A token bucket per job: ``burst`` reports at once, refilled at ``per_s``."""

    def __init__(self, clock: Clock, burst: int = RATE_BURST, per_s: float = RATE_PER_S) -> None:
        self.clock = clock
        self.burst = burst
        self.per_s = per_s
        self._buckets: dict[int, tuple[float, float]] = {}  # job → (tokens, as of)

    def take(self, job_id: int) -> None:
        """Spend one report of ``job_id``'s, or raise ``TooManyRequests``."""
        now = self.clock.now()
        tokens, at = self._buckets.get(job_id, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + max(0.0, now - at) * self.per_s)
        if tokens < 1.0:
            wait = (1.0 - tokens) / self.per_s
            raise TooManyRequests(
                f"job {job_id} reports too often: at most {self.burst} at once and "
                f"{self.per_s:g} a second after; send again in {wait:.1f} s"
            )
        self._buckets[job_id] = (tokens - 1.0, now)

    def forget(self, keep: Sequence[int]) -> None:
        """Drop the buckets of jobs not in ``keep`` (they ended)."""
        wanted = set(keep)
        for job_id in [j for j in self._buckets if j not in wanted]:
            del self._buckets[job_id]


class FeedbackService:
    """Takes reports (``report``) and answers the series (``series``)."""

    def __init__(self, cluster: Cluster, key: bytes) -> None:
        self.cluster = cluster
        self.key = key
        self.limit = RateLimit(cluster.clock)
        # running jobs' latest values, for /metrics: job → metric → value
        self.latest: dict[int, dict[str, float]] = {}

    def token(self, job_id: int, attempt: int) -> str:
        return job_token(self.key, job_id, attempt)

    async def report(
        self, job: Job, authorization: str | None, metrics: Mapping[str, float]
    ) -> list[FeedbackSeries]:
        """Check and keep one report of ``job``'s; its series as they now are."""
        check_token(self.key, job.id, job.restarts, authorization)
        values = check_report(metrics)
        if job.state is not JobState.RUNNING:
            raise Conflict(
                f"job {job.display_id} is {job.state.value}: only a running job reports feedback",
                field="job",
            )
        self.limit.take(job.id)
        store = self.cluster.store
        kept = {s.metric: s for s in await self.cluster.db(store.job_feedback, [job.id])}
        if len(set(kept) | set(values)) > MAX_METRICS:
            raise Conflict(
                f"job {job.display_id} would have more than {MAX_METRICS} metrics; report "
                f"the ones it has ({', '.join(sorted(kept))})",
                field="metrics",
            )
        now = self.cluster.clock.now()
        changed = []
        for name, value in values.items():
            old = kept.get(name)
            new = (
                FeedbackSeries.first(job.id, name, now, value)
                if old is None
                else old.add_point(now, value)
            )
            changed.append(new)
            kept[name] = new
        await self.cluster.db(store.keep_job_feedback, changed)
        self.latest.setdefault(job.id, {}).update(values)
        self._prune()
        return [kept[m] for m in sorted(kept)]

    async def series(self, job_ids: Sequence[int]) -> list[FeedbackSeries]:
        """The kept series of ``job_ids``, by job and metric."""
        return await self.cluster.db(self.cluster.store.job_feedback, list(job_ids))

    def running_latest(self) -> dict[int, dict[str, float]]:
        """The running jobs' latest values (``/metrics``)."""
        self._prune()
        return {j: dict(v) for j, v in self.latest.items()}

    def _prune(self) -> None:
        jobs = self.cluster.jobs
        for job_id in list(self.latest):
            job = jobs.get(job_id)
            if job is None or job.state is not JobState.RUNNING:
                del self.latest[job_id]
        self.limit.forget(list(self.latest))
