"""``scontrol update`` of a pending job's shape and files on a real server with two
agents, as Slurm 22.05.8 takes them (HAL refused each, and with them every
other field of the same update): NumNodes, NumTasks, MinMemoryNode, WorkDir, StdOut,
MailType, MailUser and Requeue. The job then runs as updated."""

from __future__ import annotations

from pathlib import Path

from test_requeue_runs_server import show
from two_agents import (
    state,
    submit,
)

from hal.testing.live import LiveServer, wait_until


def test_a_pending_jobs_shape_and_files_change_and_it_runs_so(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    (tmp_path / "there").mkdir()
    job_id = submit(server, tmp_path, "pwd\necho $SLURM_JOB_NUM_NODES $SLURM_NTASKS\n", "-H")
    update = server.cli(
        "scontrol",
        "update",
        f"JobId={job_id}",
        "NumNodes=2",
        "NumTasks=2",
        "MinMemoryNode=100M",
        "WorkDir=there",
        "StdOut=moved-%j.out",
        "MailType=END",
        "MailUser=someone@example.org",
        "Requeue=0",
        "Comment=all-at-once",
        cwd=tmp_path,
    )
    assert update.returncode == 0, update.stderr
    fields = show(server, job_id)
    assert (fields["NumNodes"], fields["NumTasks"], fields["MinMemoryNode"]) == ("2", "2", "100M")
    assert fields["WorkDir"] == str(tmp_path / "there")
    assert fields["StdOut"] == str(tmp_path / "there" / f"moved-{job_id}.out")
    assert (fields["MailUser"], fields["MailType"]) == ("someone@example.org", "END")
    assert (fields["Requeue"], fields["Comment"]) == ("0", "all-at-once")
    # a request the cluster could never hold is refused, and nothing else changes
    refused = server.cli("scontrol", "update", f"JobId={job_id}", "NumNodes=3", "Comment=x")
    assert refused.returncode == 1 and refused.stderr, refused
    assert show(server, job_id)["Comment"] == "all-at-once"
    assert server.cli("scontrol", "release", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="its end")
    out = (tmp_path / "there" / f"moved-{job_id}.out").read_text().splitlines()
    assert out == [str(tmp_path / "there"), "2 2"]
