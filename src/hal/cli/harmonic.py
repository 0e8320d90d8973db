"""``hal harmonic graph [--job ID | --user U] [--json]``: who talks to whom, as the
control plane's traffic graph holds it (``GET /v1/harmonic/graph``, docs/harmonic.md)::

    running jobs (bytes/s both ways, half-life 1h)
    JOB    IDENTITY    PEER   PEER IDENTITY   BYTES/S    SINCE
    12     ann/db      13     bob/client      1.2 MB/s   2026-11-29 10:00:01

    workloads
    IDENTITY    PEER IDENTITY   BYTES/S    SINCE
    ann/db      bob/client      1.1 MB/s   2026-11-29 09:00:00

``--json`` prints the REST object unchanged.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hal.wire.harmonic import HarmonicGraph


def add_commands(sub: Any) -> None:
    top = sub.add_parser("harmonic", help="the traffic graph: which jobs talk to which")
    hsub = top.add_subparsers(metavar="ACTION")
    p = hsub.add_parser(
        "graph", help="who talks to whom: bytes/s between running jobs and between workloads"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--job", metavar="ID", help="a job's edges (12, 12_3) and its workload's")
    which.add_argument("--user", metavar="U", help="the edges of a user's jobs and workloads")
    p.add_argument(
        "--limit", type=_limit, default=1000, help="at most this many edges of each kind"
    )
    p.add_argument("--json", action="store_true", help="print the REST object unchanged")
    p.set_defaults(func=cmd_graph)


def _limit(text: str) -> int:
    """--limit: 1 to 100,000 (the server's range), refused as a usage error."""
    if not text.isdigit() or not 1 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 100000")
    return int(text)


def cmd_graph(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as hal:
        found = hal.harmonic_graph(job=ns.job, user=ns.user, limit=ns.limit)
    if ns.json:
        print(found.model_dump_json(indent=2))
        return 0
    print(draw(found), end="")
    return 0


def draw(graph: HarmonicGraph) -> str:
    """The two tables, or a line saying there is nothing yet."""
    lines = [f"running jobs (bytes/s both ways, half-life {_duration(graph.half_life_seconds)})"]
    if graph.jobs:
        lines += _table(
            ("JOB", "IDENTITY", "PEER", "PEER IDENTITY", "BYTES/S", "SINCE"),
            [
                (e.job_id, e.identity, e.peer_job_id, e.peer_identity,
                 rate(e.bytes_per_second), _when(e.since))
                for e in graph.jobs
            ],
        )  # fmt: skip
    else:
        lines.append("  none: no running jobs exchange measured TCP traffic")
    lines += ["", "workloads"]
    if graph.identities:
        lines += _table(
            ("IDENTITY", "PEER IDENTITY", "BYTES/S", "SINCE"),
            [
                (e.identity, e.peer_identity, rate(e.bytes_per_second), _when(e.since))
                for e in graph.identities
            ],
        )
    else:
        lines.append("  none yet")
    return "\n".join(lines) + "\n"


def rate(bytes_per_second: float) -> str:
    """``1234567.0`` → ``1.2 MB/s`` (decimal units, as network rates are written)."""
    value = bytes_per_second
    for unit in ("B/s", "kB/s", "MB/s", "GB/s"):
        if value < 999.5:
            return f"{value:.0f} {unit}" if unit == "B/s" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB/s"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"
