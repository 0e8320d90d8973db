"""Small services used by the docs, the tests and ``hal bench htc``.

session = htc.open_session("hal.htc.examples:square")
"""

from __future__ import annotations

import os
import time
from typing import Any

from hal.htc.service import common


def noop() -> None:
    """Does nothing: measures the platform, not the task."""


def echo(value: Any) -> Any:
    return value


def square(x: int) -> int:
    return x * x


def sleep_ms(ms: float) -> float:
    time.sleep(ms / 1000)
    return ms


def scaled(x: float) -> Any:
    """``x`` times the session's common data (a number)."""
    return x * common()


def fail(message: str) -> None:
    raise ValueError(message)


def crash_on(x: int, bad: int) -> int:
    """Kills its worker process when ``x == bad``: a poison task."""
    if x == bad:
        os._exit(13)
    return x


def pid() -> int:
    return os.getpid()
