"""Users made by the server's own commands (``hal user``, ``hal up``'s agents, the first
administrator): created with a fresh token, or given a new one."""

from __future__ import annotations

from hal.core.errors import Conflict
from hal.server.auth import new_token, token_hash
from hal.state.store import SqlStateStore


def ensure_user(
    store: SqlStateStore, name: str, *, admin: bool, now: float, agent: bool = False
) -> str | None:
    """Create ``name`` with a fresh token if absent; return the token (None if it existed).
    ``agent``: an agent's token, for any node."""
    store.migrate()
    if name in {u.name for u in store.users()}:
        return None
    token = new_token()
    with store.transaction() as tx:
        tx.add_user(name, token_hash(token), admin, now, agent=agent)
    return token


def agent_token(store: SqlStateStore, name: str, *, now: float) -> str:
    """A fresh agent token for any node under ``name`` (``hal up``'s agents): the user is
    created if absent, else its token replaced, so an agent of an earlier run holds none.
    A user or administrator of that name is left alone: a clear error instead."""
    token = ensure_user(store, name, admin=False, now=now, agent=True)
    if token is not None:
        return token
    user = next(u for u in store.users() if u.name == name)
    if not user.agent:
        raise Conflict(
            f"user {name} exists and is no agent, but the local agents use that name: "
            f"delete it (`hal user delete {name}`) and start again"
        )
    return reset_token(store, name, admin=False)


def reset_token(store: SqlStateStore, name: str, *, admin: bool) -> str:
    token = new_token()
    with store.transaction() as tx:
        tx.set_user_token(name, token_hash(token), admin)
    return token
