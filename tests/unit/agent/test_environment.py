"""The job environment's node-local part (slurm-conventions §1.5)."""

from __future__ import annotations

from typing import Any

from hal.agent.environment import job_environment
from hal.wire.agent import Launch


def launch(**changes: Any) -> Launch:
    fields: dict[str, Any] = {
        "job_id": 12,
        "attempt": 0,
        "name": "j",
        "user": "ana",
        "script": "true",
        "workdir": "/home/ana",
        "environment": {"PATH": "/opt/bin", "SLURM_NTASKS": "4"},
        "stdout": "",
        "stderr": None,
        "time_limit_seconds": 0,
        "memory_bytes": 0,
        "cpus": 4,
        "nodes": ["a1", "a2"],
        "node_index": 1,
    }
    fields.update(changes)
    return Launch(**fields)


def test_node_variables() -> None:
    env = job_environment(launch(memory_bytes=3 << 30), "a2", home="/home/ana")
    assert env["SLURMD_NODENAME"] == env["HAL_NODE"] == "a2"
    assert env["SLURM_NODEID"] == "1"
    assert env["SLURM_JOB_NODELIST"] == env["SLURM_NODELIST"] == "a[1-2]"
    assert env["SLURM_NNODES"] == env["SLURM_JOB_NUM_NODES"] == "2"
    assert env["SLURM_MEM_PER_NODE"] == "3072"
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == env["HAL_JOB_ID"] == "12"
    assert env["HOME"] == "/home/ana"
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert "SLURM_RESTART_COUNT" not in env


def test_server_values_win_except_gpus() -> None:
    env = job_environment(
        launch(
            gpu_ids=[2],
            environment={"PATH": "/opt/bin", "SLURM_NODEID": "9", "CUDA_VISIBLE_DEVICES": "0"},
        ),
        "a2",
    )
    assert env["PATH"] == "/opt/bin"
    assert env["SLURM_NODEID"] == "9"
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"] == env["HAL_JOB_GPUS"] == "2"
    assert env["SLURM_GPUS_ON_NODE"] == "1"


def test_restart_and_array_variables() -> None:
    env = job_environment(launch(attempt=2, array_job_id=10, array_task_id=3), "a1")
    assert env["SLURM_RESTART_COUNT"] == "2"
    assert (env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"]) == ("10", "3")


def test_export_none_still_gets_a_path() -> None:
    assert job_environment(launch(environment={}), "a1")["PATH"].endswith("/bin")


def test_the_agents_marker_wins_over_an_exported_one() -> None:
    """The marker by which an agent finds a job's processes after its supervisor died
    (``remains``): a value copied from another job's environment must not name this one."""
    env = job_environment(
        launch(attempt=1, environment={"HAL_JOB_MARKER": "other/3.0"}), "a1", agent="n1.abcd"
    )
    assert env["HAL_JOB_MARKER"] == "n1.abcd/12.1"


def test_isolated_gpus_are_numbered_from_zero_for_cuda() -> None:
    """With the other GPUs' device files denied, CUDA sees the job's GPUs as 0..k-1
    (gres.shtml); SLURM_JOB_GPUS keeps the node's own ids."""
    env = job_environment(launch(gpu_ids=[2, 3]), "a2", gpus_isolated=True)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["SLURM_JOB_GPUS"] == env["HAL_JOB_GPUS"] == "2,3"
