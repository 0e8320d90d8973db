"""``sbatch --mincpus=N``, as Slurm's (on the Slurm 22.05.8 peer): each of
the job's nodes gives it at least N CPUs (``SLURM_CPUS_ON_NODE``,
``SLURM_JOB_CPUS_PER_NODE``), ``scontrol show job`` shows ``MinCPUsNode=N`` and squeue's
``%c`` N; a node count no node can give is refused at submit. Before, HAL refused the
option."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("mincpus")) as live, live.agents(1, cpus=2):
        yield live


def test_mincpus_gives_each_node_that_many_cpus(server: LiveServer, tmp_path: Path) -> None:
    script = "echo $SLURM_CPUS_ON_NODE $SLURM_JOB_CPUS_PER_NODE; sleep 15"  # (a loaded run)
    done = server.cli(
        "sbatch", "--parsable", "--mincpus=2", "-o", "out.txt", "--wrap", script, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    wait_until((tmp_path / "out.txt").exists, 30, message="started")
    shown = server.cli("scontrol", "show", "job", job).stdout
    assert " MinCPUsNode=2 " in shown and " NumCPUs=2 " in shown, shown
    assert server.cli("squeue", "-h", "-j", job, "-o", "%c|%C").stdout.strip() == "2|2"
    wait_until(lambda: (tmp_path / "out.txt").read_text().strip() != "", 30)
    assert (tmp_path / "out.txt").read_text().split() == ["2", "2"]
    server.cli("scancel", job)


def test_mincpus_no_node_has_is_refused(server: LiveServer, tmp_path: Path) -> None:
    done = server.cli("sbatch", "--mincpus=3", "--wrap", "true", cwd=tmp_path)
    assert done.returncode == 1
    assert "Requested node configuration is not available" in done.stderr, done.stderr
