"""``sinfo -T`` / ``--reservation``: the server's reservations, one line each.

As Slurm 22.05.8 prints them (checked on the peer, docs/slurm-checks.md): a
fixed layout that ``-o``/``-O``, ``-p``, ``-N``, ``-s`` and ``-R`` do not change, the name
column as wide as the longest name (at least its title's), ``ACTIVE`` while a window is
open and ``INACTIVE`` before, then start, end, duration (``01:00:00``, ``365-00:00:00``)
and the nodes; ``-h`` leaves out the title line, ``-l`` adds the date line above it. No
reservation: ``No reservations in the system``, exit 0.
"""

from __future__ import annotations

from hal.compat.formats import duration_long, timestamp
from hal.slurm.syntax import compress_hostlist

TYPE_CHECKING = False  # (the wire schemas, for annotations: commands read records)
if TYPE_CHECKING:
    from hal.wire.reservations import ReservationInfo

TITLE = ("RESV_NAME", "STATE", "START_TIME", "END_TIME", "DURATION", "NODELIST")
NONE = "No reservations in the system"


def reservation_lines(found: list[ReservationInfo], *, header: bool) -> list[str]:
    """The lines of ``sinfo -T`` for ``found``, in the server's order."""
    if not found:
        return [NONE]
    width = max(len(TITLE[0]), *(len(r.name) for r in found))
    rows = [
        (
            r.name,
            r.state,
            timestamp(r.start_time),
            timestamp(r.end_time),
            duration_long(int(r.duration_seconds)),
            compress_hostlist(r.nodes),
        )
        for r in found
    ]
    return [_line(row, width) for row in ([TITLE] if header else []) + rows]


def _line(row: tuple[str, ...], width: int) -> str:
    name, state, start, end, duration, nodes = row
    return f"{name:<{width}}  {state:>8}  {start:>19}  {end:>19}  {duration:>11}  {nodes}"
