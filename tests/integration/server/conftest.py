"""A control plane on each of the two stores, for behaviour that differs between SQLite
and PostgreSQL (what a column can hold), fresh for each test or shared by a module's;
the Slurm shims installed for a module's ``server``; the two-agent ``server`` most
modules share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer


@pytest.fixture(params=["sqlite", "postgresql"])
def each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    db_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    with LiveServer(tmp_path, db_url=db_url) as live:
        yield live


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def each_store_shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """``each_store``, one server per store for all of a module's tests: for tests that
    need no fresh state and leave none that another could trip on."""
    postgresql = request.param == "postgresql"
    db_url = request.getfixturevalue("module_pg_url") if postgresql else None
    with LiveServer(tmp_path_factory.mktemp(request.param), db_url=db_url) as live:
        yield live


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server with two real agents of 2 CPUs and 1 GiB each, one per test module (a
    module that needs another cluster defines its own ``server``)."""
    data = tmp_path_factory.mktemp("two-agents")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as srv,
        srv.agents(2, cpus=2, memory="1G"),
    ):
        yield srv


@pytest.fixture(scope="module")
def shims(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``hal compat install-shims`` into a fresh directory, for the module's ``server``."""
    target = tmp_path_factory.mktemp("bin")
    done = server.cli("compat", "install-shims", str(target), "--force")
    assert done.returncode == 0, done.stderr
    return target
