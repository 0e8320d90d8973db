"""Users and their tokens, changed together with an event in one transaction
(``user.added``, ``user.token_replaced``, ``user.deleted``; ``data`` names the user, the
administrator who made the change, whether the user is an administrator and, for an
agent's token, ``agent`` and its ``nodes``), so
``/v1/events`` and ``hal events`` keep a trail of who changed access, and when. Tokens
themselves never reach an event: the store keeps only their SHA-256."""

from __future__ import annotations

from hal.core.errors import NotFound
from hal.state.cluster import Cluster
from hal.state.store import EventRow, StoredUser, Transaction


def _event(cluster: Cluster, kind: str, user: StoredUser, by: str) -> EventRow:
    data: dict[str, object] = {"name": user.name, "by": by, "admin": user.admin}
    if user.agent:
        data.update(agent=True, nodes=user.agent_nodes)
    return EventRow(cluster.clock.now(), kind, data=data)


async def add(
    cluster: Cluster,
    by: str,
    name: str,
    token_sha256: str,
    admin: bool,
    agent: bool = False,
    agent_nodes: str = "",
) -> None:
    """``agent``: an agent's token, for the nodes of the host list ``agent_nodes``."""
    event = _event(cluster, "user.added", StoredUser(name, admin, agent, agent_nodes), by)

    def insert(tx: Transaction) -> None:
        tx.add_user(name, token_sha256, admin, event.time, agent=agent, agent_nodes=agent_nodes)

    async with cluster.change() as change:
        await change.commit([], [event], extra=insert)


async def replace_token(
    cluster: Cluster, by: str, user: StoredUser, token_sha256: str, missing: NotFound
) -> None:
    """``missing`` is raised, and nothing is written, when the user is gone by now."""
    event = _event(cluster, "user.token_replaced", user, by)

    def replace(tx: Transaction) -> None:
        if not tx.set_user_token(user.name, token_sha256):
            raise missing

    async with cluster.change() as change:
        await change.commit([], [event], extra=replace)


async def delete(cluster: Cluster, by: str, user: StoredUser, missing: NotFound) -> None:
    """``missing`` is raised, and nothing is written, when the user is gone by now."""
    event = _event(cluster, "user.deleted", user, by)

    def remove(tx: Transaction) -> None:
        if not tx.delete_user(user.name):
            raise missing

    async with cluster.change() as change:
        await change.commit([], [event], extra=remove)
