"""A control plane on a temp SQLite file, driven through httpx's ASGI transport (no sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cacheapi import Api

from hal.cache.directory import DirectorySettings
from hal.core.clock import VirtualClock


@pytest.fixture
def settings() -> DirectorySettings:
    return DirectorySettings()


@pytest.fixture
def api(tmp_path: Path, settings: DirectorySettings) -> Iterator[Api]:
    client = Api(f"sqlite:///{tmp_path / 'cache.db'}", settings, VirtualClock(1_700_000_000.0))
    try:
        yield client
    finally:
        client.close()
        client.loop.close()
