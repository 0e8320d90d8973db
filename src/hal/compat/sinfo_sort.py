"""sinfo's ``-S``/``--sort``: Slurm's sort list over sinfo's rows.

``-S "#P,-t"`` is a list of format letters, each sorted ascending, or descending after a
``-``; ``#P`` is the partitions in their configured order. As Slurm 22.05.8's sort.c does,
the list is read from its end, one stable sort per letter, so the first letter decides
most; a ``-`` or ``#`` counts only right before its letter (``-#P`` is ``#P``, ``#-P``
is partition names descending). Letters sinfo cannot sort by are skipped, without an
error. The defaults: ``#P,-t``, and ``N`` with ``-N``. Checked against Slurm 22.05.8
(docs/slurm-checks.md "sinfo -S").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hal.compat.node_states import slurm_state_number

TYPE_CHECKING = False  # (the wire schemas, for annotations: commands read records)
if TYPE_CHECKING:
    from hal.wire.nodes import NodeInfo, PartitionInfo

    Group = tuple[PartitionInfo | None, list[NodeInfo]]

DEFAULT_SORT = "#P,-t"
NODE_SORT = "N"
_INFINITE = 2**32  # Slurm's INFINITE time limit sorts above every other


def _first(group: Group) -> str:
    """The row's first node name (Slurm sorts a hostlist by its first host)."""
    return min((n.name for n in group[1]), key=functools.cmp_to_key(_name_cmp), default="")


def _name_cmp(a: str, b: str) -> int:
    """Slurm's node-name order: at the first character that differs, numbers compare as
    numbers when both sides have one there (``n2`` before ``n10``), else the strings."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return _number(a[i:]) - _number(b[i:])
        break
    return (a > b) - (a < b)


def _number(text: str) -> int:
    digits = text[: len(text) - len(text.lstrip("0123456789"))]
    return int(digits) if digits else 0


def _some(group: Group, get: Callable[[NodeInfo], int]) -> int:
    """The smallest value over the row's nodes (Slurm's ``min_cpus``, ``min_mem``)."""
    return min((get(n) for n in group[1]), default=0)


def _reason(group: Group) -> str:
    return (group[1][0].reason or "") if group[1] else ""


def _state(group: Group) -> int:
    return slurm_state_number(group[1][0]) if group[1] else 0


def _time_limit(group: Group) -> int:
    p = group[0]
    return _INFINITE if p is None or p.max_time_seconds <= 0 else p.max_time_seconds


def _partition_name(group: Group) -> str:
    return group[0].name if group[0] else ""


def _job_size(group: Group) -> tuple[int, int]:
    p = group[0]
    return (1, (p.max_nodes or _INFINITE) if p else _INFINITE)


# letter → the key rows sort by; name-like keys compare as Slurm's node names
_KEYS: dict[str, Callable[[Group], Any]] = {
    "P": _partition_name,
    "R": _partition_name,
    "a": lambda g: bool(g[0] and g[0].up),  # down before up, as Slurm's state values
    "l": _time_limit,
    "L": lambda g: g[0].default_time_seconds if g[0] else 0,
    "s": _job_size,
    "p": lambda g: g[0].priority_tier if g[0] else 0,
    "t": _state,
    "T": _state,
    "D": lambda g: len(g[1]),
    "c": lambda g: _some(g, lambda n: n.cpus),
    "m": lambda g: _some(g, lambda n: n.memory_bytes),
    "E": _reason,
    "H": lambda g: g[1][0].reason_time or 0 if g[1] else 0,
    "f": lambda g: ",".join(g[1][0].features) if g[1] else "",
}
_NAMES = frozenset("N")  # the node list (Slurm 22.05.8 sorts "n" by something else)


def sort_rows(groups: list[Group], spec: str, partitions: list[PartitionInfo]) -> None:
    """Sort ``groups`` in place by Slurm's sort list ``spec``."""
    order = {p.name: i for i, p in enumerate(partitions)}
    for i in range(len(spec) - 1, -1, -1):
        letter = spec[i]
        if letter in ",#+-":
            continue
        before = spec[i - 1] if i > 0 else ""
        reverse = before == "-"
        if letter == "P" and before == "#":
            groups.sort(key=lambda g: order.get(g[0].name, 0) if g[0] else 0, reverse=reverse)
        elif letter in _NAMES:
            by_name = functools.cmp_to_key(_name_cmp)
            groups.sort(key=lambda g: by_name(_first(g)), reverse=reverse)
        elif letter in _KEYS:
            groups.sort(key=_KEYS[letter], reverse=reverse)
