"""srun's --multi-prog, -m and --het-group on the batch node of a one-node job: the tasks
run as srun's children (``hal.compat.local_step``), each its own line's program, with
SLURM_DISTRIBUTION; a file that leaves a rank out starts nothing. The server is out of
reach (a closed port): the step is not recorded, which srun says once."""

from __future__ import annotations

import io
import os
import socket
from pathlib import Path

from hal.client.sync import HalClient
from hal.compat.commands import run

ONE_NODE = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "SLURM_JOB_ID": "7",
    "SLURM_NTASKS": "4",
    "SLURM_JOB_NODELIST": "node1",
    "SLURMD_NODENAME": "node1",
}
NOT_RECORDED = "srun: warning: job step not recorded"


def unreachable() -> HalClient:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    return HalClient(url=f"http://127.0.0.1:{port}", token="t")


def srun(tmp_path: Path, *argv: str, **env: str) -> tuple[int, str]:
    err = io.StringIO()
    rc = run(
        "srun",
        list(argv),
        client_factory=unreachable,
        stdout=io.StringIO(),
        stderr=err,
        environ={**ONE_NODE, **env},
        cwd=str(tmp_path),
    )
    return rc, err.getvalue()


def written(tmp_path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(tmp_path.glob("out.*"))}


def test_each_rank_runs_its_line(tmp_path: Path) -> None:
    (tmp_path / "mp.conf").write_text(
        "# one program for rank 0, another for the rest\n"
        "0 sh -c 'echo head $SLURM_PROCID > out.$SLURM_PROCID'\n"
        "1-3 sh -c 'echo worker $1 $2 > out.$SLURM_PROCID' x %o\n"
    )
    rc, err = srun(tmp_path, "--multi-prog", "mp.conf", "extra")
    assert rc == 0, err
    assert written(tmp_path) == {
        "out.0": "head 0\n",
        "out.1": "worker 0 extra\n",
        "out.2": "worker 1 extra\n",
        "out.3": "worker 2 extra\n",
    }


def test_a_rank_without_a_line_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "mp.conf").write_text("0 touch out.0\n2-3 touch out.x\n")
    rc, err = srun(tmp_path, "--multi-prog", "mp.conf")
    assert rc == 1
    assert err == "srun: error: Configuration file mp.conf invalid, no record for task id 1\n"
    assert written(tmp_path) == {}


def test_a_missing_file_is_said_as_srun_says_it(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "--multi-prog", "nofile.conf")
    assert (rc, err) == (1, "srun: error: Could not open multi_prog config file nofile.conf\n")


def test_without_n_the_file_s_highest_rank_sets_the_task_count(tmp_path: Path) -> None:
    """`sbatch -N1` (SLURM_NTASKS 1, where Slurm leaves it unset): ranks 0-2 make three
    tasks; with -n2 the file's rank 2 is refused as Slurm refuses it."""
    (tmp_path / "mp.conf").write_text("0-2 touch out.%t\n")
    rc, err = srun(tmp_path, "--multi-prog", "mp.conf", SLURM_NTASKS="1")
    assert rc == 0, err
    assert list(written(tmp_path)) == ["out.0", "out.1", "out.2"]
    rc, err = srun(tmp_path, "-n2", "--multi-prog", "mp.conf")
    assert rc == 1
    assert err.splitlines() == [
        "srun: error: Invalid task id, 2 >= ntasks",
        "srun: error: Line 1 of configuration file mp.conf invalid",
    ]


def test_tasks_see_the_distribution(tmp_path: Path) -> None:
    """SLURM_DISTRIBUTION as Slurm's srun sets it: -m as given, SLURM_DISTRIBUTION read
    when -m is not, and srun's default (cyclic for no more tasks than nodes, else block)."""
    show = 'echo "$SLURM_DISTRIBUTION ${SLURM_DIST_PLANESIZE:-}" > out.$SLURM_PROCID'
    cases = [
        (["-n1"], {}, "cyclic \n"),
        (["-n2"], {}, "block \n"),
        (["-n2", "-m", "cyclic:block"], {}, "cyclic:block \n"),
        (["-n2"], {"SLURM_DISTRIBUTION": "plane=2"}, "plane 2\n"),
        (["-n2", "--distribution=cyclic"], {"SLURM_DISTRIBUTION": "plane=2"}, "cyclic \n"),
    ]
    for argv, env, line in cases:
        rc, err = srun(tmp_path, *argv, "sh", "-c", show, **env)
        assert rc == 0 and err.startswith(NOT_RECORDED), err
        assert written(tmp_path)["out.0"] == line, (argv, env)


def test_a_bad_distribution_is_refused(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "-m", "plane", "true")
    assert rc == 255
    assert err.splitlines() == [
        "srun: error: Invalid plane size or size not specified",
        "srun: error: Invalid --distribution specification",
    ]


def test_arbitrary_runs_a_task_per_name(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "-m", "arbitrary", "-w", "node1,node1,node1", "touch", "out.x")
    assert rc == 0, err
    rc, err = srun(tmp_path, "-m", "arbitrary", "-n2", "-w", "node1,node1,node1", "true")
    assert rc == 1 and "You asked for 2 tasks but hostlist specified 3 nodes" in err, err


def test_het_group_outside_a_het_job_is_refused(tmp_path: Path) -> None:
    rc, err = srun(tmp_path, "--het-group=1", "true")
    assert rc == 1 and "job 7 is not a heterogeneous job" in err, err
    rc, err = srun(tmp_path, "--het-group=0-1", "true")
    assert rc == 1 and "one component of a het job" in err, err


def test_het_group_runs_in_the_component_s_nodes(tmp_path: Path) -> None:
    """A het job's script sees every component's nodes; a step runs in component 0 by
    default (here: on the batch node, so in place), and --het-group=1 in component 1,
    which only the control plane can start (here out of reach)."""
    het = {
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_HET_SIZE": "2",
        "SLURM_JOB_ID_HET_GROUP_0": "7",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "node1",
        "SLURM_NTASKS_HET_GROUP_0": "1",
        "SLURM_JOB_ID_HET_GROUP_1": "8",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "node2",
        "SLURM_NTASKS_HET_GROUP_1": "1",
    }
    rc, err = srun(tmp_path, "touch", "out.0", **het)
    assert rc == 0 and err.startswith(NOT_RECORDED), err
    rc, err = srun(tmp_path, "--het-group=1", "touch", "out.1", **het)
    assert rc == 1 and err.startswith("srun: error: cannot reach the HAL server"), err
    assert list(written(tmp_path)) == ["out.0"]
    rc, err = srun(tmp_path, "--het-group=2", "true", **het)
    assert rc == 1 and "has components 0 to 1" in err, err


def test_tasks_see_the_step_not_the_job(tmp_path: Path) -> None:
    """`srun -n2` in a job of four tasks: the tasks see the step's task and node counts,
    node list and tasks per node (SLURM_NTASKS 2, not the job's 4), as a step the agents
    run does, even when the server could not number the step."""
    show = (
        'echo "$SLURM_NTASKS $SLURM_NPROCS $SLURM_NNODES $SLURM_NODELIST '
        "$SLURM_TASKS_PER_NODE $SLURM_STEP_NUM_TASKS $SLURM_STEP_NUM_NODES "
        '$SLURM_STEP_NODELIST $SLURM_STEP_TASKS_PER_NODE ${SLURM_STEP_ID:-none}" '
        "> out.$SLURM_PROCID"
    )
    rc, err = srun(tmp_path, "-n2", "sh", "-c", show, SLURM_NODELIST="node1")
    assert rc == 0 and err.startswith(NOT_RECORDED), err
    assert written(tmp_path)["out.1"] == "2 2 1 node1 2 2 1 node1 2 none\n"
