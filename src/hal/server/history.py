"""``find_jobs``: the jobs ``sacct`` and ``GET /v1/jobs?history`` ask for, read from the
store and shown as the mirror has them while they are still there."""

from __future__ import annotations

import re
from collections.abc import Iterable

from hal.core.errors import InvalidRequest
from hal.core.job import Job
from hal.core.states import JobState
from hal.state.cluster import Cluster
from hal.state.mirror import array_indices
from hal.wire.bounds import INT64_MAX


def _fits_sql(ident: str) -> bool:
    """Whether each number in ``ident`` (``123``, ``123_4``, ``123+1``) fits the
    database's 64-bit integers; what is not a number is left to the caller to refuse."""
    try:
        return all(abs(int(part)) <= INT64_MAX for part in re.split(r"[+_]", ident))
    except ValueError:
        return True


async def find_jobs(
    cluster: Cluster,
    ids: Iterable[str],
    users: set[str],
    names: set[str],
    states: set[JobState] | None,
    partitions: set[str],
    start_after: float | None,
    end_before: float | None,
    limit: int,
) -> list[Job]:
    """The stored jobs ``ids`` (``123``, ``123_4``, ``123_[1-3]``, ``123+1``) name, of
    ``users``/``names``/``states``/``partitions`` (empty: any) that ran in the window,
    at most ``limit``: as ``sacct`` lists them."""
    plain: list[int] = []
    arrays: list[int] = []
    elements: list[tuple[int, list[range]]] = []  # (array id, indices) asked
    het_parts: dict[int, tuple[int, int]] = {}  # job id → (het job id, offset) asked
    asked = list(ids)
    # an id past 64 bits: no job has it, and the database would fail on it
    fitting = [ident for ident in asked if _fits_sql(ident)]
    if asked and not fitting:
        return []
    for ident in fitting:
        try:
            if "+" in ident:  # ``123+1``: a het job component (consecutive ids)
                het_id, offset = (int(x) for x in ident.split("+", 1))
                het_parts[het_id + offset] = (het_id, offset)
                plain.append(het_id + offset)
            elif "_" in ident:  # ``123_4``, ``123_[1-3]``: as the mirror reads them
                base, idx = ident.split("_", 1)
                elements.append((int(base), array_indices(idx)))
                arrays.append(int(base))
            else:
                plain.append(int(ident))
                arrays.append(int(ident))
        except ValueError as err:
            raise InvalidRequest(f"invalid job id {ident!r}", field="job_id") from err
    store = cluster.store

    def query(ids: list[int], array_ids: list[int], limit: int | None) -> list[Job]:
        return store.history(
            ids=ids,
            array_ids=array_ids,
            users=sorted(users),
            names=sorted(names),
            states=sorted(s.value for s in states) if states else (),
            partitions=sorted(partitions),
            start_after=start_after,
            end_before=end_before,
            limit=limit,
        )

    # with array elements asked for, the whole arrays are read and the limit counts
    # the elements kept (applied by SQL, it kept the first elements, then dropped
    # them: ``12_3`` with limit 1 found nothing)
    found = await cluster.db(query, plain, arrays, None if elements else limit)
    # A job still in memory is shown as memory has it: a pending job's reason and
    # expected start are advisory, kept there and not written per pass, so the stored
    # row would say WaitingForScheduling where squeue says DependencyNeverSatisfied.
    mirror = cluster.jobs
    found = [mirror.get(j.id, j) for j in found]
    if het_parts:
        found = [
            j
            for j in found
            if j.id not in het_parts
            or (
                j.spec.het is not None and het_parts[j.id] == (j.spec.het.job_id, j.spec.het.offset)
            )
        ]
    # ``123`` of a het job: every component (their ids follow component 0's)
    more = [
        i
        for j in found
        if j.spec.het is not None and j.spec.het.offset == 0 and j.id not in het_parts
        for i in range(j.id + 1, j.id + j.spec.het.size)
    ]
    if more:
        seen = {j.id for j in found}
        extra = await cluster.db(query, more, [], limit)
        found += [j for j in extra if j.id not in seen and j.spec.het is not None]
        found.sort(key=lambda j: j.id)
    if elements:
        found = [
            j
            for j in found
            if j.id in plain
            or (j.array_job_id in plain)
            or any(
                j.array_job_id == base
                and j.array_task_id is not None
                and any(j.array_task_id in r for r in indices)
                for base, indices in elements
            )
        ][:limit]
    return found
