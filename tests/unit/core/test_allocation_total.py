"""``Allocation.total``: the sum of what a job holds on each of its nodes."""

from __future__ import annotations

from hal.core.job import Allocation
from hal.core.resources import GiB, ResourceVector


def test_allocation_total_shared_and_mixed_vectors() -> None:
    per = ResourceVector(4, 8 * GiB, 1)
    uniform = Allocation(("a", "b", "c"), (per, per, per))
    assert uniform.total() == ResourceVector(12, 24 * GiB, 3)
    equal_not_shared = Allocation(("a", "b"), (per, ResourceVector(4, 8 * GiB, 1)))
    assert equal_not_shared.total() == ResourceVector(8, 16 * GiB, 2)
    mixed = Allocation(("a", "b"), (per, ResourceVector(2, GiB, 0)))
    assert mixed.total() == ResourceVector(6, 9 * GiB, 1)
    assert Allocation((), ()).total() == ResourceVector()
