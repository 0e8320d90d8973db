"""The SQL store passes the ``StateStore`` conformance suite on real SQLite and on the real
PostgreSQL server (which skips, saying why, only where that server is absent); the memory
store passes the same cases (tests/unit/state/test_memory_store.py)."""

from __future__ import annotations

import pytest

from hal.state.store import SqlStateStore
from hal.testing.store_conformance import CASES, Case, case_name


@pytest.mark.parametrize("case", CASES, ids=case_name)
def test_sql_store_conforms(case: Case, db_url: str) -> None:
    case(lambda: SqlStateStore(db_url))  # opened again: a new engine on the same database
