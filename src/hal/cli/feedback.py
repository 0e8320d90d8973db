"""``hal feedback NAME=VALUE [NAME=VALUE ...]``: from inside a running job, report how it
is doing (``hal.feedback.report``; docs/feedback.md)::

    hal feedback samples_per_s=1830 loss=0.25

Prints nothing when the server took the report; a refused one (a bad name or value,
the rate limit, not inside a job) exits non-zero with the server's reason.
"""

from __future__ import annotations

import argparse
from typing import Any

from hal.core.errors import InvalidRequest


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "feedback", help="from inside a job: report its own metrics (samples_per_s=1830)"
    )
    p.add_argument("metrics", nargs="+", metavar="NAME=VALUE", help="e.g. samples_per_s=1830")
    p.set_defaults(func=cmd_feedback)


def parse_pairs(pairs: list[str]) -> dict[str, float]:
    """``["a=1", "b=2.5"]`` → {"a": 1.0, "b": 2.5}; a word that is no NAME=NUMBER is
    refused (the server checks names and finiteness)."""
    found: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            if not sep:
                raise ValueError
            found[name.strip()] = float(value)
        except ValueError:
            raise InvalidRequest(
                f"{pair!r} is not NAME=NUMBER (e.g. samples_per_s=1830)", field="metrics"
            ) from None
    return found


def cmd_feedback(ns: argparse.Namespace) -> int:
    from hal.feedback import report

    report(parse_pairs(ns.metrics))
    return 0
