"""Slurm's two duration styles, timestamps, memory units and format strings."""

from __future__ import annotations

import pytest

from hal.compat.formats import (
    Field,
    duration_long,
    duration_short,
    limit_short,
    memory_mib,
    parse_format,
)
from hal.slurm.syntax import compress_indices


@pytest.mark.parametrize(
    ("seconds", "short", "long"),
    [
        (0, "0:00", "00:00:00"),
        (86, "1:26", "00:01:26"),
        (3600, "1:00:00", "01:00:00"),
        (36000 + 61, "10:01:01", "10:01:01"),
        (86400 + 3 * 3600, "1-03:00:00", "1-03:00:00"),
    ],
)
def test_durations(seconds: int, short: str, long: str) -> None:
    assert duration_short(seconds) == short
    assert duration_long(seconds) == long


def test_unlimited() -> None:
    assert limit_short(0) == "UNLIMITED"


@pytest.mark.parametrize(
    ("mib", "text"),
    [
        (0, "0"),
        (50, "50M"),
        (1000, "1000M"),
        (1024, "1G"),
        (1536, "1.50G"),
        (4096, "4G"),
        (1 << 20, "1T"),
    ],
)
def test_memory(mib: int, text: str) -> None:
    assert memory_mib(mib << 20) == text


def test_parse_format() -> None:
    assert parse_format("%.18i %-9P%20Y|%#P%%") == [
        Field("i", 18, True),
        " ",
        Field("P", 9, False),
        Field("Y", 20, False),
        "|",
        Field("P", 0, False, auto=True),
        "%",
    ]


def test_compress_indices() -> None:
    assert compress_indices([3, 1, 2, 7, 9, 10]) == "1-3,7,9-10"
    assert compress_indices([5]) == "5"


def test_memory_counts_whole_mib() -> None:
    """A node's memory is rarely a whole number of MiB; Slurm prints RealMemory and
    CfgTRES mem= in whole MiB (24105M), not 24105.56M."""
    assert memory_mib((24105 << 20) + 590_000) == "24105M"
    assert memory_mib((2048 << 20) + 1) == "2G"
