"""Heterogeneous jobs on a real server with real agents: ``sbatch`` with ``#SBATCH
hetjob`` runs the script once with Slurm's het variables, every component holds its
nodes, ``JOBID+OFFSET`` works in squeue/sacct/scontrol/scancel, and a het job that
cannot fit whole starts no component."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

HET_SCRIPT = (
    "#!/bin/bash\n"
    "#SBATCH -J mixed -n 1 -c 2\n"
    "#SBATCH hetjob\n"
    "#SBATCH -N 2 -n 2 -c 1\n"
    "env | grep -E '^SLURM_(HET_SIZE|JOB_ID|JOB_NODELIST|NTASKS|JOB_NUM_NODES)' | sort\n"
    "sleep ${HOLD:-0}\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("het")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as srv,
        srv.agents(3, cpus=2, memory="1G"),
    ):
        yield srv


def states(server: LiveServer, ident: str) -> list[str]:
    with server.client() as c:
        return [j.state for j in c.jobs(ids=[ident], include_finished=True)]


def submit(server: LiveServer, tmp_path: Path, *args: str) -> int:
    script = tmp_path / "het.sh"
    script.write_text(HET_SCRIPT)
    done = server.cli("sbatch", "--parsable", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_het_job_runs_its_script_once_with_het_variables(
    server: LiveServer, tmp_path: Path
) -> None:
    """Component 0 fills one node; component 1 takes one CPU on each of the other two.
    The script sees both components' node lists and task counts."""
    het_id = submit(server, tmp_path)
    wait_until(
        lambda: states(server, str(het_id)) == ["COMPLETED", "COMPLETED"],
        message="both components to complete",
    )
    env = dict(
        line.split("=", 1)
        for line in (tmp_path / f"slurm-{het_id}.out").read_text().splitlines()
        if "=" in line
    )
    assert env["SLURM_HET_SIZE"] == "2"
    assert env["SLURM_JOB_ID"] == env["SLURM_JOB_ID_HET_GROUP_0"] == str(het_id)
    assert env["SLURM_JOB_ID_HET_GROUP_1"] == str(het_id + 1)
    assert env["SLURM_NTASKS_HET_GROUP_0"] == "1"
    assert env["SLURM_NTASKS_HET_GROUP_1"] == "2"
    assert env["SLURM_JOB_NUM_NODES_HET_GROUP_1"] == "2"
    assert env["SLURM_JOB_NUM_NODES"] == "3"
    own = env["SLURM_JOB_NODELIST_HET_GROUP_0"]
    assert own.startswith("node") and own not in env["SLURM_JOB_NODELIST_HET_GROUP_1"]
    sa = server.cli("sacct", "-j", f"{het_id}+1", "-n", "-P", "-o", "JobID,State")
    assert sa.stdout.split() == [f"{het_id}+1|COMPLETED"], sa
    whole = server.cli("sacct", "-j", str(het_id), "-n", "-P", "-o", "JobID,State")
    assert whole.stdout.split() == [
        f"{het_id}+0|COMPLETED",
        f"{het_id}+0.batch|COMPLETED",  # the script ran in component 0 only
        f"{het_id}+1|COMPLETED",
    ], whole
    step = server.cli("sacct", "-j", f"{het_id}.batch", "-n", "-P", "-o", "JobID,State")
    assert step.stdout.split() == [f"{het_id}+0.batch|COMPLETED"], step  # no component lines
    show = server.cli("scontrol", "show", "job", f"{het_id}+1")
    assert f"HetJobId={het_id} HetJobOffset=1 HetJobIdSet={het_id}-{het_id + 1}" in show.stdout


def test_running_het_job_shows_offsets_and_scancel_ends_all(
    server: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "env").mkdir()
    het_id = submit(server, tmp_path, "--export=ALL,HOLD=60")
    wait_until(
        lambda: states(server, str(het_id)) == ["RUNNING", "RUNNING"],
        message="both components to run",
    )
    sq = server.cli("squeue", "-h", "-j", str(het_id), "-o", "%i %T")
    assert sq.stdout.split("\n")[:2] == [f"{het_id}+0 RUNNING", f"{het_id}+1 RUNNING"], sq
    as_json = json.loads(server.cli("squeue", "--json", "-j", f"{het_id}+1").stdout)
    (record,) = as_json["jobs"]
    assert record["het_job_id"]["number"] == het_id
    assert record["het_job_offset"]["number"] == 1
    assert record["het_job_id_set"] == f"{het_id}-{het_id + 1}"
    done = server.cli("scancel", str(het_id))
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: states(server, str(het_id)) == ["CANCELLED", "CANCELLED"],
        message="both components to be cancelled",
    )


def test_het_job_that_cannot_fit_whole_starts_nothing(server: LiveServer, tmp_path: Path) -> None:
    """One node is busy; component 1 wants every CPU of all three nodes. Component 0
    would fit on a free node, but it stays pending with component 1, and ``hal
    explain`` names the component that blocks."""
    busy = server.cli("sbatch", "--parsable", "-c", "2", "--wrap", "sleep 60", cwd=tmp_path)
    busy_id = busy.stdout.strip()
    wait_until(lambda: states(server, busy_id) == ["RUNNING"], message="the busy job to run")
    script = tmp_path / "big.sh"
    script.write_text("#!/bin/bash\n#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -N 3 -n 3 -c 2\ntrue\n")
    done = server.cli("sbatch", "--parsable", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    het_id = int(done.stdout.strip())

    def reasons() -> list[str]:
        with server.client() as c:
            return [j.reason for j in c.jobs(ids=[str(het_id)])]

    wait_until(lambda: reasons() == ["Resources", "Resources"], message="a pass to decide")
    assert states(server, str(het_id)) == ["PENDING", "PENDING"]
    explain = server.cli("explain", f"{het_id}+0")
    assert f"component {het_id}+1 blocks" in explain.stdout, explain
    assert server.cli("scancel", str(het_id)).returncode == 0
    server.cli("scancel", busy_id)
    wait_until(
        lambda: states(server, str(het_id)) == ["CANCELLED", "CANCELLED"],
        message="both components to be cancelled",
    )


def test_requeue_of_one_component_requeues_the_whole_het_job(
    server: LiveServer, tmp_path: Path
) -> None:
    """``scontrol requeue 123+1``: the het job goes back to the queue whole (its
    components start together) and runs again as a second attempt."""
    het_id = submit(server, tmp_path, "--export=ALL,HOLD=60")
    wait_until(
        lambda: states(server, str(het_id)) == ["RUNNING", "RUNNING"],
        message="both components to run",
    )
    done = server.cli("scontrol", "requeue", f"{het_id}+1")
    assert done.returncode == 0, done.stderr

    def restarts() -> list[tuple[str, int]]:
        with server.client() as c:
            return [(j.state, j.restarts) for j in c.jobs(ids=[str(het_id)])]

    wait_until(
        lambda: restarts() == [("RUNNING", 1), ("RUNNING", 1)],
        message="both components to run again",
    )
    server.cli("scancel", str(het_id))
    wait_until(
        lambda: states(server, str(het_id)) == ["CANCELLED", "CANCELLED"],
        message="both components to be cancelled",
    )


def test_test_only_gives_every_component_one_start(server: LiveServer, tmp_path: Path) -> None:
    """``sbatch --test-only`` of a het job submits nothing and prints one line per
    component, with the same start and distinct nodes."""
    script = tmp_path / "het.sh"
    script.write_text(HET_SCRIPT)
    done = server.cli("sbatch", "--test-only", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if "to start at" in ln]
    assert len(lines) == 2, done.stderr
    starts = {ln.split(" to start at ")[1].split(" using ")[0] for ln in lines}
    assert len(starts) == 1
    assert "using 2 processors" in lines[0] and "using 2 processors" in lines[1]
