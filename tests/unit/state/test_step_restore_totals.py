"""A running step's ended nodes keep what their tasks used in ``running_steps.ended``
(``running_row`` / ``totals_of``), beside each node's end; a row written by a server
before step usage reads as none used."""

from __future__ import annotations

from hal.slurm.steps import StepLayout
from hal.state.step_restore import ended_of, running_row, totals_of
from hal.state.store import RunningStepRow


def test_each_ended_nodes_tasks_come_back() -> None:
    layout = StepLayout(("n1", "n2"), (2, 1))
    totals = {0: ("n1", 5 << 20, 1.5), 1: ("n1", 0, 0.25), 2: ("n2", 9 << 20, 3.0)}
    row = running_row(7, 0, 0, "a.out", layout, 1.0, {"n1": (0, 0)}, False, totals=totals)
    assert totals_of(row) == {0: ("n1", 5 << 20, 1.5), 1: ("n1", 0, 0.25)}  # n2 runs on
    assert ended_of(row) == ({"n1": (0, 0)}, False)


def test_a_row_from_before_step_usage_reads_as_none_used() -> None:
    row = RunningStepRow(7, 0, 0, "a.out", "n1,n2", "1,1", 1.0, '{"n1": [1, 0, true]}')
    assert totals_of(row) == {}
    assert ended_of(row) == ({"n1": (1, 0)}, True)
