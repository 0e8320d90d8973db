"""Changes whose outcome is unknown, and submissions sent again with the same key.

PostgreSQL lost at the COMMIT of a change leaves it unknown whether the change landed
(``CommitOutcomeUnknown``): the client gets a 503 ``commit_outcome_unknown`` and the
mirror is left as it was. The jobs that change wrote are *in doubt*, and so are the
reservations and node states if it could have written them. Whoever takes the cluster's
lock next (``ReconcilingLock``: the next change, or the housekeeping tick) first reads
them back and the mirror takes what the store holds, so no change is decided on memory
that may lag the store: a submission that did land is scheduled now (not only after a
restart), a start, a suspend, a resume or an end that landed reaches its agent, and a
reservation or a drain is what the scheduler honours.

A client that sent its submission with an ``Idempotency-Key`` learns the outcome by
sending it again: ``replayed`` answers with the jobs of the first request when it landed
(docs/architecture.md, "Sending a submission again").
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from hal.core.errors import Conflict
from hal.core.job import Job
from hal.core.states import JobState
from hal.state.store import SubmitKey

if TYPE_CHECKING:
    from hal.state.cluster import Cluster, Submitted

KEEP_KEYS_S = 86_400.0  # a key is remembered for a day, as payment APIs do


def doubt(cluster: Cluster, ids: Iterable[int], *, others: bool = False) -> None:
    """The change that wrote these jobs (and, with ``others``, perhaps reservations or
    nodes) may or may not have landed. Its events may have landed too: the memory's
    recent events no longer tell every event after the latest id they hold, so event
    streams read the store until ``reconcile``."""
    cluster.in_doubt.update(ids)
    cluster.others_in_doubt |= others
    cluster.recent_events.clear()


class ReconcilingLock:
    """The cluster's lock. Whoever takes it while something is in doubt reconciles
    first, so every change starts from memory that agrees with the store; if the store
    cannot be read, the taker gets its ``DatabaseUnavailable`` and changes nothing."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> None:
        await self._lock.acquire()
        if self._cluster.doubtful:
            try:
                await reconcile(self._cluster)
            except BaseException:
                self._lock.release()
                raise

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()


async def reconcile(cluster: Cluster) -> None:
    """The mirror takes the stored rows of what is in doubt (the caller holds the
    cluster's lock); the jobs' agents are told what a change that landed asks of them."""
    if cluster.others_in_doubt:
        reservations = await cluster.db(cluster.store.load_reservations)
        nodes = await cluster.db(cluster.store.load_nodes)
        cluster.reservations = {r.name: r for r in reservations}
        for stored in nodes:  # their state (drained, down); the rest is the agents'
            node = cluster.nodes.get(stored.name)
            if node is not None:
                cluster.nodes[stored.name] = node.evolve(
                    state=stored.state,
                    reason=stored.reason,
                    reason_user=stored.reason_user,
                    reason_time=stored.reason_time,
                )
        cluster.others_in_doubt = False
    ids = sorted(cluster.in_doubt)
    stored_jobs = await cluster.db(cluster.store.jobs_by_id, ids)
    revision = await cluster.db(cluster.store.revision)
    cluster.in_doubt.difference_update(ids)
    changed = [(cluster.jobs.get(job.id), job) for job in stored_jobs]
    changed = [(old, job) for old, job in changed if old != job]
    for _, job in changed:
        cluster.put(job)
    cluster.revision = max(cluster.revision, revision)
    for old, job in changed:
        _tell_agent(cluster, old, job)
    await cluster._published([], [job for _, job in changed])


def _tell_agent(cluster: Cluster, old: Job | None, job: Job) -> None:
    """What the change from ``old`` to ``job`` asks of the job's agent, as the route or
    the loop that made it would have sent it had it known the change landed."""
    from hal.state import agents

    was = old.state if old is not None else None
    if job.state is JobState.RUNNING and was in (None, JobState.PENDING):
        agents.send_launch(cluster, job)
    elif job.state is JobState.RUNNING and was is JobState.SUSPENDED:
        agents.send_signal(cluster, job, signal.SIGCONT)
    elif job.state is JobState.SUSPENDED and was is not JobState.SUSPENDED:
        agents.send_signal(cluster, job, signal.SIGSTOP)
    elif job.state is JobState.COMPLETING and was is not JobState.COMPLETING:
        agents.send_end(cluster, job)
    if old is not None and job.state.is_active and job.time_limit_s != old.time_limit_s:
        agents.send_limit(cluster, job)


def replayed(key: SubmitKey, found: tuple[str, list[tuple[int, int]]]) -> list[Submitted]:
    """What the first submission sent with ``key`` gave, if this one is the same."""
    from hal.state.cluster import Submitted

    digest, result = found
    if digest != key.digest:
        raise Conflict(
            f"Idempotency-Key {key.key!r} was used for a different submission; "
            "use a new key for a new submission"
        )
    return [Submitted(job_id, tuple(range(job_id, job_id + n))) for job_id, n in result]
