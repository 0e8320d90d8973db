"""The job's memory a step is given on each of its nodes (``hal.slurm.steps``), as Slurm
22.05.8 gives it with memory a consumable resource (docs/slurm-checks.md, "Steps hold
their job's memory"): ``--mem`` per node (0: all the job's), ``--mem-per-cpu`` per CPU it
holds; without either the job's ``--mem-per-cpu`` per CPU, else all the job's memory."""

from __future__ import annotations

import pytest

from hal.slurm.steps import StepRequest, step_memory_asks

M = 1 << 20
JOB = (800 * M, 600 * M)  # the job's memory on each of the step's two nodes
CPUS = (1, 2)  # the step's CPUs on each


@pytest.mark.parametrize(
    ("request_", "job_per_cpu", "asks"),
    [
        (StepRequest(), None, JOB),  # all the job's
        (StepRequest(exact=True), None, JOB),  # --exact too: all its memory
        (StepRequest(mem_per_node=150 * M), None, (150 * M, 150 * M)),
        (StepRequest(mem_per_node=0), 100 * M, JOB),  # --mem=0: all the job's
        (StepRequest(mem_per_cpu=100 * M), None, (100 * M, 200 * M)),
        (StepRequest(), 100 * M, (100 * M, 200 * M)),  # the job's --mem-per-cpu
        (StepRequest(mem_per_cpu=30 * M), 100 * M, (30 * M, 60 * M)),  # its own first
    ],
)
def test_memory_given_on_each_node(
    request_: StepRequest, job_per_cpu: int | None, asks: tuple[int, ...]
) -> None:
    assert step_memory_asks(request_, CPUS, JOB, job_per_cpu) == asks
