"""dask-jobqueue's ``SLURMCluster`` (dask-jobqueue 0.9.0, distributed 2026.8.0), unchanged,
against HAL.

``SLURMCluster`` writes a job script with an ``#SBATCH -J/-e/-o/-n 1/--cpus-per-task/
--mem/-t`` header (log names use ``%J``, Slurm's ``jobid.stepid``), submits it with
``sbatch <file>``, takes the first number in stdout as the id, and cancels with
``scancel <id>``. It never polls the scheduler: the job is a ``dask worker`` that
connects back to the Dask scheduler in the submitting process over TCP (loopback here),
so what this proves is that the job really runs with the submitter's environment and can
reach the submitting host.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

if importlib.util.find_spec("dask_jobqueue") is None:
    pytest.skip(
        "dask-jobqueue is not installed (pip install '.[workflows]')", allow_module_level=True
    )


def hal_jobs_named(server: LiveServer, name: str) -> list[tuple[int, str]]:
    with server.client() as client:
        return [(j.id, j.state) for j in client.jobs(include_finished=True) if j.name == name]


def diagnose(server: LiveServer, logs: Path) -> str:
    with server.client() as client:
        jobs = [j for j in client.jobs(include_finished=True) if j.name == "dask-hal"]
    lines = [repr(j) for j in jobs]
    for path in sorted(logs.glob("*")):
        lines.append(f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}")
    return "\n".join(lines)


def test_scale_runs_a_worker_job_that_computes_then_close_cancels_it(
    slurm_env: dict[str, str],
    hal_cluster: LiveServer,
    tmp_path: Path,
    agent_logs: Callable[[], str],
) -> None:
    """`cluster.scale(1)` → one `sbatch` of dask-jobqueue's own script; the worker job
    starts on a HAL agent, connects back to the local scheduler, and computes
    `(lambda x: x + 1)(1)`. `cluster.close()` → `scancel <id>`: HAL ends the job, so no
    worker outlives the cluster."""
    # imported here, not at collection (a second of CPU in each xdist worker)
    from dask.distributed import Client
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(
        cores=1,
        processes=1,
        memory="1GiB",  # nanny + worker processes share the job's limit
        walltime="00:05:00",
        job_name="dask-hal",
        log_directory=str(tmp_path / "logs"),
        local_directory=str(tmp_path / "worker"),
        scheduler_options={"host": "127.0.0.1", "dashboard_address": ":0"},
        worker_extra_args=["--no-dashboard"],
    )
    try:
        script = cluster.job_script()
        assert "#SBATCH --mem=1G" in script and "-%J.err" in script, script
        with Client(cluster, timeout="30s") as client:
            cluster.scale(1)
            try:
                client.wait_for_workers(1, timeout=60)
            except TimeoutError:
                pytest.fail(f"no worker connected\n{diagnose(hal_cluster, tmp_path / 'logs')}")
            assert client.submit(lambda x: x + 1, 1).result(timeout=30) == 2
            jobs = hal_jobs_named(hal_cluster, "dask-hal")
            assert [state for _, state in jobs] == ["RUNNING"], (jobs, agent_logs())
            # Keep only the id: distributed asserts at close that every Job object still
            # alive has closed, and dask-jobqueue 0.9.0's Job.close never sets that status.
            (job_id,) = [job.job_id for job in cluster.workers.values()]
            assert job_id == str(jobs[0][0])
    finally:
        cluster.close(timeout=30)

    wait_until(
        lambda: all(state == "CANCELLED" for _, state in hal_jobs_named(hal_cluster, "dask-hal")),
        30,
        message="scancel to end the worker job",
    )
    # `-e logs/dask-hal-%J.err`: %J is jobid.stepid, and for the batch script the job id
    # alone, as Slurm 22.05.8 names it
    err_log = tmp_path / "logs" / f"dask-hal-{job_id}.err"
    text = err_log.read_text(errors="replace")
    assert "Registered to:" in text and "tcp://127.0.0.1:" in text, text[-2000:]
