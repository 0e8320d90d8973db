"""A real ``Cluster`` mirror for ``hal.state`` tests (``hal.testing.mirror``): over the memory
store, which passes the SQL store's conformance suite, or over SQLite where the test names
``db`` (it restarts the server over that file). ``HAL_TEST_STORE=sqlite`` puts every
``cluster`` on SQLite, to compare the two."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.core.clock import VirtualClock
from hal.state.cluster import Cluster
from hal.state.memory_store import MemoryStateStore
from hal.state.store_protocol import StateStore
from hal.testing.mirror import new_cluster


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_000_000.0)


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite database; a test naming it gets its ``cluster`` over it."""
    return f"sqlite:///{tmp_path / 'hal.db'}"


@pytest.fixture
def cluster(request: pytest.FixtureRequest, clock: VirtualClock) -> Iterator[Cluster]:
    on_sqlite = "db" in request.fixturenames or os.environ.get("HAL_TEST_STORE") == "sqlite"
    store: str | StateStore = request.getfixturevalue("db") if on_sqlite else MemoryStateStore()
    c = new_cluster(store, clock)
    yield c
    c.store.close()
