"""The local provider passes the conformance suite: its nodes are real ``hal agent``
processes, joining a server URL that nothing listens on (they keep retrying, which is
all the suite needs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hal.cloud.local import LocalProvider
from hal.cloud.provider import Launch, Provider
from hal.core.node_groups import NodeGroup
from hal.testing.cloud import CHECKS, GROUP_CHECKS
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
