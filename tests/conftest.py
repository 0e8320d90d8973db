"""Shared test set-up: slow-test gating and a fresh PostgreSQL database per test."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

RUN_SLOW = os.environ.get("CI", "").lower() == "true" or os.environ.get("HAL_SLOW") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if RUN_SLOW:
        return
    skip = pytest.mark.skip(reason="slow test: runs in CI (CI=true) or with HAL_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@contextmanager
def _fresh_pg_database() -> Iterator[str]:
    """A new database on the machine's PostgreSQL, dropped on exit; skips when that
    server is not reachable."""
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as err:  # the reason is shown in the skip message
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 ({err.__class__.__name__})")
    name = "hal_test_" + secrets.token_hex(4)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database on the machine's PostgreSQL for one test, dropped afterwards
    (the state-store tests override it with one database per run)."""
    with _fresh_pg_database() as url:
        yield url


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """``pg_url`` shared by a module's tests, for a server they share."""
    with _fresh_pg_database() as url:
        yield url
