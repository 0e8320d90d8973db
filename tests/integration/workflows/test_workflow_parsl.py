"""Parsl's ``SlurmProvider`` (parsl 2026.10.26), unchanged, against HAL.

The provider is the whole of Parsl's Slurm interaction: it writes an ``#SBATCH`` script
(``--exclusive``, ``--time`` in minutes, ``--ntasks-per-node``, ``--mem=<N>g``,
``--cpus-per-task``), runs ``sbatch <file>`` through a shell and finds the id with the
regex ``Submitted batch job (?P<id>\\S*)``. At construction it runs ``sacct -X``: if that
exits 0 it polls ``sacct -X --noheader --format=jobid,state%20 --job '<ids>'``, otherwise
(a site without accounting: "Slurm accounting storage is disabled") it polls
``squeue --noheader --format='%i %t' --job '<ids>'``. On either path **a job missing from
the output is assumed COMPLETED**, so the tests check the state *words* Parsl parsed, not
only the outcome. Cancel is ``scancel <id> ...``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hal.testing.live import LiveServer, wait_until

if importlib.util.find_spec("parsl") is None:
    pytest.skip("parsl is not installed (pip install '.[workflows]')", allow_module_level=True)
# Parsl is imported by the tests that run, not at collection (1.8 s of CPU, paid by each
# xdist worker, all of which collect this module)
if TYPE_CHECKING:
    from parsl.jobs.states import JobState
    from parsl.providers import SlurmProvider


def make_provider(script_dir: Path) -> SlurmProvider:
    from parsl.providers import SlurmProvider

    provider = SlurmProvider(
        walltime="00:05:00", cores_per_node=1, mem_per_node=1, exclusive=False, cmd_timeout=30
    )
    provider.script_dir = str(script_dir)  # set by the executor in a full Parsl run
    return provider


def poll_until_terminal(provider: SlurmProvider, job_id: str, timeout: float = 60) -> JobState:
    """What Parsl's job status poller does (every 60 s there; here every 0.5 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        (status,) = provider.status([job_id])
        if status.terminal:
            return status.state
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} not terminal after {timeout} s")


def raw_status_lines(provider: SlurmProvider, job_id: str) -> list[list[str]]:
    """The status command Parsl built, run as Parsl runs it, split as Parsl splits it."""
    retcode, out, err = provider.execute_wait(provider._cmd.format(job_id))
    assert retcode == 0, err
    return [line.split() for line in out.splitlines() if line.strip()]


def test_submit_runs_the_command_and_sacct_reports_completed(
    slurm_env: dict[str, str], tmp_path: Path, agent_logs: Callable[[], str]
) -> None:
    """HAL's `sacct -X` exits 0, so Parsl takes the sacct path. A submitted command runs as
    a HAL job (Parsl's SingleNodeLauncher wrapper included), writes its file, and Parsl's
    poll sees the job listed as COMPLETED by sacct, not merely missing."""
    from parsl.jobs.states import JobState

    provider = make_provider(tmp_path)
    assert provider._cmd.startswith("sacct -X --noheader --format=jobid,state%20 --job")
    marker = tmp_path / "ran.txt"
    job_id = provider.submit(f"echo parsl-block-$SLURM_JOB_ID > {marker}", tasks_per_node=1)
    assert job_id.isdigit(), job_id
    assert poll_until_terminal(provider, job_id) == JobState.COMPLETED, agent_logs()
    assert marker.read_text().strip() == f"parsl-block-{job_id}"
    assert raw_status_lines(provider, job_id) == [[job_id, "COMPLETED"]]


def test_failed_command_is_failed_not_assumed_completed(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """`exit 3` in a block: sacct must list it FAILED; were it missing from the output, Parsl
    would silently record COMPLETED and never report the lost block."""
    from parsl.jobs.states import JobState

    provider = make_provider(tmp_path)
    job_id = provider.submit("exit 3", tasks_per_node=1)
    assert poll_until_terminal(provider, job_id) == JobState.FAILED
    assert raw_status_lines(provider, job_id) == [[job_id, "FAILED"]]


def test_squeue_fallback_without_accounting(
    slurm_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hal_cluster: LiveServer,
) -> None:
    """A site without slurmdbd: `sacct` fails with "Slurm accounting storage is disabled",
    so Parsl polls `squeue --noheader --format='%i %t' --job '<ids>'`. A running block
    must read R (two-letter code); once finished, `squeue --job` lists it no more (as
    Slurm 22.05.8's, without `-t`), and Parsl takes a job missing there for COMPLETED."""
    from parsl.jobs.states import JobState

    no_sacct = tmp_path / "no-sacct"
    no_sacct.mkdir()
    fake = no_sacct / "sacct"
    fake.write_text("#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{no_sacct}:{slurm_env['PATH']}")
    provider = make_provider(tmp_path)
    assert provider._cmd.startswith("squeue --noheader --format='%i %t' --job")

    go = tmp_path / "go"
    job_id = provider.submit(f"while [ ! -e {go} ]; do sleep 0.2; done", tasks_per_node=1)
    with hal_cluster.client() as client:
        wait_until(lambda: client.job(job_id).state == "RUNNING", 30, message="block running")
    (status,) = provider.status([job_id])
    assert status.state == JobState.RUNNING
    assert raw_status_lines(provider, job_id) == [[job_id, "R"]]
    go.touch()
    assert poll_until_terminal(provider, job_id) == JobState.COMPLETED
    assert raw_status_lines(provider, job_id) == []


def test_cancel_stops_a_running_block(
    slurm_env: dict[str, str], tmp_path: Path, hal_cluster: LiveServer
) -> None:
    """Scaling in: `scancel <id> <id>` on two running blocks exits 0 (Parsl marks them
    CANCELLED on that alone), so HAL must really have stopped both: sacct says CANCELLED
    and a plain `squeue` no longer lists them."""
    from parsl.jobs.states import JobState

    provider = make_provider(tmp_path)
    ids = [provider.submit("sleep 300", tasks_per_node=1) for _ in range(2)]
    with hal_cluster.client() as client:
        for job_id in ids:
            wait_until(lambda j=job_id: client.job(j).state == "RUNNING", 30, message="running")
    assert provider.cancel(ids) == [True, True]
    assert [s.state for s in provider.status(ids)] == [JobState.CANCELLED] * 2
    with hal_cluster.client() as client:
        for job_id in ids:
            wait_until(lambda j=job_id: client.job(j).state == "CANCELLED", 30, message="stop")
    for job_id in ids:  # sacct says "CANCELLED by <user>", as Slurm does; Parsl reads 2 words
        assert raw_status_lines(provider, job_id)[0][:2] == [job_id, "CANCELLED"]
    listed = subprocess.run(
        ["squeue", "--noheader", "--format=%i"],
        env=slurm_env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert not set(ids) & set(listed), listed
