"""The local provider passes the conformance suite: its nodes are real ``hal agent``
processes, joining a server URL that nothing listens on (they keep retrying, which is
all the suite needs)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hal.cloud.local import LocalProvider
from hal.cloud.provider import Instance, Launch, Provider
from hal.core.errors import InvalidRequest
from hal.core.node_groups import NodeGroup
from hal.testing.cloud import CHECKS, FAILURE_CHECKS, GROUP_CHECKS, StandIn, limit
from hal.testing.live import free_port

MakeGroup = Callable[..., NodeGroup]


@pytest.fixture
def nowhere() -> Launch:
    return Launch(server_url=f"http://127.0.0.1:{free_port()}", token="agent-token-123")


def _factory(root: Path) -> Any:
    """Providers laid out as the server lays them out (``hal.cloud.providers``): one
    state folder per server, so per cluster, with one subfolder per group."""

    def make(group: NodeGroup, cluster: str) -> Provider:
        return LocalProvider(group, cluster, root / cluster / group.name)

    return make


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_conformance(
    make_group: MakeGroup, check: Any, tmp_path: Path, cluster: str, nowhere: Launch
) -> None:
    group = make_group(provider="local")
    check(_factory(tmp_path)(group, cluster), nowhere)


@pytest.mark.parametrize("check", GROUP_CHECKS, ids=lambda c: c.__name__)
def test_group_conformance(
    make_group: MakeGroup, check: Any, tmp_path: Path, cluster: str, nowhere: Launch
) -> None:
    check(_factory(tmp_path), make_group(provider="local"), cluster, nowhere)


def _kill(instance: Instance) -> None:
    """The machine dies: its agent is killed, nothing is told."""
    os.killpg(int(instance.id), signal.SIGKILL)


@pytest.mark.parametrize("check", FAILURE_CHECKS, ids=lambda c: c.__name__)
def test_failure_conformance(
    make_group: MakeGroup, check: Any, tmp_path: Path, cluster: str, nowhere: Launch
) -> None:
    """A killed agent is a lost instance; ``capacity = 0`` a group out of capacity."""
    group = make_group(provider="local")
    full = replace(group, settings={"capacity": "0"})
    stand_in = StandIn(
        name="local agents",
        provider=lambda: _factory(tmp_path)(group, cluster),
        lose=_kill,
        full=lambda: _factory(tmp_path)(full, cluster),
    )
    assert limit(check, stand_in) is None
    check(stand_in, nowhere)


def test_capacity_starts_what_fits(
    make_group: MakeGroup, tmp_path: Path, cluster: str, nowhere: Launch
) -> None:
    """With room for two, three names start two; a third create is a capacity error."""
    group = replace(make_group(provider="local"), settings={"capacity": "2"})
    provider = LocalProvider(group, cluster, tmp_path)
    try:
        made = provider.create(["burst1", "burst2", "burst3"], nowhere)
        assert [i.node for i in made] == ["burst1", "burst2"]
        with pytest.raises(Exception, match="holds at most 2 instance") as caught:
            provider.create(["burst3"], nowhere)
        assert getattr(caught.value, "capacity", False)
    finally:
        provider.remove(provider.instances())


def test_a_bad_capacity_is_refused(make_group: MakeGroup, tmp_path: Path, cluster: str) -> None:
    group = replace(make_group(provider="local"), settings={"capacity": "two"})
    with pytest.raises(InvalidRequest, match="capacity = 2"):
        LocalProvider(group, cluster, tmp_path)
