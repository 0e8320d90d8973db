"""The one ``prctl`` helper the supervisor and ``hal up``'s agents share, on a real
process: what it sets is what the kernel reports, and a refusal is an error, not a
silently ignored return value."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys

import pytest

from hal.agent.prctl import prctl

# In a child of its own: the attributes must not stick to the test process.
PROBE = """
import ctypes, signal
from hal.agent.prctl import PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, prctl
libc = ctypes.CDLL(None)
prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
prctl(PR_SET_CHILD_SUBREAPER, 1)
death, reaper = ctypes.c_int(), ctypes.c_int()
libc.prctl(2, ctypes.byref(death), 0, 0, 0)  # PR_GET_PDEATHSIG
libc.prctl(37, ctypes.byref(reaper), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
print(death.value, reaper.value)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_prctl_sets_what_the_kernel_reports() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(int(signal.SIGUSR1)), "1"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_refused_prctl_raises() -> None:
    with pytest.raises(OSError) as err:
        prctl(0x7FFF_FFFF, 0)  # no such option
    assert err.value.errno == errno.EINVAL
