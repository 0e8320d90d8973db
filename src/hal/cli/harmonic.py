"""``hal harmonic graph [--job ID | --user U] [--json]``: who talks to whom, as the
control plane's traffic graph holds it (``GET /v1/harmonic/graph``, docs/harmonic.md)::

    running jobs (bytes/s both ways, half-life 1h)
    JOB    IDENTITY    PEER   PEER IDENTITY   BYTES/S    SINCE
    12     ann/db      13     bob/client      1.2 MB/s   2026-11-29 10:00:01

    workloads
    IDENTITY    PEER IDENTITY   BYTES/S    SINCE
    ann/db      bob/client      1.1 MB/s   2026-11-29 09:00:00

``hal harmonic dissonance [--json]``: which classes of work slow which down, as the
interference model learned it from job ends (``GET /v1/harmonic/dissonance``)::

    slowdown of each class (row) beside a node full of another (column); observations
    VICTIM   CPU         MEMORY       IO          NETWORK     LIGHT
    cpu      1.08 (412)  1.36 (220)   1.05 (0)    ...

``hal harmonic eval [--json]``: its predictions on the last job ends against what
happened (``GET /v1/harmonic/eval``).

``--json`` prints the REST object unchanged.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hal.cli.output import emit

if TYPE_CHECKING:
    from hal.wire.harmonic import Dissonance, DissonanceEval, HarmonicGraph


def add_commands(sub: Any) -> None:
    top = sub.add_parser(
        "harmonic", help="the traffic graph and the interference model: who talks, who clashes"
    )
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
    p = hsub.add_parser(
        "dissonance", help="which classes of work slow which down (learned), with observations"
    )
    p.add_argument("--json", action="store_true", help="print the REST object unchanged")
    p.set_defaults(func=cmd_dissonance)
    p = hsub.add_parser(
        "eval", help="the interference model's predictions on the last job ends, checked"
    )
    p.add_argument("--json", action="store_true", help="print the REST object unchanged")
    p.set_defaults(func=cmd_eval)


def _limit(text: str) -> int:
    """--limit: 1 to 100,000 (the server's range), refused as a usage error."""
    if not text.isdigit() or not 1 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 100000")
    return int(text)


def cmd_graph(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as hal:
        found = hal.harmonic_graph(job=ns.job, user=ns.user, limit=ns.limit)
    return emit(found, ns.json, draw)


def cmd_dissonance(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as hal:
        found = hal.harmonic_dissonance()
    return emit(found, ns.json, draw_dissonance)


def cmd_eval(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as hal:
        found = hal.harmonic_eval()
    return emit(found, ns.json, draw_eval)


def draw_dissonance(model: Dissonance) -> str:
    """The matrix, victims as rows, with the observations behind each cell."""
    cells = {(c.victim, c.aggressor): c for c in model.cells}
    lines = [
        "slowdown of each class (row) beside a node full of another (column), "
        "(observations behind it)",
    ]
    rows = []
    for v in model.classes:
        row = [v]
        for a in model.classes:
            cell = cells.get((v, a))
            row.append("-" if cell is None else f"{cell.slowdown:.2f} ({cell.observations})")
        rows.append(row)
    lines += _table(("VICTIM", *(c.upper() for c in model.classes)), rows)
    lines.append(
        f"{model.outcomes_learnt} job ends learnt since the server started; cells never "
        f"observed read the prior ({model.prior:.2f})"
    )
    return "\n".join(lines) + "\n"


def draw_eval(found: DissonanceEval) -> str:
    """MAE of the predicted slowdown, overall, on shared runs and per class."""

    def figure(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    rows = [
        (name, str(f.outcomes), figure(f.mae), figure(f.baseline_mae))
        for name, f in (
            ("all", found.all),
            ("shared a node", found.shared),
            *found.by_class.items(),
        )
    ]
    lines = [
        f"the model's predicted slowdown on the last {found.window} job ends (each "
        "predicted before it was learnt) against the observed one",
    ]
    lines += _table(("OUTCOMES OF", "JOBS", "MAE", "MAE WITHOUT INTERFERENCE"), rows)
    return "\n".join(lines) + "\n"


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
