"""The workload traces the test suite replays, kept in the repository.

``tests/data/traces`` holds the small Parallel Workloads Archive logs (and excerpts of large
ones) the tests read; its ``README.md`` says where each came from. The full set the
benchmarks replay is ``hal.sim.traces`` (outside the repository)::

    SDSC = trace_path("SDSC-SP2-1998-4.2-cln.swf.gz")
"""

from __future__ import annotations

from pathlib import Path

TEST_TRACES = Path(__file__).resolve().parents[3] / "tests" / "data" / "traces"


def trace_path(name: str) -> Path:
    """The file of the test trace ``name``; refused when there is none, so a test never
    skips for want of one (the traces come with the repository, not with the package)."""
    path = TEST_TRACES / name
    if not path.is_file():
        raise FileNotFoundError(
            f"no test trace {name!r} in {TEST_TRACES}: the tests' traces are those listed "
            "in tests/data/traces/README.md, in a checkout of the repository"
        )
    return path
