"""A step's UserCPU and SystemCPU (``step_usage.cpu_times``): its tasks' user and system
seconds summed, not known where a task that used CPU did not say them (an older agent or
srun); a running step's ended nodes keep them in ``running_steps.ended`` (``times_of``),
a row from a server before them reads as none said."""

from __future__ import annotations

from hal.slurm.steps import StepLayout
from hal.state.step_restore import running_row, times_of, totals_of
from hal.state.step_usage import cpu_times
from hal.state.store import RunningStepRow


def test_a_steps_parts_are_its_tasks_sums() -> None:
    totals = {0: ("n1", 0, 1.5), 1: ("n1", 0, 0.5), 2: ("n2", 0, 0.0)}
    times = {0: (1.25, 0.25), 1: (0.125, 0.375)}
    assert cpu_times(totals, times) == (1.375, 0.625)  # rank 2 used none: no parts needed
    assert cpu_times(totals, {0: (1.25, 0.25)}) is None  # rank 1 used CPU, said no parts
    assert cpu_times({}, {}) == (0.0, 0.0)


def test_each_ended_nodes_parts_come_back() -> None:
    layout = StepLayout(("n1", "n2"), (2, 1))
    totals = {0: ("n1", 0, 1.5), 1: ("n1", 0, 0.25), 2: ("n2", 0, 3.0)}
    times = {0: (1.0, 0.5), 2: (2.0, 1.0)}  # rank 1: from an older agent, none
    row = running_row(
        7, 0, 0, "a.out", layout, 1.0, {"n1": (0, 0)}, False, totals=totals, times=times
    )
    assert times_of(row) == {0: (1.0, 0.5)}  # n2 runs on
    assert totals_of(row) == {0: ("n1", 0, 1.5), 1: ("n1", 0, 0.25)}


def test_a_row_from_before_the_parts_reads_as_none_said() -> None:
    ended = '{"n1": [0, 0, false, {"0": [0, 1.5]}, {}]}'
    row = RunningStepRow(7, 0, 0, "a.out", "n1,n2", "1,1", 1.0, ended)
    assert times_of(row) == {}
    assert totals_of(row) == {0: ("n1", 0, 1.5)}
