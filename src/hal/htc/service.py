"""Loading a service in a worker: a Python callable or an executable.

A *service* is what a session's tasks call. Two kinds:

- ``python``: ``"package.module:function"``, imported once per worker; each task calls
  ``function(*args)`` and its return value is the result;
- ``exec``: an executable started once per worker that reads tasks from stdin and writes
  results to stdout, each as a 4-byte little-endian length followed by that many bytes.
  A task's single argument (``bytes`` or ``str``) is sent as is; the reply comes back as
  ``bytes``. A reply of length 0xFFFFFFFF followed by a length-prefixed UTF-8 message
  means the task failed with that message. One task at a time: the program reads a
  request, writes its reply, and only then reads the next; it exits when stdin closes.
  Its stderr goes to the worker's output (``worker_output``).

  Three situations break the request/reply lock-step, and each is handled so that the
  next task cannot read a stale reply:

  - the program exits (or closes stdout) while a task runs: ``ServiceExited``. The worker
    exits too, so the broker sees a worker death and re-runs the worker's tasks elsewhere;
    a task that keeps killing the program is failed as poison like one that kills a
    Python worker (``tasks.py``). A program that exits before the session's service ever
    answered a task (``/bin/false``) counts as a service that failed to start instead;
  - a task is interrupted mid-exchange (its timeout): the program may still answer it
    later, so it is killed and started again before the next task;
  - the program writes something else to stdout (a debug line): its first bytes read as
    a length above any reply's (``MAX_REPLY_BYTES``), so the task fails at once saying
    so (``ServiceProtocolError``), and the program is killed and started again.

The session's common data is read inside a task with ``hal.htc.common()``.
"""

from __future__ import annotations

import contextlib
import importlib
import struct
import subprocess
from collections.abc import Callable
from typing import Any

from hal.htc import protocol as p

LENGTH = struct.Struct("<I")
FAILURE_MARK = 0xFFFFFFFF
# A reply longer than this could not travel back as a result: a length prefix above it
# is output that is not the protocol (text the program printed), not a reply.
MAX_REPLY_BYTES = p.MAX_ITEM_BYTES

_common: Any = None


def common() -> Any:
    """The session's common data, inside a task (None when the session has none)."""
    return _common


def set_common(value: Any) -> None:
    global _common
    _common = value


class ServiceError(Exception):
    """An executable service reported that a task failed."""


class ServiceExited(ServiceError):
    """The executable service exited (or closed its stdout) while a task ran."""


class ServiceProtocolError(ServiceError):
    """The executable service wrote something to stdout that is not a reply frame."""


def load(spec: dict[str, Any]) -> tuple[Callable[..., Any], Callable[[], None]]:
    """Return ``(call, close)`` for a service spec (``{"kind": ..., ...}``)."""
    kind = spec.get("kind")
    if kind == "python":
        target = str(spec["target"])
        module_name, _, attr = target.partition(":")
        if not module_name or not attr:
            raise ValueError(f"service {target!r} must look like 'package.module:function'")
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"service {target!r} is not callable")
        return obj, lambda: None
    if kind == "exec":
        program = ExecutableService([str(a) for a in spec["argv"]])
        return program.call, program.close
    raise ValueError(f"unknown service kind {kind!r}")


class ExecutableService:
    """One running executable speaking the length-prefixed protocol (module docstring)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._proc: subprocess.Popen[bytes] | None = None
        self.answered = 0  # replies read (results and failure replies), all starts
        self._start()  # at load time, so a missing program fails the load, not a task

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._proc = proc
        return proc

    def _read(self, proc: subprocess.Popen[bytes], n: int) -> bytes:
        assert proc.stdout is not None  # PIPE in _start
        data = proc.stdout.read(n)
        if len(data) < n:
            status = proc.wait()
            self._proc = None
            when = "while running a task" if self.answered else "before answering any task"
            raise ServiceExited(
                f"the service program {self.argv[0]} exited with status {status} {when}"
            )
        return data

    def _read_length(self, proc: subprocess.Popen[bytes], mark_ok: bool) -> int:
        header = self._read(proc, 4)
        (size,) = LENGTH.unpack(header)
        if size > MAX_REPLY_BYTES and not (mark_ok and size == FAILURE_MARK):
            raise ServiceProtocolError(
                f"the service program {self.argv[0]} wrote non-protocol output to stdout "
                f"(it began {header!r}, read as a reply of {size} bytes, over the "
                f"{MAX_REPLY_BYTES} a reply may have); it must write only length-prefixed "
                "replies there (write logs to stderr); it was stopped, and starts again for "
                "the next task"
            )
        return int(size)

    def call(self, *args: Any) -> bytes:
        if len(args) != 1 or not isinstance(args[0], (bytes, bytearray, memoryview, str)):
            got = ", ".join(type(a).__name__ for a in args) or "none"
            raise TypeError(
                "an executable service's task takes exactly one argument, bytes or str "
                f"(got {got}); encode anything richer yourself"
            )
        arg = args[0]
        data = arg.encode() if isinstance(arg, str) else bytes(arg)
        proc = self._proc or self._start()
        assert proc.stdin is not None  # PIPE in _start
        done = False
        try:
            try:
                proc.stdin.write(LENGTH.pack(len(data)) + data)
                proc.stdin.flush()
            except BrokenPipeError:
                self._read(proc, 4)  # reports the exit status as ServiceExited
            size = self._read_length(proc, mark_ok=True)
            if size == FAILURE_MARK:
                size = self._read_length(proc, mark_ok=False)
                message = self._read(proc, size).decode(errors="replace")
                done = True
                self.answered += 1
                raise ServiceError(message)
            reply = self._read(proc, size)
            done = True
            self.answered += 1
            return reply
        finally:
            if not done and self._proc is proc:
                # Interrupted mid-exchange (a timeout): the program may still answer this
                # task, and that answer must not be read as the next task's.
                self._kill(proc)

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = None
        proc.kill()
        proc.wait()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None  # PIPE in _start
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
