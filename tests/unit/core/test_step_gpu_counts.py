"""How many GPUs a step holds on each of its nodes, and which of its job's it gets
(``hal.slurm.steps``): srun's ``--gpus`` (spread over the nodes), ``--gpus-per-node`` /
``--gres=gpu:N``, ``--gpus-per-task``, without any all the job's (none with
``--overlap``); the first free ones, None while too few are free, refused past what the
job has."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.slurm.steps import StepLayout, StepRequest, pick_gpus, step_gpu_counts

THREE = StepLayout(("n1", "n2", "n3"), (2, 1, 1))


@pytest.mark.parametrize(
    ("request_", "counts"),
    [
        (StepRequest(), None),  # none asked: the job's, shared
        (StepRequest(gpus=0), (0, 0, 0)),
        (StepRequest(gpus=4), (2, 1, 1)),  # the first nodes one more
        (StepRequest(gpus=3), (1, 1, 1)),
        (StepRequest(gpus_per_node=2), (2, 2, 2)),
        (StepRequest(gpus_per_task=1), (2, 1, 1)),  # by each node's tasks
    ],
)
def test_gpus_asked_on_each_node(request_: StepRequest, counts: tuple[int, ...] | None) -> None:
    assert step_gpu_counts(request_, THREE) == counts  # in a job without GPUs
    assert request_.asks_gpus == (counts is not None)
    if counts is not None:  # what it asks for, whatever the job has
        assert step_gpu_counts(request_, THREE, (4, 4, 4)) == counts


@pytest.mark.parametrize(
    ("request_", "counts"),
    [
        (StepRequest(), (2, 1, 0)),  # all the job's on each node
        (StepRequest(exact=True), (2, 1, 0)),
        (StepRequest(overlap=True), None),  # shares them: holds none
        (StepRequest(overlap=True, gpus=2), (1, 1, 0)),
    ],
)
def test_a_step_without_a_gpu_option_holds_the_jobs(
    request_: StepRequest, counts: tuple[int, ...] | None
) -> None:
    assert step_gpu_counts(request_, THREE, (2, 1, 0)) == counts


def test_a_step_gets_the_first_free_gpus_of_its_job() -> None:
    assert pick_gpus(7, "n1", (0, 2, 3), held={0}, want=2) == (2, 3)
    assert pick_gpus(7, "n1", (0, 2, 3), held={0, 3}, want=2) is None  # waits
    assert pick_gpus(7, "n1", (0, 2, 3), held={0, 2, 3}, want=0) == ()
    with pytest.raises(InvalidRequest) as err:
        pick_gpus(7, "n1", (0, 2), held=set(), want=3)
    assert err.value.message == (
        "Unable to create step for job 7: Invalid generic resource (gres) specification: "
        "the step requested gres=gpu:3 on n1, more than the job's gres=gpu:2 there"
    )
