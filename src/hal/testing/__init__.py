"""HAL's public test kit: fluent builders for jobs, nodes, partitions and snapshots, fake
scheduler plugins, and a small harness that runs a pass and reads the plan back.

A test case should read as one line::

    snap = cluster().nodes(make_node("n1").cpus(4)).pending(make_job(1).cpus(2)).build()

Imports core and the scheduler framework only (no hypothesis: strategies live with the
property tests), so any test suite or downstream project can use it.
"""

from hal.testing.builders import (
    ClusterBuilder,
    JobBuilder,
    NodeBuilder,
    cluster,
    make_job,
    make_node,
    parse_dependency,
)
from hal.testing.fakes import (
    CrashingFilter,
    CrashingPreFilter,
    CrashingReserve,
    CrashingScore,
    FakeCounted,
    FakeFilter,
    FakePreFilter,
    FixedScore,
    RecordingReserve,
    RejectingPermit,
)
from hal.testing.harness import (
    allocations,
    expected_starts,
    placed_nodes,
    reasons,
    scheduler_with,
)

__all__ = [
    "ClusterBuilder",
    "CrashingFilter",
    "CrashingPreFilter",
    "CrashingReserve",
    "CrashingScore",
    "FakeCounted",
    "FakeFilter",
    "FakePreFilter",
    "FixedScore",
    "JobBuilder",
    "NodeBuilder",
    "RecordingReserve",
    "RejectingPermit",
    "allocations",
    "cluster",
    "expected_starts",
    "make_job",
    "make_node",
    "parse_dependency",
    "placed_nodes",
    "reasons",
    "scheduler_with",
]
