"""The agent's job profiles: counters read from a cgroup2 folder laid out as the kernel
writes it, rates over the window between two reads, bounds, and a first read or a
change of source giving no profile."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from hal.agent.profile import Counters, ProfileSampler, proc_io, read_counters
from hal.wire.agent import JobUsage
from hal.wire.jobs import JobProfileSample

PRESSURE = (
    "some avg10=1.00 avg60=0.50 avg300=0.10 total={}\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


def cgroup(path: Path, usage_usec: int, rbytes: int, wbytes: int, stall_us: int) -> str:
    path.mkdir(exist_ok=True)
    (path / "cpu.stat").write_text(f"usage_usec {usage_usec}\nuser_usec 1\nsystem_usec 2\n")
    (path / "io.stat").write_text(
        f"8:0 rbytes={rbytes // 2} wbytes={wbytes} rios=1 wios=1 dbytes=0 dios=0\n"
        f"8:16 rbytes={rbytes - rbytes // 2} wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n"
    )
    (path / "memory.current").write_text("123456\n")
    for name in ("cpu", "memory", "io"):
        (path / f"{name}.pressure").write_text(PRESSURE.format(stall_us))
    return str(path)


def test_rates_and_stall_shares_over_the_window(tmp_path: Path) -> None:
    group = tmp_path / "job_1.0"
    sampler = ProfileSampler()
    first = read_counters(
        100.0,
        proc_cpu_seconds=0.0,
        rss_bytes=1,
        pids=[],
        cgroup2=cgroup(group, 1_000_000, 0, 0, 0),
    )
    assert sampler.profile((1, 0), first, None) is None  # no window yet
    later = read_counters(
        102.0,
        proc_cpu_seconds=0.0,
        rss_bytes=5 << 20,
        pids=[],
        cgroup2=cgroup(group, 4_000_000, 40_000_000, 10_000_000, 500_000),
    )
    p = sampler.profile((1, 0), later, 1e6)
    assert p is not None
    assert p.source == "cgroup2" and p.interval_seconds == 2.0
    assert p.cpu_util == pytest.approx(1.5)  # 3 CPU seconds in 2
    assert p.read_bytes_per_s == pytest.approx(20e6)  # both devices
    assert p.write_bytes_per_s == pytest.approx(5e6)
    assert p.cpu_pressure == p.memory_pressure == p.io_pressure == pytest.approx(0.25)
    assert (p.rss_bytes, p.memory_bytes, p.net_bytes_per_s) == (5 << 20, 123456, 1e6)


def test_a_counter_that_went_back_counts_nothing_and_shares_stay_within_one() -> None:
    sampler = ProfileSampler()
    before = Counters(0.0, "proc", 10.0, 500, 500, 0, None, (1.0, None, None))
    sampler.profile((1, 0), before, None)
    after = Counters(1.0, "proc", 9.0, 100, 900, 0, None, (9.0, None, None))
    p = sampler.profile((1, 0), after, None)
    assert p is not None
    assert (p.cpu_util, p.read_bytes_per_s, p.write_bytes_per_s) == (0.0, 0.0, 400.0)
    assert p.cpu_pressure == 1.0  # 8 s stalled in 1 s: a clock skew, capped
    assert p.memory_pressure is None and p.io_pressure is None


def test_a_new_source_starts_a_new_window_and_ended_jobs_are_forgotten() -> None:
    sampler = ProfileSampler()
    sampler.profile((1, 0), Counters(0.0, "proc", 0.0, 0, 0, 0, None), None)
    assert sampler.profile((1, 0), Counters(2.0, "cgroup2", 50.0, 0, 0, 0, None), None) is None
    assert sampler.profile((1, 0), Counters(4.0, "cgroup2", 51.0, 0, 0, 0, None), None)
    sampler.keep([(2, 0)])
    assert sampler.profile((1, 0), Counters(6.0, "cgroup2", 52.0, 0, 0, 0, None), None) is None


def test_without_a_cgroup_the_processes_counters_are_read(tmp_path: Path) -> None:
    """/proc/PID/io of this very process: the bytes it wrote and synced to disk."""
    path = tmp_path / "data"
    before = proc_io([os.getpid()])
    with open(path, "wb") as f:
        f.write(os.urandom(4 << 20))
        f.flush()
        os.fsync(f.fileno())
    after = proc_io([os.getpid(), 2**22 + 7])  # (a pid that does not exist: nothing)
    assert after[1] - before[1] >= 4 << 20
    counters = read_counters(
        0.0, proc_cpu_seconds=3.0, rss_bytes=7, pids=[os.getpid()], cgroup1_memory=""
    )
    assert counters.source == "proc" and counters.cpu_seconds == 3.0
    assert counters.stalls == (None, None, None) and counters.memory_bytes is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpu_util", -0.1),
        ("cpu_util", 1e6),
        ("read_bytes_per_s", -1.0),
        ("write_bytes_per_s", 1e14),
        ("net_bytes_per_s", 1e14),
        ("cpu_pressure", 1.01),
        ("io_pressure", -0.01),
        ("interval_seconds", 0.0),
        ("rss_bytes", -1),
        ("source", "cgroup3"),
    ],
)
def test_the_wire_refuses_figures_out_of_bounds(field: str, value: object) -> None:
    fine: dict[str, object] = {
        "interval_seconds": 2.0, "source": "cgroup1", "cpu_util": 1.0, "rss_bytes": 1,
        "read_bytes_per_s": 0.0, "write_bytes_per_s": 0.0,
    }  # fmt: skip
    JobProfileSample.model_validate(fine)
    with pytest.raises(ValidationError):
        JobProfileSample.model_validate(fine | {field: value})


def test_an_older_agents_usage_without_a_profile_is_still_taken() -> None:
    old = {"job_id": 1, "attempt": 0, "rss_bytes": 1, "max_rss_bytes": 1, "cpu_seconds": 0.5}
    assert JobUsage.model_validate(old).profile is None
