"""Slurm 22.05.8's reservation forms an admin's side-by-side run found missing,
in the state layer on SQLite and PostgreSQL: ``Nodes=ALL``, no name, ``PURGE_COMP``,
and no deleting a reservation that a job uses."""

from __future__ import annotations

import asyncio

import pytest
from test_reservation_store import ROOT, T0, req, spec, with_cluster

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.errors import Conflict
from hal.core.reservation import ReservationFlag, read_flags
from hal.state import commands, reservations
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore


def test_all_nodes_and_a_made_up_name(db_url: str) -> None:
    """``nodes=ALL flags=maint`` with no ReservationName: Slurm reserves every node,
    shows ``Flags=MAINT,SPEC_NODES,ALL_NODES`` and names it ``root_7`` (its first
    account, else its first user, and a number)."""

    async def body(cluster: Cluster) -> None:
        made = await reservations.create(
            cluster, ROOT, req("", nodes=("ALL",), flags=frozenset({ReservationFlag.MAINT}))
        )
        assert made.name == "alice_1" and made.nodes == ("node1", "node2", "node3")
        assert made.flags == {
            ReservationFlag.MAINT,
            ReservationFlag.SPEC_NODES,
            ReservationFlag.ALL_NODES,
        }
        counted = await reservations.create(
            cluster, ROOT, req("", start=T0 + 86_400, node_count=1, nodes=None, accounts=("x",))
        )
        assert counted.name == "x_2" and counted.flags == frozenset()
        # an update keeps the implied flags; new nodes by count drop them
        flags, purge = read_flags("OVERLAP,PURGE_COMP=60")
        changed = await reservations.update(
            cluster,
            ROOT,
            reservations.ReservationRequest("alice_1", flags=flags, purge_after=purge),
        )
        assert ReservationFlag.ALL_NODES in changed.flags and changed.purge_after == 60

    with_cluster(db_url, body)
    again = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(T0))

    async def reload() -> None:
        await again.load()
        kept = again.reservations["alice_1"]
        assert kept.purge_after == 60 and ReservationFlag.SPEC_NODES in kept.flags
        await again.close()

    asyncio.run(reload())


def test_a_reservation_in_use_is_not_deleted(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        await reservations.create(cluster, ROOT, req(nodes=("node1",)))
        (a,) = await cluster.submit([spec(reservation="maint", time_limit_s=300)])
        with pytest.raises(Conflict, match=f"Requested reservation is in use: job {a.job_id} "):
            await reservations.delete(cluster, ROOT, "maint")
        assert cluster.jobs[a.job_id].spec.reservation == "maint"
        await commands.cancel(cluster, str(a.job_id), ROOT)  # once its job has ended, it may go
        await reservations.delete(cluster, ROOT, "maint")
        assert cluster.reservations == {}

    with_cluster(db_url, body)


def test_purge_comp_deletes_an_idle_reservation(db_url: str) -> None:
    """``Flags=PURGE_COMP=00:01:00``: on the peer, a started reservation with no job
    was purged a minute after its start, one whose job ended a minute after that."""

    async def body(cluster: Cluster) -> None:
        flags, purge = read_flags("PURGE_COMP=60")
        await reservations.create(
            cluster, ROOT, req(start=T0, nodes=("node1",), flags=flags, purge_after=purge)
        )
        await reservations.create(
            cluster,
            ROOT,
            req("later", start=T0 + 30, nodes=("node2",), flags=flags, purge_after=purge),
        )
        assert isinstance(cluster.clock, VirtualClock)
        cluster.clock.advance(59)
        assert await reservations.end_expired(cluster) == []
        cluster.clock.advance(2)
        assert await reservations.end_expired(cluster) == ["maint"]
        assert set(cluster.reservations) == {"later"}

    with_cluster(db_url, body)
