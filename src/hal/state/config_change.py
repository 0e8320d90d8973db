"""Taking a new ``hal.toml`` while the server runs (``scontrol reconfigure``).

Under the cluster's lock, so no job changes partition or state meanwhile: a partition
the new configuration drops must be unused (no pending or running job in it or listing
it, no reservation in it), as Slurm refuses to delete a partition in use, and so must a
QoS or an account (no pending or running job naming it); then the
``config.reconfigured`` event is committed, and only once it is durable does the mirror
(``Cluster.configure``) and the rest of the server (``apply``) take the configuration.
A refusal, or a database that cannot take the event, changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hal.config.model import HalConfig
from hal.core.errors import Conflict, InvalidRequest
from hal.state.associations import Associations
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
            problems.append(f"partition {name} is in use by job(s) {_ids(ids)}")
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


def check_associations_kept(cluster: Cluster, config: HalConfig) -> None:
    """Refuse (``Conflict``) when a pending or running job names a QoS or an account that
    ``config`` drops, or that its user may no longer use, naming them: as Slurm's
    sacctmgr refuses to delete them while jobs are active. (Taken, the job would run
    under a QoS and an account no limit and no share of the new configuration knows.)"""
    associations = Associations(config.priority)
    problems: dict[str, list[int]] = {}
    for job in cluster.unfinished.values():
        try:
            associations.check(job.spec, "")
        except InvalidRequest as err:
            spec = job.spec
            what = (
                f"QoS {spec.qos}"
                if err.field == "qos"
                else f"account {spec.account} (of user {spec.user})"
            )
            problems.setdefault(what, []).append(job.id)
    if problems:
        raise Conflict(
            "reconfigure: "
            + "; ".join(f"{what} is in use by job(s) {_ids(ids)}" for what, ids in problems.items())
            + ". Nothing was changed: let those jobs end, cancel them or move them "
            "(scontrol update JobId=ID QOS=OTHER or Account=OTHER), or keep them in the file",
            field="priority",
        )


def _ids(ids: list[int]) -> str:
    ids = sorted(ids)
    more = f" and {len(ids) - SHOWN_JOBS} more" if len(ids) > SHOWN_JOBS else ""
    return ", ".join(map(str, ids[:SHOWN_JOBS])) + more


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
    async with cluster.change() as change:
        check_partitions_unused(cluster, removed)
        check_associations_kept(cluster, config)
        # Slurm 22.05.8's reconfigure puts back slurm.conf's partitions: scontrol
        # update's changes to them go (``hal.state.partitions``)
        undone = sorted(cluster.partition_overrides)
        event = EventRow(
            cluster.clock.now(), RECONFIGURED, data={**data, "partition_updates_undone": undone}
        )
        await change.commit([], [event], extra=lambda tx: tx.clear_partition_overrides())
        cluster.configure(config)
        apply()
        cluster.changed.set()  # a pass with the new partitions and limits at once
