"""srun's task distribution (``-m``/``--distribution``, ``SLURM_DISTRIBUTION``): how a
step's ranks are dealt to its nodes.

Only the first part, the node level, moves tasks: ``block`` (node 0 runs ranks 0..k-1,
node 1 the next ...), ``cyclic`` (rank r on node r mod N, a full node skipped),
``plane=S`` (blocks of S consecutive ranks dealt round-robin) and ``arbitrary`` (rank i on
the i-th node ``-w`` names, a node named as often as it runs tasks). The socket and core
parts (``block:cyclic``) and ``,Pack``/``,NoPack`` are accepted and only echoed in
``SLURM_DISTRIBUTION``: HAL binds no tasks to sockets or cores. Spellings and messages are
Slurm 22.05.8's (docs/slurm-checks.md, srun).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hal.core.errors import InvalidRequest

KINDS = ("block", "cyclic", "plane", "arbitrary")
_LOWER = ("block", "cyclic", "fcyclic", "*")  # the socket and core parts
_OPTIONS = ("pack", "nopack")
INVALID = "Invalid --distribution specification"


@dataclass(frozen=True, slots=True)
class Distribution:
    """A parsed ``-m`` value; ``kind`` "" is srun's default (block, or cyclic when there
    are no more tasks than nodes: the same placement, named so in the variable)."""

    kind: str = ""
    plane_size: int = 0
    tail: str = ""  # ":cyclic", ",pack" ...: as written (lower case), only echoed

    def variable(self, ntasks: int, nnodes: int) -> str:
        """``SLURM_DISTRIBUTION`` as Slurm's srun sets it for the tasks."""
        kind = self.kind or ("cyclic" if ntasks <= nnodes else "block")
        return kind + self.tail

    @property
    def spec(self) -> str:
        """The value to send on, which ``parse_distribution`` reads back."""
        if not self.kind:
            return ""
        head = f"plane={self.plane_size}" if self.kind == "plane" else self.kind
        return head + self.tail


def parse_distribution(text: str) -> Distribution:
    """``-m`` or ``SLURM_DISTRIBUTION``; raises ``InvalidRequest`` with srun's lines."""
    value = text.strip().lower()
    if not value:
        return Distribution()
    value, comma, option = value.partition(",")
    if comma and option not in _OPTIONS:
        raise InvalidRequest(INVALID, field="distribution")
    head, *lower = value.split(":")
    if len(lower) > 2 or any(part not in _LOWER for part in lower):
        raise InvalidRequest(INVALID, field="distribution")
    plane_size = 0
    if head.startswith("plane"):
        size = head.removeprefix("plane").removeprefix("=")
        if not head.startswith("plane=") or not size.isdigit() or int(size) < 1:
            raise InvalidRequest(
                f"Invalid plane size or size not specified\n{INVALID}", field="distribution"
            )
        head, plane_size = "plane", int(size)
    elif head == "*":
        head = ""
    elif head not in KINDS:
        raise InvalidRequest(INVALID, field="distribution")
    # Slurm writes a part left to its default ("*") as that default: cyclic
    tail = "".join(":" + ("cyclic" if part == "*" else part) for part in lower)
    if comma:
        tail += "," + option
    return Distribution(head, plane_size, tail)


def deal(ntasks: int, room: Sequence[int], unit: int = 1) -> list[list[int]]:
    """Ranks 0..ntasks-1 dealt round-robin to nodes with ``room`` tasks each, ``unit``
    consecutive ranks at a time (1: cyclic; S: plane=S), a full node passed over. The
    caller sees to it that the room holds them all."""
    ranks: list[list[int]] = [[] for _ in room]
    node, rank = 0, 0
    while rank < ntasks:
        while len(ranks[node]) >= room[node]:
            node = (node + 1) % len(room)
        take = min(unit, ntasks - rank, room[node] - len(ranks[node]))
        ranks[node].extend(range(rank, rank + take))
        rank += take
        node = (node + 1) % len(room)
    return ranks
