"""A slice of a real trace, as the simulator benchmarks replay it: its first jobs on a
machine of so many CPUs in nodes of so many cores (``hal bench harmonic-dissonance``'s
interference slices and its malleable jobs' slices)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Slice:
    """The first ``jobs`` of ``trace`` on ``procs`` CPUs in nodes of ``cores``."""

    trace: str
    jobs: int
    procs: int
    cores: int
    path: Path | None = None  # a file elsewhere (the tests' traces); else ``trace_file``


def parse_slices(text: str, cores: int, example: str) -> list[Slice]:
    """``TRACE:JOBS:PROCS[:CORES]``, comma-separated (``cores`` where none is given);
    ``ValueError`` naming the part that is not, with ``example``."""
    found = []
    for part in text.split(","):
        bits = part.strip().split(":")
        if len(bits) not in (3, 4) or not all(b.isdigit() for b in bits[1:]):
            raise ValueError(f"{part!r}: write TRACE:JOBS:PROCS[:CORES], e.g. {example}")
        nums = [int(b) for b in bits[1:]]
        found.append(Slice(bits[0], nums[0], nums[1], nums[2] if len(nums) > 2 else cores))
    return found
