"""``classify``: the class of the resource that dominates a job's measured profile, by
the thresholds its docstring justifies; the job's allocation is the yardstick of its
CPU and memory."""

from __future__ import annotations

import pytest

from hal.core.profiles import (
    CLASSES,
    CPU,
    IO,
    IO_BYTES_PER_S,
    LIGHT,
    MEMORY,
    NET_BYTES_PER_S,
    NETWORK,
    JobProfile,
    classify,
)

MiB = 1 << 20
GiB = 1 << 30
MB = 1e6


def profile(**fields: object) -> JobProfile:
    base: dict[str, object] = {
        "cpu_util": 0.0, "rss_bytes": 10 * MiB, "read_bytes_per_s": 0.0,
        "write_bytes_per_s": 0.0, "net_bytes_per_s": 0.0, "cpus": 4, "memory_bytes": 8 * GiB,
    }  # fmt: skip
    return JobProfile(**(base | fields))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # (what the job does, the class)
        ({}, LIGHT),  # a sleeper
        ({"cpu_util": 4.0}, CPU),  # all four CPUs busy
        ({"cpu_util": 2.0}, CPU),  # half of them: the threshold
        ({"cpu_util": 1.9}, LIGHT),  # under half of four
        ({"cpu_util": 1.0, "cpus": 1}, CPU),  # one of one
        ({"cpu_util": 0.4, "cpus": 1, "cpu_pressure": 0.5}, CPU),  # starved, still wants it
        ({"cpu_util": 0.1, "cpus": 1, "cpu_pressure": 0.05}, LIGHT),
        ({"cpu_util": 3.0, "cpus": 0}, CPU),  # allocation unknown: CPUs busy as they are
        ({"write_bytes_per_s": 25 * MB}, IO),
        ({"read_bytes_per_s": 10 * MB, "write_bytes_per_s": 10 * MB}, IO),  # summed
        ({"write_bytes_per_s": 15 * MB}, LIGHT),
        ({"write_bytes_per_s": 2 * MB, "io_pressure": 0.3}, IO),  # fsync-bound, few bytes
        ({"net_bytes_per_s": 50 * MB}, NETWORK),
        ({"net_bytes_per_s": 5 * MB}, LIGHT),
        ({"memory_pressure": 0.2}, MEMORY),  # stalls on reclaim
        ({"rss_bytes": 7 * GiB}, MEMORY),  # most of its 8 GiB
        ({"rss_bytes": 4 * GiB}, LIGHT),  # half of it
        ({"rss_bytes": 200 * MiB, "memory_bytes": 256 * MiB}, LIGHT),  # under the floor
        ({"rss_bytes": 7 * GiB, "memory_bytes": 0}, LIGHT),  # allocation unknown
        # several at once: the one furthest past its threshold
        ({"cpu_util": 4.0, "write_bytes_per_s": 400 * MB}, IO),
        ({"cpu_util": 4.0, "write_bytes_per_s": 25 * MB}, CPU),
        ({"cpu_util": 4.0, "net_bytes_per_s": 200 * MB}, NETWORK),
        ({"write_bytes_per_s": 30 * MB, "net_bytes_per_s": 100 * MB}, NETWORK),
    ],
)
def test_the_dominant_resource_is_the_class(fields: dict[str, object], expected: str) -> None:
    assert classify(profile(**fields)) == expected


def test_every_class_is_reachable_and_named_as_the_model_reads_them() -> None:
    """The interference model and the dissonance plugin key on these strings."""
    assert CLASSES == ("cpu", "memory", "io", "network", "light")
    seen = {
        classify(profile(cpu_util=4.0)),
        classify(profile(memory_pressure=1.0)),
        classify(profile(read_bytes_per_s=IO_BYTES_PER_S)),
        classify(profile(net_bytes_per_s=NET_BYTES_PER_S)),
        classify(profile()),
    }
    assert seen == set(CLASSES)
