"""A job whose script cannot start (its output file cannot be opened) ends FAILED with
Slurm's reason JobLaunchFailure, as Slurm 22.05.8's did (docs/slurm-checks.md), not
NonZeroExitCode as if the script had run and failed."""

from __future__ import annotations

from pathlib import Path

from hal.testing.live import LiveServer, wait_until


def test_an_output_file_that_cannot_be_opened_is_a_launch_failure(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "srv") as server, server.agents(1, cpus=1):
        missing = tmp_path / "no-such-dir" / "out.txt"
        done = server.cli("sbatch", "--parsable", "-o", str(missing), "--wrap", "true")
        assert done.returncode == 0, done.stderr
        job_id = int(done.stdout.strip())

        def ended() -> bool:
            with server.client() as c:
                return c.job(job_id).state == "FAILED"

        wait_until(ended, 60, message="the job to fail")
        with server.client() as c:
            assert c.job(job_id).reason == "JobLaunchFailure"
        shown = server.cli("scontrol", "show", "job", str(job_id)).stdout
        assert "Reason=JobLaunchFailure" in shown, shown
