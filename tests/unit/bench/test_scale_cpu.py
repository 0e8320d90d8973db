"""``hal bench scale`` reads its emulators' CPU even when one has exited (a refused
token ends an emulator at once): that one counts 0, the bench goes on."""

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
