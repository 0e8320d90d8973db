"""``hal bench scale``'s readings: its emulators' CPU even when one has exited (a refused
token ends an emulator at once: that one counts 0, the bench goes on), and the longest
pass's breakdown with when it ended."""

from __future__ import annotations

import subprocess
import sys

import psutil

from hal.bench.scale import cpu_seconds


def test_an_exited_emulator_counts_no_cpu() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_ps = psutil.Process(gone.pid)
    gone.wait()  # exited and reaped: psutil raises NoSuchProcess for it
    assert cpu_seconds([gone_ps]) == 0
    here = cpu_seconds([psutil.Process()])
    assert here > 0 and here <= cpu_seconds([gone_ps, psutil.Process()]) <= here + 1


def test_the_longest_pass_is_reported_with_when_it_ended_after_the_opening() -> None:
    from hal.bench.scale import _longest

    diag = {"now": 2000.0, "max_pass_breakdown": {"pass_s": 2.5, "at": 1022.74}}
    assert _longest(diag, 1000.0) == {"pass_s": 2.5, "at": 1022.74, "opened_s": 22.7}
    assert _longest({"now": 2000.0}, 1000.0) is None  # (an older server's diag)
