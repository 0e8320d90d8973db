"""Shared test set-up: slow-test gating and a real HAL server on a free port."""

from __future__ import annotations

import os

import pytest

RUN_SLOW = os.environ.get("CI", "").lower() == "true" or os.environ.get("HAL_SLOW") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if RUN_SLOW:
        return
    skip = pytest.mark.skip(reason="slow test: runs in CI (CI=true) or with HAL_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
