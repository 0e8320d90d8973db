"""``prctl(2)`` for the process attributes Python does not wrap (Linux only).

Used by the step supervisor (``PR_SET_CHILD_SUBREAPER``: the job's orphans become its
children) and by the agents of ``hal up`` (``PR_SET_PDEATHSIG``: they stop with it).
libc is loaded when this module is imported, so a forked child that calls ``prctl``
never runs the dynamic loader (see ``supervisor``'s fork-safety note).
"""

from __future__ import annotations

import ctypes
import os

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36

_LIBC = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    """Set one attribute of the calling process (or thread, for ``PR_SET_PDEATHSIG``);
    raises ``OSError`` when the kernel refuses it."""
    if _LIBC.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
