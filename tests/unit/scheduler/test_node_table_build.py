"""``NodeTable.build`` takes the running jobs out of the table as taking each one does:
the one-node jobs without GPUs summed by vector operations, the others one by one."""

from __future__ import annotations

import numpy as np

from hal.core.job import Job
from hal.core.preemption import PREEMPT_MODE, PreemptMode, holding
from hal.core.states import JobState
from hal.scheduler.framework.node_table import NodeTable
from hal.testing.builders import make_job, make_node

NODES = [make_node(f"n{i}").cpus(8).mem_gib(32).gpus(2).build() for i in range(1, 5)]


def _running() -> list[Job]:
    return [
        make_job(1).cpus(2).mem_gib(4).running_on("n1").build(),
        make_job(2).cpus(3).mem_gib(1).running_on("n1").build(),  # the same node again
        make_job(3).cpus(1).mem_gib(2).exclusive().running_on("n2").build(),
        make_job(4).cpus(2).mem_gib(2).running_on("n3", "n4").build(),  # two nodes
        make_job(5).cpus(1).mem_gib(1).gpus(1).running_on("n3", gpu_ids=((1,),)).build(),
        make_job(6).cpus(4).mem_gib(8).running_on("gone").build(),  # a node that left
        make_job(7)  # suspended for a preemptor: its memory held, not its CPUs
        .cpus(4)
        .mem_gib(3)
        .extra(PREEMPT_MODE, PreemptMode.SUSPEND.value)
        .running_on("n4", state=JobState.SUSPENDED)
        .build(),
    ]


def test_the_table_built_holds_what_taking_each_job_holds() -> None:
    running = _running()
    built = NodeTable.build(NODES, (), running)
    taken = NodeTable(NODES, ())
    for job in running:
        alloc, exclusive = holding(job)
        assert alloc is not None
        taken.take(alloc, exclusive=exclusive)
    for attr in ("free_cpus", "free_memory", "free_gpus", "jobs_on", "exclusive_on"):
        assert np.array_equal(getattr(built, attr), getattr(taken, attr)), attr
    assert built.gpus_in_use == taken.gpus_in_use
    gib = 2**30
    assert built.free_cpus.tolist() == [3, 7, 5, 6]  # n4: the suspended job's CPUs free
    assert built.free_memory.tolist() == [27 * gib, 30 * gib, 29 * gib, 27 * gib]
    assert built.jobs_on.tolist() == [2, 1, 2, 2]
    assert built.exclusive_on.tolist() == [0, 1, 0, 0]
    assert built.free_gpus.tolist() == [2, 2, 1, 2]
    assert built.gpus_in_use[2] == 0b10  # GPU 1 of n3
