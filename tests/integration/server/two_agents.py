"""What the step and allocation tests run against the two-agent ``server`` (the
conftest's): sbatch, sacct, a job's state, a login shell's shims."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hal.testing.live import LiveServer

SRUN = f"{sys.executable} -m hal.cli.main srun"


def submit(server: LiveServer, tmp_path: Path, body: str, *args: str) -> int:
    """``sbatch --parsable`` of a bash script with ``body``; the job's id."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + body)
    done = server.cli("sbatch", "--parsable", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def state(server: LiveServer, job_id: int) -> str:
    with server.client() as c:
        return c.job(job_id).state


def sacct(server: LiveServer, job_id: int, fields: str) -> list[str]:
    done = server.cli("sacct", "-j", str(job_id), "-n", "-P", "-o", fields)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def login_env(server: LiveServer, shims: Path) -> dict[str, str]:
    """A login shell's environment for ``server``: the shims first in PATH, and no job's
    variables."""
    env = {
        k: v
        for k, v in server.env().items()
        if not k.startswith(("SLURM_", "SALLOC_", "SBATCH_", "HAL_SALLOC", "HAL_JOB"))
    }
    env["PATH"] = f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def run(
    server: LiveServer, shims: Path, cwd: Path, *argv: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """A shim as a login shell runs it: no job's variables in the environment."""
    env = login_env(server, shims)
    if token is not None:
        env["HAL_TOKEN"] = token
    return subprocess.run(
        [str(shims / argv[0]), *argv[1:]],
        env=env,
        cwd=cwd,
        text=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
