"""Where the shared workload traces live.

A checkout sits beside ``shared/`` (``../shared/traces``); ``HAL_TRACES`` overrides.
"""

from __future__ import annotations

import os
from pathlib import Path


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
