"""The worker job's own process: it runs the worker in a child process and starts a new
one when a task kills it.

A task may end its process: ``os._exit``, a segfault in an extension, an executable
service that exits under it (``service.ServiceExited``). The job's first process (this
one, the batch script's ``exec``) stays, forks a new worker, and that worker reconnects
to the broker under the same job: the broker reruns the dead one's tasks and blames the
task that keeps doing it (``tasks.py``), as for any worker death, but a death costs a
process start, not a worker job. The new worker tells the broker how the last one ended
(``died``), which a poison task's error then names.

The child says when it ends on purpose (STOP, a service that cannot load, a broker that
is gone, a bug of its own) by writing its exit status to a pipe before it exits; then
this process exits with that status. A child that ends without saying so was killed by
its task (or returned None: its executable service died under a task) and is replaced,
except one killed by SIGKILL: the kernel's out-of-memory killer sends it (or a person
meaning it), so the job ends and its end state says which. The broker bounds the
restarts: a job it does not want back is told STOP when its new worker connects (a
worker that dies loading its service counts as failing to start).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

Child = Callable[[str], int | None]


def keep(child: Child) -> int:
    """Run ``child(died)`` in a forked process until it ends on purpose (returns an exit
    status); returns that status. ``died``: how the previous child ended ("" for the
    first)."""
    died = ""
    while True:
        said_r, said_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(said_r)
            _child(child, died, said_w)
        os.close(said_w)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(said_r, "rb") as said:
            code = said.read(1)
        if code:
            return code[0]
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            return 128 + signal.SIGKILL
        died = describe(pid, status)
        print(f"hal-htc-worker: {died}; starting a new one", file=sys.stderr, flush=True)


def _child(child: Child, died: str, said: int) -> NoReturn:
    code: int | None = 1
    try:
        code = child(died)
    except BaseException:  # a bug of the worker's own: said, so no endless restarts
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if code is not None:
            os.write(said, bytes([code & 0xFF]))
        os._exit(1 if code is None else code)


def describe(pid: int, status: int) -> str:
    """How a worker process that ended without saying so ended, for the broker."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = f" ({signal.Signals(number).name})"
        except ValueError:
            name = ""
        return f"the worker process (pid {pid}) was killed by signal {number}{name}"
    return f"the worker process (pid {pid}) exited with status {os.WEXITSTATUS(status)}"
