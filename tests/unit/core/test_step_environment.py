"""The variables a step's tasks get (``hal.slurm.steps.step_environment``), one set for a
step srun runs on the batch node and one the agents run: the step's id, its counts,
nodes and tasks per node in place of the job's, and its distribution."""

from __future__ import annotations

from hal.slurm.steps import StepLayout, step_environment


def test_a_step_over_two_nodes() -> None:
    layout = StepLayout(("n1", "n2", "n3"), (2, 2, 1), distribution="cyclic")
    assert step_environment(3, layout) == {
        "SLURM_STEP_ID": "3",
        "SLURM_STEPID": "3",
        "SLURM_STEP_NUM_TASKS": "5",
        "SLURM_STEP_NUM_NODES": "3",
        "SLURM_STEP_NODELIST": "n[1-3]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
        "SLURM_NTASKS": "5",
        "SLURM_NPROCS": "5",
        "SLURM_NNODES": "3",
        "SLURM_NODELIST": "n[1-3]",
        "SLURM_TASKS_PER_NODE": "2(x2),1",
        "SLURM_DISTRIBUTION": "cyclic",
    }


def test_a_plane_step_the_server_did_not_number() -> None:
    """srun could not reach the server: no step id, the rest as for a numbered step."""
    found = step_environment(None, StepLayout(("n1",), (4,), distribution="plane", plane_size=2))
    assert "SLURM_STEP_ID" not in found and "SLURM_STEPID" not in found
    assert (found["SLURM_DISTRIBUTION"], found["SLURM_DIST_PLANESIZE"]) == ("plane", "2")
    assert found["SLURM_STEP_TASKS_PER_NODE"] == "4"


def test_the_default_distribution_is_block() -> None:
    assert step_environment(0, StepLayout(("n1",), (1,)))["SLURM_DISTRIBUTION"] == "block"
