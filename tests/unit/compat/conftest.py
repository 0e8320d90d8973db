"""Slurm command tests print local times; pin the zone to UTC so expectations are fixed."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()
