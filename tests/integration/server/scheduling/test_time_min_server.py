"""``sbatch --time-min`` in the live server: a job that fits the hole before a blocked
job's reservation only when shortened starts now, its TimeLimit lowered (whole minutes,
not under its TimeMin) in REST, ``scontrol show job`` and the job's own environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.scheduler.plugins import default_profile
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    profile = default_profile()  # bf_interval 1 s: no wait for a second backfill pass
    profile["plugin_args"] = {"backfill": {"interval_s": 1, "resolution_s": 1}}
    overrides = {"scheduler_profile": profile, "scheduler_predictor": "user"}
    data = tmp_path_factory.mktemp("hal")
    with LiveServer(data, config_overrides=overrides) as live, live.agents(2, cpus=2, memory="1G"):
        yield live


def test_a_time_min_job_starts_early_with_a_lowered_limit(
    server: LiveServer, tmp_path: Path
) -> None:
    def whole_node(script: str, limit: int, nodes: int = 1) -> JobSubmit:
        return JobSubmit(
            script=f"#!/bin/sh\n{script}\n", workdir=str(tmp_path), time_limit_seconds=limit,
            nodes_min=nodes, cpus_per_task=2, ntasks_per_node=1,
        )  # fmt: skip

    with server.client() as c:
        long = c.submit(whole_node("sleep 600", 600)).job_id
        wait_until(lambda: c.job(long).state == "RUNNING", message="the long job to start")
        wide = c.submit(whole_node("true", 60, nodes=2)).job_id  # reserved at its end
        wait_until(lambda: c.job(wide).expected_start is not None, message="the reservation")
        reserved = c.job(wide).expected_start
        assert reserved is not None

    seen = tmp_path / "limit.txt"
    sb = server.cli(
        "sbatch", "--parsable", "--time=30", "--time-min=2", "-c", "2",
        "--wrap", f"echo $SLURM_JOB_TIME_LIMIT > {seen}; sleep 600",
        cwd=tmp_path,
    )  # fmt: skip
    assert sb.returncode == 0, sb.stderr
    shortened = int(sb.stdout.strip())
    with server.client() as c:
        wait_until(lambda: c.job(shortened).state == "RUNNING", message="the time-min job")
        info = c.job(shortened)
        assert info.start_time is not None
        limit = info.time_limit_seconds
        # the longest whole minute, not under 2, that ends by the reservation (~9 minutes)
        assert limit % 60 == 0 and 120 <= limit < 1800
        assert info.start_time + limit <= reserved < info.start_time + limit + 60 + 2
        assert c.job(wide).expected_start == reserved  # the blocked job is not delayed
    wait_until(lambda: seen.exists() and seen.read_text().strip(), message="the job's env")
    assert seen.read_text().strip() == str(limit)  # what its agent enforces
    sc = server.cli("scontrol", "show", "job", str(shortened))
    minutes = limit // 60
    assert f"TimeLimit=00:{minutes:02d}:00 TimeMin=00:02:00" in sc.stdout, sc.stdout
    for job in (shortened, wide, long):
        server.cli("scancel", str(job))
