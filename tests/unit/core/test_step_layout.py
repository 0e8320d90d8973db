"""Where a job step's tasks run (``hal.slurm.steps.step_layout``): srun's -N/-n/-w/
--ntasks-per-node inside a job's allocation, with Slurm's block distribution."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.slurm.steps import StepLayout, StepRequest, step_layout

NODES = ("n1", "n2", "n3")


@pytest.mark.parametrize(
    ("request_", "job_ntasks", "nodes", "tasks"),
    [
        (StepRequest(), 3, NODES, (1, 1, 1)),  # plain srun: the whole allocation
        (StepRequest(), 4, NODES, (2, 1, 1)),  # SLURM_NTASKS=4: first nodes fuller
        (StepRequest(), 1, NODES, (1, 1, 1)),  # sbatch -N3: one task per node
        (StepRequest(nodes=2), 3, ("n1", "n2"), (1, 1)),  # -N2: one task per node
        (StepRequest(ntasks=1), 3, ("n1",), (1,)),  # -n1: fewer tasks, fewer nodes
        (StepRequest(nodes=2, ntasks=5), 3, ("n1", "n2"), (3, 2)),
        (StepRequest(ntasks_per_node=2), 3, NODES, (2, 2, 2)),
        (StepRequest(ntasks=3, ntasks_per_node=2), 3, ("n1", "n2"), (2, 1)),
        (StepRequest(nodelist=("n3",)), 3, ("n3",), (1,)),  # -w n3
        (StepRequest(nodes=2, nodelist=("n3",)), 3, ("n1", "n3"), (1, 1)),
    ],
)
def test_layout(
    request_: StepRequest, job_ntasks: int, nodes: tuple[str, ...], tasks: tuple[int, ...]
) -> None:
    """Each srun option combination lands its tasks where Slurm's srun would."""
    layout = step_layout(request_, 7, NODES, job_ntasks)
    assert (layout.nodes, layout.tasks) == (nodes, tasks)


def test_ranks_are_dealt_in_blocks() -> None:
    layout = StepLayout(("a", "b", "c"), (2, 2, 1))
    assert [list(layout.ranks(i)) for i in range(3)] == [[0, 1], [2, 3], [4]]
    assert layout.ntasks == 5
    assert layout.tasks_per_node() == "2(x2),1"


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (StepRequest(nodes=4), "asks for 4 nodes and the job has 3"),
        (StepRequest(nodelist=("other",)), "node other is not in the job's allocation"),
        (StepRequest(nodes=1, nodelist=("n1", "n2")), "-w names 2 nodes but -N asks for 1"),
        (StepRequest(ntasks=7, ntasks_per_node=2), "7 tasks do not fit 3 node(s)"),
        (StepRequest(ntasks=1, nodelist=("n1", "n2")), "1 task(s) cannot run on the 2 nodes"),
    ],
)
def test_refusals_say_what_to_change(request_: StepRequest, words: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        step_layout(request_, 7, NODES, 3)
    assert err.value.message.startswith("Unable to create step for job 7: ")
    assert words in err.value.message


def test_cpus_bound_the_tasks_per_node() -> None:
    """A node runs at most as many tasks as the job's CPUs there hold, as Slurm refuses
    a step with "More processors requested than permitted"."""
    assert step_layout(StepRequest(ntasks=4), 7, ("n1", "n2"), 2, cpus_per_node=(2, 2)).tasks == (
        2,
        2,
    )
    with pytest.raises(InvalidRequest, match="More processors requested than permitted"):
        step_layout(StepRequest(ntasks=5), 7, ("n1", "n2"), 2, cpus_per_node=(2, 2))
    with pytest.raises(InvalidRequest, match="2 task\\(s\\) of 2 CPU"):
        step_layout(StepRequest(), 7, ("n1", "n2"), 4, cpus_per_node=(2, 2), cpus_per_task=2)
