from __future__ import annotations

import pytest

from hal.scheduler.framework import Scheduler
from hal.scheduler.plugins import build_scheduler


@pytest.fixture(scope="module")
def sched() -> Scheduler:
    """The default profile, as the server builds it."""
    return build_scheduler()
