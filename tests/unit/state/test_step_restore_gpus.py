"""A running step's ended nodes keep their tasks' GPU use in ``running_steps.ended``
(``running_row`` / ``gpus_of``) beside their memory and CPU, so a server restarting
between two nodes' ends still records the first node's; a row from before reads none."""

from __future__ import annotations

from hal.slurm.steps import StepLayout
from hal.state.step_restore import gpus_of, running_row, totals_of
from hal.state.store import RunningStepRow


def test_each_ended_nodes_gpu_use_comes_back() -> None:
    layout = StepLayout(("n1", "n2"), (2, 1))
    totals = {0: ("n1", 5 << 20, 1.5), 1: ("n1", 0, 0.25), 2: ("n2", 9 << 20, 3.0)}
    gpus = {0: (1 << 30, 70, 65.5), 2: (2 << 30, 90, 80.0)}  # rank 1: not read
    row = running_row(
        7, 0, 0, "a.out", layout, 1.0, {"n1": (0, 0)}, False, totals=totals, gpus=gpus
    )
    assert gpus_of(row) == {0: (1 << 30, 70, 65.5)}  # n2 runs on
    assert totals_of(row) == {0: ("n1", 5 << 20, 1.5), 1: ("n1", 0, 0.25)}


def test_a_row_from_before_step_gpu_use_reads_none() -> None:
    row = RunningStepRow(
        7, 0, 0, "a.out", "n1,n2", "1,1", 1.0, '{"n1": [0, 0, false, {"0": [1024, 0.5]}]}'
    )
    assert gpus_of(row) == {}
    assert totals_of(row) == {0: ("n1", 1024, 0.5)}
