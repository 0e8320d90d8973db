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

  Two situations break the request/reply lock-step, and each is handled so that the next
  task cannot read a stale reply:

  - the program exits (or closes stdout) while a task runs: ``ServiceExited``. The worker
    exits too, so the broker sees a worker death and re-runs the worker's tasks elsewhere;
    a task that keeps killing the program is failed as poison like one that kills a
    Python worker (``tasks.py``);
  - a task is interrupted mid-exchange (its timeout): the program may still answer it
    later, so it is killed and started again before the next task.

The session's common data is read inside a task with ``hal.htc.common()``.
"""

from __future__ import annotations

import contextlib
import importlib
import struct
import subprocess
from collections.abc import Callable
from typing import Any

LENGTH = struct.Struct("<I")
FAILURE_MARK = 0xFFFFFFFF

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
            raise ServiceExited(
                f"the service program {self.argv[0]} exited with status {status} "
                "while running a task"
            )
        return data

    def call(self, arg: bytes | str = b"") -> bytes:
        proc = self._proc or self._start()
        assert proc.stdin is not None  # PIPE in _start
        data = arg.encode() if isinstance(arg, str) else bytes(arg)
        done = False
        try:
            try:
                proc.stdin.write(LENGTH.pack(len(data)) + data)
                proc.stdin.flush()
            except BrokenPipeError:
                self._read(proc, 4)  # reports the exit status as ServiceExited
            (size,) = LENGTH.unpack(self._read(proc, 4))
            if size == FAILURE_MARK:
                (size,) = LENGTH.unpack(self._read(proc, 4))
                message = self._read(proc, size).decode(errors="replace")
                done = True
                raise ServiceError(message)
            reply = self._read(proc, size)
            done = True
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
