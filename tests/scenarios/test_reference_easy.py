"""The published reference for EASY with user estimates (Tsafrir, Etsion and Feitelson,
"Backfilling using system-generated predictions rather than user runtime estimates",
IEEE TPDS 2007): mean wait and mean bounded slowdown (tau = 10 s) with the first 1% of
jobs left out. HAL's EASY must land within 10% of each published number.

Slow: each replays a whole trace (minutes on a 2-core machine). Run with HAL_SLOW=1.
"""

from __future__ import annotations

import pytest

from hal.sim import Cleaning, SimOptions, run_trace
from hal.testing.traces import trace_path

# trace, machine size, published mean wait (minutes), published mean bsld
REFERENCE = [
    ("SDSC-SP2-1998-4.2-cln.swf.gz", None, 363.0, 99.0),
    ("KTH-SP2-1996-2.swf.gz", None, 114.2, 89.9),
    ("CTC-SP2-1996-3.1-cln.swf.gz", 512, 21.3, 4.6),
]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("trace", "procs", "wait_min", "bsld"), REFERENCE)
def test_easy_matches_the_published_numbers(
    trace: str, procs: int | None, wait_min: float, bsld: float
) -> None:
    """A site replaying its own log with HAL's EASY sees what the literature reports."""
    _, s = run_trace(
        trace_path(trace),
        SimOptions(policy="easy", exclude_first_fraction=0.01),
        Cleaning(procs=procs),
    )
    assert s["mean_wait_s"] / 60 == pytest.approx(wait_min, rel=0.10)
    assert s["mean_bsld"] == pytest.approx(bsld, rel=0.10)
