"""Agent tokens in the store: ``users.agent`` and ``users.agent_nodes``, added in place
to a database of the release before them (schema version 6), whose users and tokens
stay what they were."""

from __future__ import annotations

from sqlalchemy import text

from hal.server.auth import TokenCache, new_token, token_hash
from hal.state.cluster import Caller
from hal.state.migrations import STEPS
from hal.state.store import SqlStateStore, StoredUser


def test_a_version_6_database_keeps_its_users_and_gains_agent_tokens(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    alice, ops = new_token(), new_token()
    with store.engine.begin() as conn:  # back to what release v6 created
        for column in ("agent", "agent_nodes"):
            conn.execute(text(f"ALTER TABLE users DROP COLUMN {column}"))
        conn.execute(text("UPDATE hal_meta SET value = 6 WHERE key = 'schema_version'"))
        conn.execute(
            text(
                "INSERT INTO users (name, token_sha256, admin, created) VALUES "
                f"('alice', '{token_hash(alice)}', FALSE, 0), "
                f"('ops', '{token_hash(ops)}', TRUE, 0)"
            )
        )
    store.close()
    again = SqlStateStore(db_url)
    assert again.migrate() == len(STEPS) >= 7
    assert again.users() == [StoredUser("alice", admin=False), StoredUser("ops", admin=True)]
    rack = new_token()
    with again.transaction() as tx:
        tx.add_user("rack1", token_hash(rack), False, 0.0, agent=True, agent_nodes="n[1-2]")
    assert again.user_by_token_hash(token_hash(rack)) == StoredUser("rack1", False, True, "n[1-2]")
    tokens = TokenCache(again)
    assert tokens.caller(f"Bearer {ops}") == Caller("ops", admin=True)
    assert tokens.caller(f"Bearer {rack}") == Caller(
        "rack1", agent=True, agent_nodes=frozenset({"n1", "n2"})
    )
    again.close()
