"""``sbcast``: a file copied to the same path on every node of a job, as Slurm's sbcast
does from a batch script, with its messages and exit codes (docs/slurm-checks.md,
"sbcast", checked on the Slurm 22.05.8 peer). A real server with two real agents whose
nodes share this host's files: both write the same destination, and the test checks the
copy from a step on each node."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from two_agents import (
    login_env,
)

from hal.testing.live import LiveServer


def in_job(
    server: LiveServer, shims: Path, cwd: Path, script: str, nodes: int = 2
) -> tuple[str, str]:
    """Runs ``script`` as a salloc command of ``nodes`` nodes (its job's variables set,
    srun and sbcast the shims); its stdout and stderr."""
    done = subprocess.run(
        [str(shims / "salloc"), f"-N{nodes}", "sh", "-c", script],
        env=login_env(server, shims), cwd=cwd, text=True, capture_output=True, timeout=120,
        check=False,
    )  # fmt: skip
    return done.stdout, done.stderr


def test_sbcast_copies_to_every_node_with_the_mode_and_refuses_as_slurms(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    app = tmp_path / "app.sh"
    app.write_bytes(b"#!/bin/sh\necho ran on $SLURMD_NODENAME\n" + os.urandom(300_000))
    app.chmod(0o750)
    os.utime(app, (1_000_000_000, 1_000_000_000))
    (tmp_path / "out").mkdir()
    # both nodes' tasks write the same file here (one host): a plain copy on two nodes
    # races (the second may find the first's file), so the plain one runs on one node
    first, _ = in_job(server, shims, tmp_path, "sbcast app.sh out/one; echo first=$?", 1)
    assert "first=0" in first.splitlines()
    assert (tmp_path / "out" / "one").read_bytes() == app.read_bytes()
    script = f"""
cd {tmp_path}
sbcast -f -p app.sh out/app; echo "forced=$?"
sbcast app.sh out/app; echo "again=$?"
sbcast app.sh missing/app; echo "nofolder=$?"
sbcast app.sh out/; echo "slash=$?"
sbcast nonexistent out/x; echo "nosource=$?"
sbcast app.sh; echo "one=$?"
srun -N2 -l sh -c 'stat -c "%a %Y %s" out/app; cmp app.sh out/app && echo same'
"""
    out, err = in_job(server, shims, tmp_path, script)
    lines = out.splitlines()
    for expected in ("forced=0", "again=17", "nofolder=2", "slash=1", "one=1"):
        assert expected in lines, (out, err)
    assert "nosource=255" in lines, (out, err)
    size = app.stat().st_size
    assert sorted(x for x in lines if x[:1] in "01" and ": " in x) == [
        f"0: 750 1000000000 {size}", "0: same", f"1: 750 1000000000 {size}", "1: same",
    ], (out, err)  # fmt: skip
    assert "sbcast: error: REQUEST_FILE_BCAST(node1): File exists" in err, err
    assert "sbcast: error: REQUEST_FILE_BCAST(node1): No such file or directory" in err, err
    assert "sbcast: error: Target filename cannot be a directory." in err
    assert "sbcast: error: Can't open `nonexistent`: No such file or directory" in err
    assert "sbcast: error: Need two file names, have 1 names" in err
    assert "srun: error" not in err  # (the tasks' exit codes are sbcast's to say)
    assert not list((tmp_path / "out").glob("*.sbcast.*"))  # nothing half-written left


def test_sbcast_outside_a_job_says_it_needs_one(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    (tmp_path / "f").write_text("x")
    done = subprocess.run(
        [str(shims / "sbcast"), "f", "/tmp/f"],
        env=login_env(server, shims), cwd=tmp_path, text=True, capture_output=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == (
        "sbcast: error: Need a job id to run this command.  Run from within a Slurm job "
        "or use the --jobid option.\n"
    )
