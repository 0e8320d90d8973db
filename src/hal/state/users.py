"""Users and their tokens, changed together with an event in one transaction
(``user.added``, ``user.token_replaced``, ``user.deleted``; ``data`` names the user, the
administrator who made the change and whether the user is an administrator), so
``/v1/events`` and ``hal events`` keep a trail of who changed access, and when. Tokens
themselves never reach an event: the store keeps only their SHA-256."""

from __future__ import annotations

from hal.core.errors import NotFound
from hal.state.cluster import Cluster
from hal.state.store import EventRow, Transaction


def _event(cluster: Cluster, kind: str, name: str, by: str, admin: bool) -> EventRow:
    return EventRow(cluster.clock.now(), kind, data={"name": name, "by": by, "admin": admin})


async def add(cluster: Cluster, by: str, name: str, token_sha256: str, admin: bool) -> None:
    event = _event(cluster, "user.added", name, by, admin)

    def insert(tx: Transaction) -> None:
        tx.add_user(name, token_sha256, admin, event.time)

    async with cluster._lock:
        await cluster._commit([], [event], extra=insert)


async def replace_token(
    cluster: Cluster, by: str, name: str, token_sha256: str, admin: bool, missing: NotFound
) -> None:
    """``missing`` is raised, and nothing is written, when the user is gone by now."""
    event = _event(cluster, "user.token_replaced", name, by, admin)

    def replace(tx: Transaction) -> None:
        if not tx.set_user_token(name, token_sha256):
            raise missing

    async with cluster._lock:
        await cluster._commit([], [event], extra=replace)


async def delete(cluster: Cluster, by: str, name: str, admin: bool, missing: NotFound) -> None:
    """``missing`` is raised, and nothing is written, when the user is gone by now."""
    event = _event(cluster, "user.deleted", name, by, admin)

    def remove(tx: Transaction) -> None:
        if not tx.delete_user(name):
            raise missing

    async with cluster._lock:
        await cluster._commit([], [event], extra=remove)
