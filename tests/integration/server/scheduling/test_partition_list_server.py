"""A job submitted to several partitions (``sbatch -p a,b``) starts in whichever of them
can run it first, as Slurm's: squeue shows the partition list while it waits and the
partition it started in once it runs. HAL queued it in the first partition only, so with
that partition full it waited although the second one stood idle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.model import PartitionConfig
from hal.testing.live import LiveServer, wait_until

PARTITIONS = (
    PartitionConfig(name="a", default=True, nodes=("node1",)),
    PartitionConfig(name="b", nodes=("node2",), max_time_s=3600),
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(
        tmp_path_factory.mktemp("hal"),
        config_overrides={"kill_wait_seconds": 2, "partitions": PARTITIONS},
    )
    with server, server.agents(2, cpus=2, memory="1G"):
        yield server


def _sbatch(server: LiveServer, cwd: Path, *args: str) -> int:
    out = server.cli("sbatch", "--parsable", *args, "--wrap", "sleep 300", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def _squeue(server: LiveServer, job_id: int) -> str:
    out = server.cli("squeue", "-h", "-j", str(job_id), "-o", "%P %T %N")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_job_starts_in_the_listed_partition_that_has_room(
    live: LiveServer, tmp_path: Path
) -> None:
    filler = _sbatch(live, tmp_path, "-p", "a", "-c", "2", "-t", "10")
    with live.client() as c:
        wait_until(lambda: c.job(filler).state == "RUNNING", message="the filler")
        either = _sbatch(live, tmp_path, "-p", "a,b", "-c", "2")
        wait_until(lambda: c.job(either).state == "RUNNING", message="the job in partition b")
        assert _squeue(live, either) == "b RUNNING node2"
        # it started in b, so it has b's time limit (a has none), and a's next job waits
        assert c.job(either).time_limit_seconds == 3600
        later = _sbatch(live, tmp_path, "-p", "a,b", "-c", "1", "-t", "5")
        wait_until(lambda: c.job(later).reason == "Resources", message="the reason")
        assert _squeue(live, later) == "a,b PENDING"
        out = live.cli("squeue", "-h", "-p", "b", "-o", "%i")  # queued in b as well
        assert sorted(out.stdout.split()) == sorted([str(either), str(later)])
        c.cancel(str(filler))
        wait_until(lambda: c.job(later).state == "RUNNING", message="the later job in a")
        assert _squeue(live, later) == "a RUNNING node1"
        for job in (either, later):
            c.cancel(str(job))
