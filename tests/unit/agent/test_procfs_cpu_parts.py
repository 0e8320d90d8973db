"""The agent's samples of running processes (``procfs.tree_usage``, ``job_usage``) keep
their CPU time's user and system parts apart (``/proc/<pid>/stat``'s utime and stime), as
sacct's UserCPU and SystemCPU of a running job read them: a process burning user time
shows user time, one burning system time shows system time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hal.agent.procfs import tree_usage

USER_BURN = "while True: pass\n"
SYSTEM_BURN = (
    "import os\n"
    "fd, buf = os.open('/dev/zero', os.O_RDONLY), bytearray(1 << 20)\n"
    "while True: os.readv(fd, [buf])\n"
)


def sampled(code: str) -> tuple[float, float, float]:
    """(user, system, CPU seconds) of a sample of a shell running ``code`` in Python (the
    shell's child: the tree's time), in a process group of its own, taken once the tree
    has used 0.4 s of CPU: on a loaded machine that takes longer than 0.4 s of wall time,
    and the split, not the wall time, is what is checked."""
    shell = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -c "$0"; :', code], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        use = tree_usage(shell.pid)
        while use.cpu_seconds < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
            use = tree_usage(shell.pid)
    finally:
        os.killpg(shell.pid, signal.SIGKILL)  # the shell and its child, which we started
        shell.wait()
    return use.user_seconds, use.system_seconds, use.cpu_seconds


def test_a_sample_of_a_loop_is_user_time() -> None:
    user, system, cpu = sampled(USER_BURN)
    assert user >= 0.3 and system < user / 4, (user, system)
    assert cpu == user + system


def test_a_sample_of_reads_from_dev_zero_is_system_time() -> None:
    user, system, cpu = sampled(SYSTEM_BURN)
    assert system >= 0.25 and user < system, (user, system)
    assert cpu == user + system
