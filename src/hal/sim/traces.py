"""Where the full workload traces live, for the benchmarks that replay them whole.

The Parallel Workloads Archive's logs the benchmarks replay (``hal bench sim``, ``hal bench
predict``, ``bench/*.py``) are too large for the repository: a checkout finds them beside it
(``../shared/traces``), or in the folder ``HAL_TRACES`` names. The tests need none of them:
theirs are in the repository (``hal.testing.traces``, ``tests/data/traces``).
"""

from __future__ import annotations

import os
from pathlib import Path

from hal.core.errors import InvalidRequest


def traces_dir() -> Path:
    env = os.environ.get("HAL_TRACES")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared" / "traces"
        if (parent / "pyproject.toml").exists() and candidate.is_dir():
            return candidate
    return Path.cwd().parent / "shared" / "traces"


def trace_file(name: str, folder: Path | None = None) -> Path:
    """The trace ``name`` in ``folder`` (default ``traces_dir()``); refused, saying where it
    looked and how to give it, when it is not there."""
    base = traces_dir() if folder is None else folder
    path = base / name
    if not path.is_file():
        raise InvalidRequest(
            f"the trace {name} is not in {base}: this benchmark replays the Parallel "
            "Workloads Archive's log whole; put it there, or name the folder that holds "
            "it with HAL_TRACES"
        )
    return path
