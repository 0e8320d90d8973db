"""One real control plane with 2 agents (2 CPUs each) for the HTC tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.htc import HtcClient
from hal.testing.live import LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("hal")) as live, live.agents(2, cpus=2):
        yield live


@pytest.fixture
def hc(server: LiveServer) -> Iterator[HtcClient]:
    with HtcClient(server.url, server.token) as client:
        yield client


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    return str(tmp_path)
