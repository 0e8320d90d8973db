"""How many of its job's CPUs a step holds on each of its nodes (``hal.slurm.steps``), as
Slurm 22.05's steps hold them (docs/slurm-checks.md, "Steps wait for the CPUs other
steps hold"): all the job's there by default, whatever its tasks; its tasks' (``-c``
each, else one) with ``--exact``, ``--exclusive`` or ``-c``; none with ``--overlap``."""

from __future__ import annotations

import pytest

from hal.slurm.steps import StepLayout, StepRequest, pick_cpus, step_cpu_counts

TWO = StepLayout(("n1", "n2"), (3, 1))
JOB_CPUS = (8, 4)


@pytest.mark.parametrize(
    ("request_", "counts"),
    [
        (StepRequest(), (8, 4)),  # the whole allocation on its nodes
        (StepRequest(ntasks=1), (8, 4)),  # one task too (the layout says where)
        (StepRequest(exact=True), (3, 1)),  # a CPU per task
        (StepRequest(cpus_per_task=2), (6, 2)),  # -c implies --exact
        (StepRequest(exact=True, cpus_per_task=2), (6, 2)),
        (StepRequest(overlap=True), None),  # holds none, waits for none
        (StepRequest(overlap=True, exact=True), None),
    ],
)
def test_cpus_held_on_each_node(request_: StepRequest, counts: tuple[int, ...] | None) -> None:
    assert step_cpu_counts(request_, TWO, JOB_CPUS) == counts


def test_a_step_gets_the_lowest_free_places_among_its_jobs_cpus() -> None:
    assert pick_cpus(set(), 4, 4) == (0, 1, 2, 3)  # a plain step: all of them
    assert pick_cpus({0, 2}, 4, 2) == (1, 3)
    assert pick_cpus({0, 2}, 4, 3) is None  # waits
    assert pick_cpus({0, 1, 2, 3}, 4, 0) == ()
