"""Fixtures for the cache integration tests: one shared tree, and fresh small trees."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cachetree import Tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    t = Tree(tmp_path_factory.mktemp("tree"))
    try:
        t.start()
        yield t
    finally:
        t.stop()


PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    import secrets

    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as err:
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 ({err.__class__.__name__})")
    name = "hal_cache_test_" + secrets.token_hex(4)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
