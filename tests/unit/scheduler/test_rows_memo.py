"""``NodeTable.rows_of`` memoises allocations as rows, within a bounded memory."""

from __future__ import annotations

import numpy as np
import pytest

from hal.core.job import Allocation
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework import node_table
from hal.scheduler.framework.node_table import NodeTable


def test_the_memo_is_emptied_past_its_row_budget_and_stays_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wide allocations fill the row budget: the memo starts over, shared by the
    table's copies, and every look-up still gives the allocation's rows."""
    monkeypatch.setattr(node_table, "_MEMO_ROWS", 10)
    nodes = [Node(f"n{i}", ResourceVector(4, 8 * GiB, 0), partitions=("p",)) for i in range(8)]
    table = NodeTable(nodes, [Partition("p")])
    copy = table.copy()
    per = ResourceVector(2, GiB, 0)
    allocs = [
        Allocation(tuple(f"n{j}" for j in range(i % 8 + 1)), (per,) * (i % 8 + 1))
        for i in range(40)
    ]
    for i, alloc in enumerate(allocs):
        ar = (table if i % 2 else copy).rows_of(alloc)
        assert ar.rows.tolist() == list(range(len(alloc.nodes)))
        assert (ar.cpus == 2).all() and (ar.memory == GiB).all()
        memo = table._rows_memo
        assert memo is copy._rows_memo
        assert memo.rows == sum(len(found.rows) for found in memo.values())
        assert memo.rows <= 10 + 8
    rows = np.array([0, 1, 2], dtype=np.intp)
    wide = Allocation(("n0", "n1", "n2"), (per,) * 3)
    table.remember(wide, rows, uniform=True)
    assert table.rows_of(wide).rows.tolist() == [0, 1, 2]
