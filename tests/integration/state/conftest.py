"""State-store fixtures: SQLite in a temp dir, and a fresh PostgreSQL database per run."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _pg_available() -> str | None:
    try:
        import psycopg

        with psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=postgres", connect_timeout=3
        ):
            return None
    except Exception as err:  # the reason is shown in the skip message
        return f"PostgreSQL is not reachable on 127.0.0.1:5432 ({err.__class__.__name__})"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database for this test run, dropped at the end."""
    reason = _pg_available()
    if reason:
        pytest.skip(reason)
    import psycopg

    name = "hal_test_" + secrets.token_hex(4)
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(
            "host=127.0.0.1 user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'hal.db'}"
        return
    base: str = request.getfixturevalue("pg_url")
    # one schema per test keeps tests independent inside the run's database
    import psycopg

    schema_db = base.rsplit("/", 1)[1] + "_" + secrets.token_hex(3)
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{schema_db}"')
    try:
        yield base.rsplit("/", 1)[0] + "/" + schema_db
    finally:
        with psycopg.connect(
            "host=127.0.0.1 user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{schema_db}" WITH (FORCE)')
