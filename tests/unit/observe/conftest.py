"""Fixtures for the observability unit tests: a real ``Cluster`` mirror (no agents, no
scheduler) whose jobs and nodes a test sets directly, and a virtual clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_000_000.0)


@pytest.fixture
def cluster(tmp_path: Path, clock: VirtualClock) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    c = Cluster(store, HalConfig(cluster_name="test"), clock)
    yield c
    store.close()
