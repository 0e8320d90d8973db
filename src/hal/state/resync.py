"""Changes whose outcome is unknown, and submissions sent again with the same key.

PostgreSQL lost at the COMMIT of a change leaves it unknown whether the change landed
(``CommitOutcomeUnknown``): the client gets a 503 ``commit_outcome_unknown`` and the
mirror is left as it was. The jobs that change wrote are *in doubt*, and so are the
reservations if it could have written them: before the next change (``Cluster._commit``,
``Cluster.submit``) and at every housekeeping tick, ``reconcile`` reads them back and the
mirror takes what the store holds, so a submission that did land is scheduled now (not
only after a restart), a start or a cancel that landed reaches its agent, and a
reservation created, changed or deleted is what the scheduler honours.

A client that sent its submission with an ``Idempotency-Key`` learns the outcome by
sending it again: ``replayed`` answers with the jobs of the first request when it landed
(docs/architecture.md, "Sending a submission again").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from hal.core.errors import Conflict
from hal.core.states import JobState
from hal.state.store import SubmitKey

if TYPE_CHECKING:
    from hal.state.cluster import Cluster, Submitted

KEEP_KEYS_S = 86_400.0  # a key is remembered for a day, as payment APIs do


def doubt(cluster: Cluster, ids: Iterable[int], *, reservations: bool = False) -> None:
    """The change that wrote these jobs (and, with ``reservations``, perhaps advance
    reservations) may or may not have landed. Its events may have landed too: the
    memory's recent events no longer tell every event after the latest id they hold, so
    event streams read the store until ``reconcile``."""
    cluster.in_doubt.update(ids)
    cluster.reservations_in_doubt |= reservations
    cluster.recent_events.clear()


async def reconcile(cluster: Cluster) -> None:
    """The mirror takes the stored rows of the jobs in doubt, and the stored
    reservations if they are in doubt (the caller holds the cluster's lock); the jobs'
    agents are told what a change that landed asks of them."""
    from hal.state import agents

    if cluster.reservations_in_doubt:
        stored_reservations = await cluster.db(cluster.store.load_reservations)
        cluster.reservations = {r.name: r for r in stored_reservations}
        cluster.reservations_in_doubt = False
    ids = sorted(cluster.in_doubt)
    stored = await cluster.db(cluster.store.jobs_by_id, ids)
    revision = await cluster.db(cluster.store.revision)
    cluster.in_doubt.difference_update(ids)
    changed = [job for job in stored if cluster.jobs.get(job.id) != job]
    for job in changed:
        cluster._put(job)
    cluster.revision = max(cluster.revision, revision)
    for job in changed:
        if job.state is JobState.RUNNING and not job.launched:
            agents.send_launch(cluster, job)
        elif job.state is JobState.COMPLETING:
            agents.send_cancel(cluster, job, JobState.CANCELLED)
    await cluster._published([], changed)


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
