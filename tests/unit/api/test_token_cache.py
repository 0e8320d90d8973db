"""Authentication answers a token seen before from memory; only new tokens reach the
store (the request dependencies then look them up on a worker thread)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.api.auth import TokenCache, new_token, token_hash
from hal.core.errors import Unauthenticated
from hal.state.cluster import Caller
from hal.state.store import SqlStateStore


def test_known_tokens_come_from_memory_and_new_ones_from_the_store(tmp_path: Path) -> None:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    token = new_token()
    with store.transaction() as tx:
        tx.add_user("alice", token_hash(token), admin=False, created=0.0)
    tokens = TokenCache(store)
    header = f"Bearer {token}"
    assert tokens.known(header) is None
    assert tokens.caller(header) == Caller(name="alice", admin=False)
    assert tokens.known(header) == Caller(name="alice", admin=False)
    tokens.forget()
    assert tokens.known(header) is None
    with pytest.raises(Unauthenticated, match="unknown token"):
        tokens.caller("Bearer hal_not-a-token")
    store.close()


@pytest.mark.parametrize("header", [None, "", "Basic abc"])
def test_a_missing_token_is_refused_before_any_look_up(tmp_path: Path, header: str | None) -> None:
    tokens = TokenCache(SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}"))
    with pytest.raises(Unauthenticated, match="Authorization: Bearer"):
        tokens.known(header)
