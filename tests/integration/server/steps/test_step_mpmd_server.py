"""MPI/MPMD steps on a real server with two real agents: ``srun -m cyclic`` deals ranks
round-robin over the job's nodes, ``srun --multi-prog`` runs each rank's own program on
its node (a file that leaves a rank out starts nothing), and ``srun --het-group=1`` runs
on the second component's node of a het job."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("mpmd")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as srv,
        srv.agents(2, cpus=2, memory="1G"),
    ):
        yield srv


def run_job(server: LiveServer, tmp_path: Path, body: str, *args: str) -> str:
    """Submit ``body`` as a batch script, wait for its end; its output file's text."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + body)
    done = server.cli("sbatch", "--parsable", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())

    def ended() -> bool:
        with server.client() as c:
            return c.job(job_id).state == "COMPLETED"

    wait_until(ended, 60, message="the job to end")
    return (tmp_path / f"slurm-{job_id}.out").read_text()


def test_cyclic_deals_ranks_round_robin_over_the_nodes(server: LiveServer, tmp_path: Path) -> None:
    """`srun -m cyclic` in an -N2 -n4 job: ranks 0 and 2 on node1, 1 and 3 on node2,
    each node's local ids in rank order, labels by rank; block (the default) keeps
    0 and 1 together."""
    task = (
        "echo rank=$SLURM_PROCID local=$SLURM_LOCALID node=$SLURM_NODEID "
        "host=$SLURMD_NODENAME dist=$SLURM_DISTRIBUTION"
    )
    out = run_job(
        server,
        tmp_path,
        f"{SRUN} -l -m cyclic sh -c '{task}'\n{SRUN} -l sh -c '{task}'\n",
        "-N2",
        "-n4",
    )
    lines = out.splitlines()
    cyclic, block = sorted(lines[:4]), sorted(lines[4:8])
    assert cyclic == [
        "0: rank=0 local=0 node=0 host=node1 dist=cyclic",
        "1: rank=1 local=0 node=1 host=node2 dist=cyclic",
        "2: rank=2 local=1 node=0 host=node1 dist=cyclic",
        "3: rank=3 local=1 node=1 host=node2 dist=cyclic",
    ], out
    assert block == [
        "0: rank=0 local=0 node=0 host=node1 dist=block",
        "1: rank=1 local=1 node=0 host=node1 dist=block",
        "2: rank=2 local=0 node=1 host=node2 dist=block",
        "3: rank=3 local=1 node=1 host=node2 dist=block",
    ], out


def test_multi_prog_runs_each_rank_s_line_on_its_node(server: LiveServer, tmp_path: Path) -> None:
    """A coordinator on rank 0 and workers on 1-3 across both nodes, %t and %o replaced,
    the argument after the file appended; then a file without rank 3 is refused before
    any task starts (srun exits 1 with Slurm's message)."""
    (tmp_path / "mp.conf").write_text(
        "# MPMD: one coordinator, three workers\n"
        "0    sh -c 'echo coordinator on $SLURMD_NODENAME: $0' \n"
        "1-3  sh -c 'echo worker $0 of rank $1 on $SLURMD_NODENAME: $2' %o %t\n"
    )
    (tmp_path / "short.conf").write_text("0-2 touch started.%t\n")
    out = run_job(
        server,
        tmp_path,
        f"{SRUN} -l --multi-prog mp.conf extra\necho exit=$?\n"
        f"{SRUN} -n4 --multi-prog short.conf\necho short exit=$?\n",
        "-N2",
        "-n4",
    )
    assert sorted(line for line in out.splitlines() if line[:1].isdigit()) == [
        "0: coordinator on node1: extra",
        "1: worker 0 of rank 1 on node1: extra",
        "2: worker 1 of rank 2 on node2: extra",
        "3: worker 2 of rank 3 on node2: extra",
    ], out
    assert "exit=0" in out, out
    assert "srun: error: Configuration file short.conf invalid, no record for task id 3" in out
    assert "short exit=1" in out, out
    assert not list(tmp_path.glob("started.*"))


def test_het_group_runs_the_step_on_the_component_s_node(
    server: LiveServer, tmp_path: Path
) -> None:
    """`sbatch -w node1 : -w node2`: the script runs on node1; `srun --het-group=1`
    runs on node2, the default step on node1."""
    task = "echo host=$SLURMD_NODENAME"
    out = run_job(
        server,
        tmp_path,
        f"{SRUN} --het-group=1 sh -c '{task}'\n{SRUN} sh -c '{task} default'\n",
        "-w",
        "node1",
        ":",
        "-w",
        "node2",
    )
    assert out.splitlines()[:2] == ["host=node2", "host=node1 default"], out
