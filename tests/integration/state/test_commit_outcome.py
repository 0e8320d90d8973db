"""PostgreSQL lost at the COMMIT of a change leaves it unknown whether the change landed:
the store says so (``CommitOutcomeUnknown``, a 503 clients do not resend by themselves,
since a submit could land twice). Lost before the COMMIT, or on SQLite (whose commit is
all or nothing), it is the plain ``DatabaseUnavailable`` that clients may resend."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from hal.core.errors import Unavailable
from hal.state.store import CommitOutcomeUnknown, SqlStateStore

LOST = {
    "postgres": psycopg.OperationalError("server closed the connection unexpectedly"),
    "sqlite": sqlite3.OperationalError("disk I/O error"),
}


def _lose_commit(store: SqlStateStore, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def do_commit(_dbapi_connection: Any) -> None:
        raise error

    monkeypatch.setattr(store.engine.dialect, "do_commit", do_commit)


def test_a_commit_lost_on_postgres_has_an_unknown_outcome(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqlStateStore(db_url)
    try:
        store.migrate()
        kind = "sqlite" if store.is_sqlite else "postgres"
        _lose_commit(store, monkeypatch, LOST[kind])
        with pytest.raises(Exception) as err, store.transaction() as tx:
            tx.add_user("ann", "0" * 64, False, 0.0)
        if kind == "postgres":
            assert isinstance(err.value, CommitOutcomeUnknown)
            assert err.value.code == "commit_outcome_unknown"
            assert "may or may not have been applied" in err.value.message
        else:  # the commit's own error: SQLite rolled the whole change back
            assert isinstance(err.value, OperationalError)
            assert not isinstance(err.value, Unavailable)
    finally:
        store.close()
