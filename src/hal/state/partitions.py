"""Partitions changed while the server runs (``scontrol update PartitionName=P ...``,
``PATCH /v1/partitions/{name}``; administrators).

hal.toml's ``[[partitions]]`` are what a start and ``scontrol reconfigure`` read. An
administrator's change at run time is an override over them, kept in the
``partition_overrides`` table so that it outlives a restart of the server, as
``slurmctld -R`` keeps its partitions. ``scontrol reconfigure`` drops every override
(``hal.state.config_change``): Slurm 22.05.8's reconfigure puts each partition back as
slurm.conf has it (docs/slurm-checks.md).

What each State does (Slurm's, checked on the peer): UP takes and starts jobs; DOWN
takes them, and they wait with ``PartitionDown``; DRAIN refuses new ones ("Required
partition not available (inactive or drain)") and starts those queued; INACTIVE refuses
new ones and starts none (``PartitionInactive``). Running jobs run on in every state.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from hal.core.errors import Conflict, InvalidRequest, NotFound
from hal.core.node import Partition
from hal.core.states import PartitionState
from hal.slurm.syntax import duration_long
from hal.state.store import EventRow, PartitionOverride
from hal.state.store_protocol import StateTransaction

if TYPE_CHECKING:
    from hal.state.cluster import Cluster

log = logging.getLogger(__name__)

UPDATED = "partition.updated"
# PartitionOverride's fields that are Partition's (``is_default`` is ``default``)
_FIELDS = ("max_time_s", "default_time_s", "max_nodes", "priority_job_factor", "priority_tier")


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionUpdate:
    """The fields an update sets; None leaves a field as it is. Times in seconds, 0:
    unlimited (MaxTime) or none (DefaultTime: MaxTime's); ``max_nodes`` 0: unlimited."""

    state: PartitionState | None = None
    max_time_s: int | None = None
    default_time_s: int | None = None
    max_nodes: int | None = None
    priority_job_factor: int | None = None
    priority_tier: int | None = None
    default: bool | None = None

    def values(self) -> dict[str, object]:
        """The fields set (a State by its name), for the event and the log."""
        found = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {
            k: (v.value if isinstance(v, PartitionState) else v)
            for k, v in found.items()
            if v is not None
        }


def applied(partition: Partition, row: PartitionOverride) -> Partition:
    """``partition`` (hal.toml's) with what ``row`` overrides."""
    changes: dict[str, Any] = {f: getattr(row, f) for f in _FIELDS if getattr(row, f) is not None}
    if row.state is not None:
        changes["state"] = PartitionState(row.state)
    if row.is_default is not None:
        changes["default"] = row.is_default
    return dataclasses.replace(partition, **changes)


def take_overrides(cluster: Cluster, rows: Iterable[PartitionOverride]) -> None:
    """At start: the stored overrides over hal.toml's partitions. One for a partition
    hal.toml no longer has is left unused (a reconfigure drops it)."""
    for row in rows:
        partition = cluster.partitions.get(row.name)
        if partition is None:
            log.warning("partition %s changed by scontrol update is not in hal.toml", row.name)
            continue
        cluster.partition_overrides[row.name] = row
        cluster.partitions[row.name] = applied(partition, row)
        log.info(
            "partition %s keeps the run-time change of %s (scontrol reconfigure puts "
            "hal.toml's back)",
            row.name,
            row.updated_by,
        )


async def update_partition(
    cluster: Cluster, name: str, update: PartitionUpdate, user: str
) -> Partition:
    """Apply ``update`` to partition ``name`` (the caller is an administrator), durably,
    with a ``partition.updated`` event; the next scheduling pass sees it."""
    if not update.values():
        raise InvalidRequest(
            "No changes specified: give State=, MaxTime=, DefaultTime=, MaxNodes=, "
            "PriorityJobFactor=, PriorityTier= or Default="
        )
    async with cluster.change() as change:
        if name not in cluster.partitions:
            raise NotFound(
                f"Invalid partition name specified: {name!r} (known: "
                f"{', '.join(sorted(cluster.partitions))})"
            )
        now = cluster.clock.now()
        rows = _rows(cluster, name, update, user, now)
        new = {row.name: applied(cluster.partitions[row.name], row) for row in rows}
        _check(new[name], update, cluster.partitions.values())
        event = EventRow(now, UPDATED, data={"name": name, "by": user, **update.values()})

        def write(tx: StateTransaction) -> None:
            for row in rows:
                tx.put_partition_override(row)

        await change.commit([], [event], extra=write)
        for row in rows:
            cluster.partition_overrides[row.name] = row
        cluster.partitions.update(new)
        cluster.changed.set()  # a pass with the new state and limits at once
    log.info("partition %s updated by %s: %s", name, user, update.values())
    return cluster.partitions[name]


def _rows(
    cluster: Cluster, name: str, update: PartitionUpdate, user: str, now: float
) -> list[PartitionOverride]:
    """The override rows ``update`` writes: partition ``name``'s, the earlier override
    merged with the new fields, and, for ``Default=YES``, every other default
    partition's with ``is_default`` False (one default at a time, as Slurm's)."""
    base = cluster.partition_overrides.get(name) or PartitionOverride(name, user, now)
    fields: dict[str, Any] = {
        f: getattr(update, f) for f in _FIELDS if getattr(update, f) is not None
    }
    if update.state is not None:
        fields["state"] = update.state.value
    if update.default is not None:
        fields["is_default"] = update.default
    rows = [dataclasses.replace(base, updated_by=user, updated_at=now, **fields)]
    if update.default:
        for other in cluster.partitions.values():
            if other.name != name and other.default:
                kept = cluster.partition_overrides.get(other.name)
                row = kept or PartitionOverride(other.name, user, now)
                rows.append(
                    dataclasses.replace(row, updated_by=user, updated_at=now, is_default=False)
                )
    return rows


def _check(new: Partition, update: PartitionUpdate, partitions: Iterable[Partition]) -> None:
    if new.default_time_s and new.max_time_s and new.default_time_s > new.max_time_s:
        # Slurm 22.05.8 answers rc 0 and keeps the old DefaultTime, saying why only in
        # slurmctld's log; HAL says it
        raise InvalidRequest(
            f"DefaultTime would exceed MaxTime for partition {new.name} "
            f"(DefaultTime={duration_long(new.default_time_s)}, "
            f"MaxTime={duration_long(new.max_time_s)}): give a "
            "DefaultTime within MaxTime, or raise MaxTime in the same update"
        )
    if update.default is False and not any(p.default for p in partitions if p.name != new.name):
        raise Conflict(
            f"partition {new.name} is the default partition, and HAL keeps one: set "
            "Default=YES on the partition that should be the default instead (that takes "
            "it from this one)"
        )


def overridden(cluster: Cluster) -> Sequence[str]:
    """The partitions an administrator changed since hal.toml was read."""
    return sorted(cluster.partition_overrides)
