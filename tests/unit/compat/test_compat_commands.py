"""The dispatcher: command names, client lifetime and unmapped client errors."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from compat_fakes import FakeClient, call

from hal.compat.commands import run
from hal.core.errors import Unavailable


def test_unknown_command() -> None:
    result = call(FakeClient(), "sattach", "7.0")
    assert result.rc == 1
    assert result.err.startswith("sattach: error: unknown command 'sattach'")


def test_srun_in_a_job_starts_the_jobs_tasks_by_default(tmp_path: Path) -> None:
    """`#SBATCH -n 3` then `srun cmd`: Slurm's srun takes the task count from the job
    (SLURM_NTASKS, an srun input variable) and runs three tasks; HAL's ran one, so work
    split by SLURM_PROCID silently lost ranks 1 and 2. An explicit -n still wins."""
    env = {**os.environ, "SLURM_JOB_ID": "7", "SLURM_NTASKS": "3"}
    srun = [sys.executable, "-m", "hal.cli.main", "srun"]
    task = ["sh", "-c", 'echo "$SLURM_PROCID/$SLURM_STEP_NUM_TASKS" >> ranks']
    done = subprocess.run([*srun, *task], cwd=tmp_path, env=env, timeout=60, check=False)
    assert done.returncode == 0
    assert sorted((tmp_path / "ranks").read_text().split()) == ["0/3", "1/3", "2/3"]
    (tmp_path / "ranks").unlink()
    done = subprocess.run([*srun, "-n2", *task], cwd=tmp_path, env=env, timeout=60, check=False)
    assert done.returncode == 0
    assert sorted((tmp_path / "ranks").read_text().split()) == ["0/2", "1/2"]


def test_path_of_a_shim_is_its_name() -> None:
    assert call(FakeClient(), "/usr/local/bin/sinfo", "-h").rc == 0


def test_help_never_builds_a_client() -> None:
    def explode() -> FakeClient:
        raise AssertionError("client built")

    assert run("sbatch", ["--help"], client_factory=explode, stdout=io.StringIO()) == 0


def test_server_unreachable_is_one_error_line() -> None:
    class Down(FakeClient):
        def jobs(self, **query: object) -> list[object]:  # type: ignore[override]
            raise Unavailable("cannot reach the HAL server at http://x; is it running?")

    result = call(Down(), "squeue")
    assert (result.rc, result.err) == (
        1,
        "squeue: error: cannot reach the HAL server at http://x; is it running?\n",
    )


def test_client_is_closed() -> None:
    client = FakeClient()
    call(client, "squeue")
    assert client.closed
