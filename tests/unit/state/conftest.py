"""A real ``Cluster`` mirror over SQLite for ``hal.state`` tests (``hal.testing.mirror``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.core.clock import VirtualClock
from hal.state.cluster import Cluster
from hal.testing.mirror import new_cluster


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_000_000.0)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hal.db'}"


@pytest.fixture
def cluster(db: str, clock: VirtualClock) -> Iterator[Cluster]:
    c = new_cluster(db, clock)
    yield c
    c.store.close()
