"""Taking a new ``hal.toml`` while the server runs (``scontrol reconfigure``).

Under the cluster's lock, so no job changes partition or state meanwhile: a partition
the new configuration drops must be unused (no pending or running job in it or listing
it, no reservation in it), as Slurm refuses to delete a partition in use; then the
``config.reconfigured`` event is committed, and only once it is durable does the mirror
(``Cluster.configure``) and the rest of the server (``apply``) take the configuration.
A refusal, or a database that cannot take the event, changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hal.config.model import HalConfig
from hal.core.errors import Conflict
from hal.state.store import EventRow

if TYPE_CHECKING:
    from hal.state.cluster import Cluster

RECONFIGURED = "config.reconfigured"
SHOWN_JOBS = 20  # job ids named in a refusal (then "and N more")


def check_partitions_unused(cluster: Cluster, removed: list[str]) -> None:
    """Refuse (``Conflict``) when a partition in ``removed`` holds a pending or running
    job, or a reservation, naming them."""
    gone = set(removed)
    problems: list[str] = []
    for name in removed:
        ids = sorted(
            j.id
            for j in cluster.unfinished.values()
            if j.partition == name or name in j.spec.partitions
        )
        if ids:
            shown = ", ".join(map(str, ids[:SHOWN_JOBS]))
            more = f" and {len(ids) - SHOWN_JOBS} more" if len(ids) > SHOWN_JOBS else ""
            problems.append(f"partition {name} is in use by job(s) {shown}{more}")
    for r in cluster.reservations.values():
        if r.partition in gone:
            problems.append(f"partition {r.partition} is in use by reservation {r.name}")
    if problems:
        raise Conflict(
            "reconfigure: " + "; ".join(problems) + ". Nothing was changed: let those jobs "
            "end, cancel them or move them (scontrol update JobId=ID Partition=OTHER), "
            "or keep the partition in the file (up = false stops it starting jobs)",
            field="partitions",
        )


async def take_config(
    cluster: Cluster,
    config: HalConfig,
    removed: list[str],
    data: Mapping[str, object],
    apply: Callable[[], None],
) -> None:
    """Give ``cluster`` and, through ``apply``, the rest of the server ``config``, with
    the ``config.reconfigured`` event (``data``: what changed), once no partition in
    ``removed`` is in use."""
    async with cluster.transaction() as change:
        check_partitions_unused(cluster, removed)
        event = EventRow(cluster.clock.now(), RECONFIGURED, data=dict(data))
        await change.commit([], [event])
        cluster.configure(config)
        apply()
        cluster.changed.set()  # a pass with the new partitions and limits at once
