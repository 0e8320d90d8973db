"""PSI/J's built-in ``slurm`` executor (psij-python 0.9.11), unchanged, against HAL.

PSI/J renders an ``#SBATCH`` script, submits it with ``sbatch <file>`` and takes the last
word of stdout as the id. Its poll thread runs
``squeue -O JobArrayID,StateCompact,Reason -t all --me``, skips the header, and
*asserts* that every line has exactly 3 columns and a state code from Slurm's list (and,
for failed jobs, a reason from Slurm's list). A job missing from that listing is taken
as COMPLETED, so only a listing that really shows finished jobs proves anything: the
failing-job test below would pass as COMPLETED otherwise. Inside the job the script runs
``scontrol show hostnames`` to build ``$PSIJ_NODEFILE``. Cancel is ``scancel -Q <id>``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

psij = pytest.importorskip(
    "psij", reason="psij-python is not installed (pip install '.[workflows]')"
)
from psij.executors.batch.slurm import SlurmExecutorConfig  # noqa: E402

WAIT = timedelta(seconds=60)


@pytest.fixture
def executor(slurm_env: dict[str, str], tmp_path: Path) -> Iterator[psij.JobExecutor]:
    config = SlurmExecutorConfig(
        work_directory=tmp_path / "psij",
        queue_polling_interval=1,  # default 30 s; the protocol is the same, only faster
        initial_queue_polling_delay=0,
    )
    yield psij.JobExecutor.get_instance("slurm", config=config)


def make_job(executable: str, *args: str, out: Path, err: Path | None = None) -> psij.Job:
    spec = psij.JobSpec(
        executable=executable,
        arguments=list(args),
        directory=out.parent,
        stdout_path=out,
        stderr_path=err or out.with_suffix(".err"),
        attributes=psij.JobAttributes(duration=timedelta(minutes=5)),
        resources=psij.ResourceSpecV1(process_count=1),
    )
    return psij.Job(spec)


def test_echo_job_completes_and_writes_its_stdout_file(
    executor: psij.JobExecutor,
    hal_cluster: LiveServer,
    tmp_path: Path,
    agent_logs: Callable[[], str],
) -> None:
    """`/bin/echo` through PSI/J's Slurm executor: sbatch <file>, squeue -O ... --me polling
    (3 columns, code CD), stdout redirected by the script itself. Ends COMPLETED with the
    text in the file, and HAL agrees the job completed."""
    out = tmp_path / "echo.out"
    job = make_job("/bin/echo", "hello from psij", out=out)
    executor.submit(job)
    assert job.native_id is not None and job.native_id.isdigit(), job.native_id
    status = job.wait(timeout=WAIT)
    assert status is not None, f"no final state within {WAIT}\n{agent_logs()}"
    assert status.state == psij.JobState.COMPLETED, (status, agent_logs())
    assert out.read_text() == "hello from psij\n"
    with hal_cluster.client() as client:
        assert client.job(job.native_id).state == "COMPLETED"
    # Through PSI/J's own status command and parser: listed as CD, not merely missing
    # (which PSI/J would also read as COMPLETED).
    listing = executor.parse_status_output(
        0, executor._run_command(executor.get_status_command([]))
    )
    assert listing[job.native_id].state == psij.JobState.COMPLETED


def test_failing_job_and_foreign_failed_jobs_in_the_listing(
    executor: psij.JobExecutor,
    hal_cluster: LiveServer,
    slurm_env: dict[str, str],
    tmp_path: Path,
    agent_logs: Callable[[], str],
) -> None:
    """PSI/J polls *all* of the user's jobs (`--me -t all`) and asserts on every line, so a
    user's earlier failed job (plain `sbatch --wrap "exit 3"`) must show code F with a
    reason from Slurm's table (NonZeroExitCode) or every PSI/J job fails with "Failed to
    update job status". Then `/bin/false` through PSI/J ends FAILED with exit code 1 (the
    script writes `$?` to `<script_dir>/$SLURM_JOB_ID.ec`, read back over the shared
    filesystem)."""
    done = subprocess.run(
        ["sbatch", "--parsable", "--wrap", "exit 3"],
        env=slurm_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    foreign = done.stdout.strip()
    with hal_cluster.client() as client:
        wait_until(lambda: client.job(foreign).state == "FAILED", 30, message="exit 3 to fail")

    job = make_job("/bin/false", out=tmp_path / "false.out")
    executor.submit(job)
    status = job.wait(timeout=WAIT)
    assert status is not None, agent_logs()
    assert "Failed to update job status" not in (status.message or ""), status.message
    assert status.state == psij.JobState.FAILED, status
    assert status.exit_code == 1, status

    listing = executor.parse_status_output(
        0, executor._run_command(executor.get_status_command([]))
    )
    assert listing[foreign].state == psij.JobState.FAILED
    assert listing[foreign].message == "The job terminated with a non-zero exit code."


def test_cancel_running_job(
    executor: psij.JobExecutor, hal_cluster: LiveServer, tmp_path: Path
) -> None:
    """`sleep 300` is cancelled once ACTIVE (scancel -Q <id>); PSI/J reports CANCELED from
    squeue's CA code and HAL has really stopped the job."""
    job = make_job("/bin/sleep", "300", out=tmp_path / "sleep.out")
    executor.submit(job)
    active = job.wait(timeout=WAIT, target_states=[psij.JobState.ACTIVE])
    assert active is not None and active.state == psij.JobState.ACTIVE, active
    job.cancel()
    status = job.wait(timeout=WAIT)
    assert status is not None and status.state == psij.JobState.CANCELED, status
    with hal_cluster.client() as client:
        assert client.job(job.native_id).state == "CANCELLED"


def test_list_shows_submitted_jobs(executor: psij.JobExecutor, tmp_path: Path) -> None:
    """`executor.list()` runs `squeue --me -o %i -h -r -t all` and must include our job."""
    job = make_job("/bin/true", out=tmp_path / "true.out")
    executor.submit(job)
    job.wait(timeout=WAIT)
    assert job.native_id in executor.list()
