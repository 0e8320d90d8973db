"""A running step's layout kept for a server restart (``hal.state.step_restore``): ranks
dealt other than in blocks (``srun -m cyclic``) come back as they were, so a restarted
server still takes each node's output for the right ranks; a row an older server wrote
(counts only) still reads. So do the ranks reading srun's relayed stdin."""

from __future__ import annotations

from hal.slurm.steps import StepLayout
from hal.state.step_restore import layout_of, relay_of, running_row


def test_dealt_ranks_survive_the_row() -> None:
    layout = StepLayout(("n1", "n2"), (2, 1), ((0, 2), (1,)), "cyclic")
    row = running_row(7, 0, 0, "a.out", layout, 1.0, {}, False)
    back = layout_of(row)
    assert (back.nodes, back.tasks) == (("n1", "n2"), (2, 1))
    assert [list(back.ranks(i)) for i in range(2)] == [[0, 2], [1]]


def test_block_rows_keep_their_old_form() -> None:
    row = running_row(7, 0, 0, "a.out", StepLayout(("n1", "n2"), (2, 1)), 1.0, {}, False)
    assert row.tasks == "2,1"
    assert [list(layout_of(row).ranks(i)) for i in range(2)] == [[0, 1], [2]]


def test_the_ranks_reading_sruns_input_survive_the_row() -> None:
    layout = StepLayout(("n1", "n2"), (2, 1))
    relayed = running_row(7, 0, 0, "cat", layout, 1.0, {}, False, relay={"n1": (0, 1)})
    assert relay_of(relayed) == {"n1": (0, 1)}
    assert relay_of(running_row(7, 0, 0, "cat", layout, 1.0, {}, False)) is None
