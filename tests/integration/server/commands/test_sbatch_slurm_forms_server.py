"""sbatch forms a real Slurm 22.05.8 took differently, on a real server with real agents:
``--mem=100K`` (1 MiB, not a whole node), ``-N 2 -n 1`` (one node, with sbatch's warning),
``#SBATCH-J name`` (applied with no space), the batch script's ``$0``
(``.../slurm_script``) and ``--mem-per-cpu=0`` (all of the node's memory, as ``--mem=0``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("forms")) as srv, srv.agents(2, cpus=2, memory="1G"):
        yield srv


def completed(server: LiveServer, job: int) -> bool:
    with server.client() as c:
        jobs = c.jobs(ids=[str(job)], include_finished=True)
    return bool(jobs) and jobs[0].state == "COMPLETED"


def run(server: LiveServer, tmp_path: Path, script: str, *argv: str) -> tuple[int, str, str]:
    """Submit ``script`` with ``argv``; (job id, sbatch's stderr, the job's output)."""
    (tmp_path / "job.sh").write_text(script)
    done = server.cli("sbatch", "--parsable", "-o", "out.txt", *argv, "job.sh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout.strip())
    wait_until(lambda: completed(server, job), message=f"job {job} to complete")
    return job, done.stderr, (tmp_path / "out.txt").read_text()


def test_fewer_tasks_than_nodes_runs_on_one_node_with_slurms_warning(
    server: LiveServer, tmp_path: Path
) -> None:
    """Slurm: "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1",
    NumNodes=1. HAL allocated both agents."""
    script = '#!/bin/sh\necho "nodes=$SLURM_NNODES"\n'
    _, err, out = run(server, tmp_path, script, "-N", "2", "-n", "1")
    assert err == "sbatch: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"
    assert out == "nodes=1\n"


def test_memory_in_kib_is_one_mib_not_the_whole_node(server: LiveServer, tmp_path: Path) -> None:
    """Slurm: ``--mem=100K`` is MinMemoryNode=1M and the job's SLURM_MEM_PER_NODE is 1; HAL
    took it for ``--mem=0``, all of the node's memory (1024 here)."""
    script = '#!/bin/sh\necho "mem=$SLURM_MEM_PER_NODE"\n'
    _, _, out = run(server, tmp_path, script, "--mem=100K")
    assert out == "mem=1\n"


def test_a_directive_without_a_space_and_the_scripts_name(
    server: LiveServer, tmp_path: Path
) -> None:
    """Slurm applies ``#SBATCH-J nospace`` and runs the script as
    ``<spool>/job<ID>/slurm_script``; HAL ignored the line and named the copy ``script``."""
    script = '#!/bin/sh\n#SBATCH-J nospace\necho "$SLURM_JOB_NAME $(basename "$0")"\n'
    _, _, out = run(server, tmp_path, script)
    assert out == "nospace slurm_script\n"


def test_mem_per_cpu_zero_is_all_of_the_nodes_memory(server: LiveServer, tmp_path: Path) -> None:
    """Slurm 22.05.8 takes ``--mem-per-cpu=0`` as ``--mem=0``: the job runs
    with all of its node's memory (``TRES=cpu=2,mem=<the node's>``, ``MinMemoryNode=0``),
    and so does a step's: it gets all of the job's memory and holds none of it (an
    ``--exact --mem=800`` step runs beside it). HAL refused both (sbatch: "must be more
    than 0"; srun: "mem_per_cpu: Input should be greater than or equal to 1")."""
    srun = f"{sys.executable} -m hal.cli.main srun"
    script = (
        "#!/bin/sh\n"
        f"{srun} -n1 --exact --mem-per-cpu=0 sh -c 'echo step ran; sleep 3' &\n"
        "sleep 1\n"
        f"{srun} -n1 --exact --mem=800 sh -c 'echo beside it'\n"
        "wait\n"
    )
    job, _, out = run(server, tmp_path, script, "-N1", "-n2", "--mem-per-cpu=0")
    assert out == "step ran\nbeside it\n", out  # (no "step creation temporarily disabled")
    shown = server.cli("scontrol", "show", "job", str(job))
    assert shown.returncode == 0, shown.stderr
    assert "TRES=cpu=2,mem=1G,node=1" in shown.stdout, shown.stdout
    assert "MinMemoryNode=0 " in shown.stdout, shown.stdout
