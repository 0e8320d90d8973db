"""Small services used by the docs, the tests and ``hal bench htc``.

from hal import htc
from hal.htc import examples

with htc.HtcClient() as hal:
    session = hal.open_session("hal.htc.examples:square")
    session = hal.open_session(examples.EXECUTABLE)  # an executable (exec_example.py)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
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


def sleep_pid(ms: float) -> int:
    """Sleeps ``ms``, then returns the worker's pid: which worker ran the task."""
    time.sleep(ms / 1000)
    return os.getpid()


def hold_mib(mib: int, seconds: float = 5.0) -> int:
    """Holds ``mib`` MiB (written, so resident) for ``seconds``: a task that needs more
    memory than its worker job has."""
    block = b"x" * (mib * 2**20)
    time.sleep(seconds)
    return len(block)


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


def after_file(path: str, value: Any, limit_s: float = 300.0) -> Any:
    """Returns ``value`` once ``path`` exists: a test decides when results may appear.
    Gives up after ``limit_s``, so a test that failed before making the file leaves no
    worker waiting forever."""
    deadline = time.monotonic() + limit_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {limit_s:g} s")
        time.sleep(0.01)
    return value


def pid() -> int:
    return os.getpid()


# An executable service: a stand-alone program (stdlib only, no HAL import, run by path so
# no package is imported at start-up), as one in any language would be.
EXECUTABLE = [sys.executable, str(Path(__file__).with_name("exec_example.py"))]
