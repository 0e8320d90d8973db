"""Loading a service in a worker: a Python callable or an executable.

A *service* is what a session's tasks call. Two kinds:

- ``python``: ``"package.module:function"``, imported once per worker; each task calls
  ``function(*args)`` and its return value is the result;
- ``exec``: an executable started once per worker that reads tasks from stdin and writes
  results to stdout, each as a 4-byte little-endian length followed by that many bytes.
  A task's single argument (``bytes`` or ``str``) is sent as is; the reply comes back as
  ``bytes``. A reply of length 0xFFFFFFFF followed by a length-prefixed UTF-8 message
  means the task failed with that message.

The session's common data is read inside a task with ``hal.htc.common()``.
"""

from __future__ import annotations

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
        return _start_executable([str(a) for a in spec["argv"]])
    raise ValueError(f"unknown service kind {kind!r}")


def _start_executable(argv: list[str]) -> tuple[Callable[..., Any], Callable[[], None]]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None  # both are PIPE above

    def read(n: int) -> bytes:
        data = stdout.read(n)
        if len(data) < n:
            raise ServiceError(f"service {argv[0]} exited (status {proc.poll()})")
        return data

    def call(arg: bytes | str = b"") -> bytes:
        data = arg.encode() if isinstance(arg, str) else bytes(arg)
        stdin.write(LENGTH.pack(len(data)) + data)
        stdin.flush()
        (size,) = LENGTH.unpack(read(4))
        if size == FAILURE_MARK:
            (size,) = LENGTH.unpack(read(4))
            raise ServiceError(read(size).decode(errors="replace"))
        return read(size)

    def close() -> None:
        stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    return call, close
