"""A real control plane for the CLI's tests (no agents: nothing runs), and the
environment that points ``hal`` at it with the admin's token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("srv")) as live:
        yield live


@pytest.fixture
def env(server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LiveServer:
    monkeypatch.setenv("HAL_URL", server.url)
    monkeypatch.setenv("HAL_TOKEN", server.token)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return server
