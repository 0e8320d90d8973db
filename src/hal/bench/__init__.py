"""Benchmarks behind ``hal bench``: each writes one JSON object with its figures and the
peer it was compared with in the same run. ``make bench`` runs them all (bench/run_all.py).
Never used by tests: wall-clock numbers belong here, not in assertions."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
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


def whole_numbers(text: str) -> list[int]:
    """An argparse type: ``0,1,2`` → [0, 1, 2]; anything else is the user's error."""
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers separated by commas, e.g. 0,1,2, not {text!r}"
        ) from None
    if not numbers:
        raise argparse.ArgumentTypeError("name at least one number, e.g. 0,1,2")
    return numbers


def names_from(known: Iterable[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of ``known``."""
    allowed = list(known)

    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown)}; choose from {', '.join(allowed)}"
                if unknown
                else f"name at least one of {', '.join(allowed)}"
            )
        return names

    return parse
