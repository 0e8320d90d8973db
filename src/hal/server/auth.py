"""Bearer tokens. Tokens are random, shown once, stored as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets
import threading

from hal.core.errors import Unauthenticated
from hal.slurm.syntax import expand_hostlist
from hal.state.cluster import Caller
from hal.state.store import SqlStateStore, StoredUser


def new_token() -> str:
    return "hal_" + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenCache:
    """token hash → Caller, so authentication does not hit the database per request.

    Entries live until forgotten (no TTL): a replaced token must be dropped with
    ``forget_user`` by the server that replaced it."""

    def __init__(self, store: SqlStateStore) -> None:
        self.store = store
        self._known: dict[str, Caller] = {}
        # bumped by each forget: a look-up that began before it does not cache its answer,
        # which may be the token just replaced
        self._generation = 0
        self._lock = threading.Lock()

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self._known.clear()

    def forget_user(self, name: str) -> None:
        """Drop ``name``'s cached tokens (its token was replaced in the store): the old
        token is looked up again, and refused, from the next request on."""
        with self._lock:
            self._generation += 1
            for digest in [d for d, who in self._known.items() if who.name == name]:
                del self._known[digest]

    def known(self, authorization: str | None) -> Caller | None:
        """The caller of a token seen before, without the database; ``None`` when the
        token must be looked up (``caller``)."""
        return self._known.get(_digest(authorization))

    def caller(self, authorization: str | None) -> Caller:
        digest = _digest(authorization)
        found = self._known.get(digest)
        if found is None:
            generation = self._generation
            row = self.store.user_by_token_hash(digest)
            if row is None:
                raise Unauthenticated(
                    "unknown token; ask an administrator for a new one (`hal user token NAME`)"
                )
            found = caller_of(row)
            with self._lock:
                if generation == self._generation:
                    self._known[digest] = found
        return found


def caller_of(user: StoredUser) -> Caller:
    nodes = None
    if user.agent and user.agent_nodes:
        nodes = frozenset(expand_hostlist(user.agent_nodes, field="nodes"))
    return Caller(name=user.name, admin=user.admin, agent=user.agent, agent_nodes=nodes)


def _digest(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthenticated(
            "missing token: send 'Authorization: Bearer <token>' (the CLI reads HAL_TOKEN "
            "or ~/.config/hal/credentials.json; an admin creates users with `hal user add` "
            "and gives a lost token's user a new one with `hal user token NAME`)"
        )
    return token_hash(authorization[7:].strip())
