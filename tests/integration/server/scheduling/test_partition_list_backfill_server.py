"""Backfill of a job submitted to several partitions (``sbatch -p a,b``) in the live
server: Slurm's backfill plans it in each of them, so it starts in a hole of the second
while the first is full. HAL planned it in the first only, where it waited for the long
job to end although the hole in ``b`` was free for longer than it asked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.model import PartitionConfig
from hal.scheduler.plugins import default_profile
from hal.testing.live import LiveServer, wait_until

PARTITIONS = (
    PartitionConfig(name="a", default=True, nodes=("node1",)),
    PartitionConfig(name="b", nodes=("node2",)),
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # bf_interval 1 s (not 30 s), and Slurm's predictor (the requested time), so that the
    # planned start stays put
    profile = default_profile()
    profile["plugin_args"] = {"noderesources": {"score": "best_fit"}, "backfill": {"interval_s": 1}}
    overrides = {
        "kill_wait_seconds": 2,
        "partitions": PARTITIONS,
        "scheduler_profile": profile,
        "scheduler_predictor": "user",
    }
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides=overrides)
    with server, server.agents(2, cpus=2, memory="1G"):
        yield server


def _sbatch(server: LiveServer, cwd: Path, *args: str) -> int:
    out = server.cli("sbatch", "--parsable", *args, "--wrap", "sleep 300", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_a_job_full_in_its_first_partition_backfills_in_the_second(
    live: LiveServer, tmp_path: Path
) -> None:
    """``a`` (node1) is full for 10 minutes; in ``b`` (node2) one CPU is free until
    ``b``'s head, waiting for both, starts in 10 minutes. A 2-minute one-CPU job
    submitted to ``a,b`` after that head starts in ``b`` at once, and the head keeps
    its expected start."""
    with live.client() as c:
        full_a = _sbatch(live, tmp_path, "-p", "a", "-c", "2", "-t", "10")
        half_b = _sbatch(live, tmp_path, "-p", "b", "-c", "1", "-t", "10")
        for job in (full_a, half_b):
            wait_until(lambda job=job: c.job(job).state == "RUNNING", message=f"job {job}")
        head = _sbatch(live, tmp_path, "-p", "b", "-c", "2", "-t", "5")
        wait_until(lambda: c.job(head).expected_start is not None, message="b's head's start")
        planned = c.job(head).expected_start
        either = _sbatch(live, tmp_path, "-p", "a,b", "-c", "1", "-t", "2")
        wait_until(lambda: c.job(either).state == "RUNNING", message="the job backfilled in b")
        out = live.cli("squeue", "-h", "-j", str(either), "-o", "%P %T %N")
        assert out.stdout.strip() == "b RUNNING node2", out.stderr
        assert c.job(either).time_limit_seconds == 120
        assert (c.job(head).state, c.job(head).expected_start) == ("PENDING", planned)
        for job in (either, head, half_b, full_a):
            c.cancel(str(job))
