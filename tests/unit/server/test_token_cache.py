"""Authentication answers a token seen before from memory; only new tokens reach the
store (the request dependencies then look them up on a worker thread)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.core.errors import Unauthenticated
from hal.server.auth import TokenCache, new_token, token_hash
from hal.state.cluster import Caller
from hal.state.store import SqlStateStore, StoredUser


@pytest.fixture
def alice(tmp_path: Path) -> Iterator[tuple[SqlStateStore, str]]:
    """A migrated SQLite store with user alice, and her token."""
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    token = new_token()
    with store.transaction() as tx:
        tx.add_user("alice", token_hash(token), admin=False, created=0.0)
    yield store, token
    store.close()


def test_known_tokens_come_from_memory_and_new_ones_from_the_store(
    alice: tuple[SqlStateStore, str],
) -> None:
    store, token = alice
    tokens = TokenCache(store)
    header = f"Bearer {token}"
    assert tokens.known(header) is None
    assert tokens.caller(header) == Caller(name="alice", admin=False)
    assert tokens.known(header) == Caller(name="alice", admin=False)
    tokens.forget()
    assert tokens.known(header) is None
    with pytest.raises(Unauthenticated, match="unknown token"):
        tokens.caller("Bearer hal_not-a-token")


@pytest.mark.parametrize("header", [None, "", "Basic abc"])
def test_a_missing_token_is_refused_before_any_look_up(tmp_path: Path, header: str | None) -> None:
    tokens = TokenCache(SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}"))
    with pytest.raises(Unauthenticated, match="Authorization: Bearer"):
        tokens.known(header)


def test_forget_user_drops_only_that_users_tokens(alice: tuple[SqlStateStore, str]) -> None:
    """A replaced token (``hal user token``) is looked up again, and refused, at once."""
    store, old = alice
    bob = new_token()
    with store.transaction() as tx:
        tx.add_user("bob", token_hash(bob), admin=False, created=0.0)
    tokens = TokenCache(store)
    tokens.caller(f"Bearer {old}")
    tokens.caller(f"Bearer {bob}")
    with store.transaction() as tx:
        tx.set_user_token("alice", token_hash(new_token()))
    tokens.forget_user("alice")
    assert tokens.known(f"Bearer {old}") is None
    assert tokens.known(f"Bearer {bob}") == Caller(name="bob", admin=False)
    with pytest.raises(Unauthenticated, match="unknown token"):
        tokens.caller(f"Bearer {old}")


def test_a_look_up_that_began_before_a_forget_is_not_cached(
    alice: tuple[SqlStateStore, str],
) -> None:
    """The token read from the store just before it was replaced must not stay cached."""
    store, token = alice
    tokens = TokenCache(store)
    read = store.user_by_token_hash

    def read_then_replaced(digest: str) -> StoredUser | None:
        row = read(digest)
        tokens.forget_user("alice")  # the replacement commits while this look-up runs
        return row

    store.user_by_token_hash = read_then_replaced  # type: ignore[method-assign]
    assert tokens.caller(f"Bearer {token}") == Caller(name="alice", admin=False)
    assert tokens.known(f"Bearer {token}") is None
