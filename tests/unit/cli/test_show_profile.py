"""``hal show``'s Profile line: the class, the latency-sensitive mark, and the running
job's measured behaviour, pressure only where the kernel reported it."""

from __future__ import annotations

from datetime import datetime

from hal.cli.show import job_lines
from hal.core.resources import MiB
from hal.wire.jobs import JobInfo, JobProfileSample

T0 = datetime(2026, 3, 1, 9, 30, 0).timestamp()


def info(**fields: object) -> JobInfo:
    base: dict[str, object] = {
        "id": 7, "display_id": "7", "name": "serve", "user": "alice", "partition": "batch",
        "state": "RUNNING", "state_code": "R", "reason": "None", "priority": 1,
        "submit_time": T0, "start_time": T0, "time_limit_seconds": 0, "node_count": 1,
        "cpus": 1, "memory_bytes": 0, "gpus": 0, "ntasks": 1, "cpus_per_task": 1,
        "workdir": "/w", "stdout": "/w/out", "stderr": "/w/out",
    }  # fmt: skip
    return JobInfo.model_validate(base | fields)


def sample(**fields: object) -> JobProfileSample:
    base: dict[str, object] = {
        "interval_seconds": 2.0, "source": "cgroup2", "cpu_util": 0.97,
        "rss_bytes": 300 * MiB, "read_bytes_per_s": 0.0, "write_bytes_per_s": 4.8e8,
        "net_bytes_per_s": 1200.0, "cpu_pressure": 0.41, "memory_pressure": 0.0,
        "io_pressure": 0.083,
    }  # fmt: skip
    return JobProfileSample.model_validate(base | fields)


def profile_line(job: JobInfo) -> str | None:
    found = [x.strip() for x in job_lines(job, T0 + 10) if "Profile=" in x or "CPUBusy=" in x]
    return found[0] if found else None


def test_a_running_job_shows_what_it_does_and_its_class() -> None:
    job = info(profile=sample(), profile_class="io", latency_sensitive=True)
    assert profile_line(job) == (
        "Profile=io LatencySensitive=yes CPUBusy=0.97 RSS=300.0 MiB Read=0 B/s "
        "Write=480.0 MB/s Net=1.2 kB/s Pressure=cpu:41%,memory:0%,io:8%"
    )


def test_what_is_not_reported_is_left_out() -> None:
    """cgroup1 without an accounting cgroup: no pressure; telemetry off: no network."""
    bare = sample(source="proc", cpu_pressure=None, memory_pressure=None, io_pressure=None,
                  net_bytes_per_s=None)  # fmt: skip
    line = profile_line(info(profile=bare))
    assert line is not None and line.startswith("CPUBusy=0.97 ")
    assert "Pressure" not in line and "Net=" not in line and "LatencySensitive" not in line
    assert profile_line(info()) is None  # never sampled, never classed
    assert profile_line(info(state="COMPLETED", profile_class="cpu")) == "Profile=cpu"
