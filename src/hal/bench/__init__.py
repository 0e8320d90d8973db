"""Benchmarks behind ``hal bench``: each writes one JSON object with its figures and the
peer it was compared with in the same run. ``make bench`` runs them all (bench/run_all.py).
Never used by tests: wall-clock numbers belong here, not in assertions."""

from __future__ import annotations

import json
from typing import Any


def emit(result: dict[str, Any], as_json: bool) -> int:
    """Print a benchmark's result: the JSON object, or one ``key: value`` line each."""
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        width = max((len(k) for k in result), default=0)
        for key, value in result.items():
            print(f"{key:>{width}}: {value}")
    return 0
