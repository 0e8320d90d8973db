"""GPU interconnect islands within a node (NVLink/NVSwitch domains), and which GPUs a
job gets.

A node's islands are disjoint sets of its GPU indices whose members talk over NVLink.
``()`` means one island of all the node's GPUs (the common case: an NVSwitch board, or
nothing known); a GPU no island lists is an island of its own. A job's GPUs on a node
come from one island whenever one has enough free GPUs (the fullest such island: best
fit, so large islands stay whole for large jobs); otherwise from the fewest islands
(the freest first). ``--topology required=nvlink`` makes "from one island" a condition
of placement instead of a preference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hal.core.errors import InvalidRequest

Islands = tuple[tuple[int, ...], ...]

# The --topology level of one NVLink domain inside a node.
NVLINK = "nvlink"

_HINT = "write islands as comma-separated ranges of GPU indices, e.g. 0-3,4-7 or 0+2,1+3"


def complete_islands(islands: Islands, gpus: int) -> Islands:
    """``islands`` of a node with ``gpus`` GPUs, every GPU in exactly one (unlisted
    GPUs as islands of their own). Raises ``InvalidRequest`` on an index out of range or
    listed twice."""
    if not islands:
        return (tuple(range(gpus)),) if gpus else ()
    seen: set[int] = set()
    for island in islands:
        for gid in island:
            if not 0 <= gid < gpus:
                has = f"{gpus} GPU(s), indices 0-{gpus - 1}" if gpus else "no GPUs"
                raise InvalidRequest(
                    f"GPU island {list(island)} names GPU {gid}; the node has {has} "
                    "(give --gpus N with --gpu-islands where NVML finds none)",
                    field="gpu_islands",
                )
            if gid in seen:
                raise InvalidRequest(f"GPU {gid} is in two islands; {_HINT}", field="gpu_islands")
            seen.add(gid)
    rest = tuple((g,) for g in range(gpus) if g not in seen)
    return tuple(tuple(sorted(i)) for i in islands if i) + rest


def parse_gpu_islands(text: str) -> Islands:
    """``"0-3,4-7"`` (two islands of four) or ``"0+2,1+3"`` → islands. Indices are
    checked against the GPU count by ``complete_islands``."""
    islands: list[tuple[int, ...]] = []
    for item in text.split(","):
        ids: list[int] = []
        for part in item.strip().split("+"):
            lo, dash, hi = part.strip().partition("-")
            try:
                first, last = int(lo), int(hi if dash else lo)
            except ValueError:
                raise InvalidRequest(
                    f"invalid GPU islands {text!r}; {_HINT}", field="gpu_islands"
                ) from None
            if first < 0 or last < first:
                raise InvalidRequest(
                    f"invalid GPU range {part.strip()!r} in {text!r}; {_HINT}",
                    field="gpu_islands",
                )
            ids.extend(range(first, last + 1))
        islands.append(tuple(ids))
    return tuple(islands)


def free_per_island(islands: Islands, used: int) -> list[int]:
    """Free GPUs of each island; ``used`` is a bitmask of held GPU indices."""
    return [sum(1 for g in island if not used >> g & 1) for island in islands]


def largest_free_island(islands: Islands, gpus: int, used: int) -> int:
    """The most free GPUs any one island of the node has."""
    return max(free_per_island(complete_islands(islands, gpus), used), default=0)


def pick_gpus(islands: Islands, gpus: int, used: int, count: int) -> tuple[int, ...]:
    """``count`` free GPU indices of a node: all from the fullest island that has
    ``count`` free (best fit; ties: the first island), else from the fewest islands,
    freest first. Lowest indices first within an island. Fewer than ``count`` when the
    node has fewer free."""
    if count <= 0:
        return ()
    whole = complete_islands(islands, gpus)
    free = free_per_island(whole, used)
    fitting = [k for k, f in enumerate(free) if f >= count]
    if fitting:
        order = [min(fitting, key=lambda k: (free[k], k))]
    else:
        order = sorted(range(len(whole)), key=lambda k: (-free[k], k))
    ids: list[int] = []
    for k in order:
        for gid in whole[k]:
            if not used >> gid & 1:
                ids.append(gid)
                if len(ids) == count:
                    return tuple(sorted(ids))
    return tuple(sorted(ids))


def islands_from_links(gpus: int, linked: Callable[[int, int], bool]) -> Islands:
    """The islands of ``gpus`` GPUs: the connected components of the "talks over
    NVLink" relation ``linked(i, j)`` (asked for i < j only). NVML answers it on a real
    node (``hal.agent.gpus``); tests replay recorded matrices."""
    parent = list(range(gpus))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(gpus):
        for j in range(i + 1, gpus):
            if root(i) != root(j) and linked(i, j):
                parent[root(j)] = root(i)
    groups: dict[int, list[int]] = {}
    for g in range(gpus):
        groups.setdefault(root(g), []).append(g)
    return tuple(tuple(members) for members in sorted(groups.values()))


def islands_text(islands: Sequence[Sequence[int]]) -> str:
    """Islands as ``parse_gpu_islands`` reads them, ranges where contiguous."""
    out: list[str] = []
    for island in islands:
        ids = sorted(island)
        if ids and ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1:
            out.append(f"{ids[0]}-{ids[-1]}")
        else:
            out.append("+".join(str(g) for g in ids))
    return ",".join(out)
