"""Fixtures for the cache integration tests: one shared tree, and fresh small trees."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cachetree import Tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    t = Tree(tmp_path_factory.mktemp("tree"))
    try:
        t.start()
        yield t
    finally:
        t.stop()
