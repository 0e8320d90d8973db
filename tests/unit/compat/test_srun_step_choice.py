"""srun in a multi-node job: what stays on the batch node (no control plane) and what
becomes a job step, and how ``-l`` labels the step's output (``hal.compat.steps``)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from hal.compat.commands import run
from hal.compat.seam import Console
from hal.compat.steps import _Writer

TWO_NODES = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "SLURM_JOB_ID": "7",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURMD_NODENAME": "node1",
}


def no_client() -> object:
    raise AssertionError("srun asked the control plane")


def srun(tmp_path: Path, *argv: str, environ: dict[str, str] | None = None) -> tuple[int, str]:
    err = io.StringIO()
    rc = run(
        "srun",
        list(argv),
        client_factory=no_client,  # type: ignore[arg-type]
        stdout=io.StringIO(),
        stderr=err,
        environ=TWO_NODES if environ is None else environ,
        cwd=str(tmp_path),
    )
    return rc, err.getvalue()


def test_a_step_on_the_batch_node_alone_runs_here(tmp_path: Path) -> None:
    """`srun -N1 -n2` in a two-node job: Slurm puts it on the first node, the batch
    node; HAL runs it there without a step in the control plane."""
    task = 'echo "$SLURM_PROCID" >> ranks'
    rc, err = srun(tmp_path, "-N1", "-n2", "sh", "-c", task)
    assert (rc, err) == (0, "")
    assert sorted((tmp_path / "ranks").read_text().split()) == ["0", "1"]


# salloc's command: on the host salloc runs on, without SLURMD_NODENAME
UNDER_SALLOC = {
    "PATH": TWO_NODES["PATH"],
    "SLURM_JOB_ID": "7",
    "SLURM_JOB_NODELIST": "node1",
    "HAL_SALLOC_JOB_ID": "7",
}


def test_under_salloc_even_a_one_node_step_asks_the_control_plane(tmp_path: Path) -> None:
    """srun is not on the allocation's node there: running in place would run the
    command on the submit host."""
    with pytest.raises(AssertionError, match="srun asked the control plane"):
        srun(tmp_path, "-n1", "true", environ=UNDER_SALLOC)


def test_a_batch_job_started_from_salloc_runs_its_one_node_steps_in_place(
    tmp_path: Path,
) -> None:
    """The mark of another job (sbatch run in salloc's shell) does not count."""
    rc, err = srun(tmp_path, "-N1", "-n2", "true", environ={**TWO_NODES, "HAL_SALLOC_JOB_ID": "6"})
    assert (rc, err) == (0, "")


def test_a_node_outside_the_job_is_refused_before_asking(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "-w", "node9", "true")
    assert rc == 1
    assert err.startswith("srun: error: Unable to create step for job 7: ")
    assert "node node9 is not in the job's allocation (node1,node2)" in err


def test_labels_prefix_whole_lines_with_the_rank() -> None:
    """Output comes in pieces that split lines; -l prints each whole line once, behind
    its task's rank, and a last line without a newline at the end."""
    out = io.StringIO()
    console = Console("srun", no_client, out, io.StringIO(), io.StringIO())  # type: ignore[arg-type]
    writer = _Writer(console, label=True)
    writer.write(0, "stdout", b"hel")
    writer.write(1, "stdout", b"one\ntw")
    writer.write(0, "stdout", b"lo\nbye")
    writer.close()
    assert out.getvalue().splitlines() == ["1: one", "0: hello", "1: tw", "0: bye"]


def test_jobid_of_the_job_srun_runs_in_changes_nothing(tmp_path: Path) -> None:
    """`srun --jobid=$SLURM_JOB_ID -N1 -n2` in the batch job: still in place."""
    rc, err = srun(tmp_path, "--jobid=7", "-N1", "-n2", "true")
    assert (rc, err) == (0, "")


@pytest.mark.parametrize("environ", [{"PATH": TWO_NODES["PATH"]}, TWO_NODES])
def test_jobid_of_another_job_asks_the_control_plane(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """From a login shell, or from inside job 7 naming job 8: a step of that job,
    never a local run."""
    with pytest.raises(AssertionError, match="srun asked the control plane"):
        srun(tmp_path, "--jobid", "8", "-N1", "-n1", "true", environ=environ)


def test_a_bad_jobid_is_refused(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "--jobid=abc", "true", environ={"PATH": TWO_NODES["PATH"]})
    assert rc == 1
    assert err == "srun: error: --jobid needs a positive integer, got 'abc'\n"
