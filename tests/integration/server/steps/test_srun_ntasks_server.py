"""srun in a two-node job takes the job's task count (``SLURM_NTASKS``) as its ``-n``, as
Slurm 22.05.8's srun reads it: ``srun -N2 app`` in an ``-N2 -n4`` job starts 4 tasks, as
MPI scripts expect (it started one a node), and one in an ``-N2`` job without a count
starts one a node."""

from __future__ import annotations

import sys
from pathlib import Path

from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"


def run(server: LiveServer, tmp: Path, body: str, *args: str) -> str:
    out = tmp / "out.txt"
    done = server.cli(
        "sbatch", "--parsable", "-o", str(out), *args, "--wrap", body, cwd=tmp
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = int(done.stdout.strip())
    with server.client() as c:
        wait_until(lambda: c.job(job).state not in ("PENDING", "RUNNING"), 60, message="end")
        assert c.job(job).state == "COMPLETED", out.read_text()
    return out.read_text()


def test_srun_takes_the_jobs_task_count(server: LiveServer, tmp_path: Path) -> None:
    text = run(server, tmp_path, f"{SRUN} -N2 -l hostname | sort", "-N2", "-n4")
    assert [line.split(":")[0] for line in text.splitlines()] == ["0", "1", "2", "3"]
    text = run(server, tmp_path, f"{SRUN} -N2 hostname | wc -l", "-N2")
    assert text.strip() == "2"  # no count asked: one a node


def test_a_tasks_per_node_that_does_not_match_is_dropped_with_slurms_warning(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    body = f"{SRUN} --ntasks-per-node=1 hostname | wc -l"
    text = run(server, tmp_path, body, "-N2", "--ntasks-per-node=2")
    assert text.splitlines() == [
        "srun: Warning: can't honor --ntasks-per-node set to 1 which doesn't match the "
        "requested tasks 4 with the number of requested nodes 2. Ignoring --ntasks-per-node.",
        "4",
    ]
