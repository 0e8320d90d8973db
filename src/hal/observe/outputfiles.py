"""The agent's side of the job-output relay: read part of a job's output file for the
control plane (``OutputRead`` → ``OutputChunk``, ADR 0007).

Blocking file I/O: the shell runs it in a worker thread, never on the event loop.

Which files: the server names the path (it expands the job's output pattern with the
rules the agent used), and the agent applies the same safety checks as the server's own
read of a shared file (``hal.server.observe.joboutput``): a regular file, opened without
following a symbolic link, owned by the user the job ran as. The server can already
make this agent run any script as that user, so serving that user's files to it gives
it nothing new; the checks keep ``--output=/etc/shadow`` from turning a root agent into
a file server.
"""

from __future__ import annotations

import base64
import errno
import os
import stat
from typing import Literal

from hal.wire.output import OutputChunk, OutputRead


def job_owner(uid: int | None) -> int:
    """The uid a job of Unix user ``uid`` ran as here: itself when this agent is root
    (``hal.agent.plan.resolve_user``), else this agent's own user."""
    me = os.geteuid()
    return uid if me == 0 and uid is not None else me


class NotServed(Exception):
    """The file exists but is not served (``symlink``: it is a symbolic link; otherwise it
    is not a regular file owned by the expected user)."""

    def __init__(self, symlink: bool) -> None:
        super().__init__("symbolic link" if symlink else "not a regular file of the owner")
        self.symlink = symlink


def open_owned(path: str, owner: int) -> tuple[int, os.stat_result]:
    """Open a job's output file to serve it: read-only, never through a symbolic link, and
    only a regular file owned by ``owner``. Returns the fd and its ``fstat``. Raises
    ``FileNotFoundError``, ``NotServed`` or another ``OSError``. The one place both the
    agent and the control plane (``hal.server.observe.joboutput``) check what they serve."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotServed(symlink=True) from err
        raise
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode) or info.st_uid != owner:
        os.close(fd)
        raise NotServed(symlink=False)
    return fd, info


def read_chunk(read: OutputRead) -> OutputChunk:
    def refuse(error: Literal["not_found", "denied", "failed"], message: str) -> OutputChunk:
        return OutputChunk(request_id=read.request_id, error=error, message=message)

    path = read.path
    if not os.path.isabs(path):
        return refuse("failed", f"{path} is not an absolute path")
    owner = job_owner(read.uid)
    try:
        fd, info = open_owned(path, owner)
    except FileNotFoundError:
        return refuse("not_found", f"{path} does not exist")
    except NotServed as err:
        if err.symlink:
            return refuse("denied", f"{path} is a symbolic link; it is not served")
        return refuse("denied", f"{path} is not a regular file owned by uid {owner}")
    except OSError as err:
        return refuse("failed", f"cannot open {path}: {err.strerror}")
    try:
        size = info.st_size
        start = max(0, size - read.tail_bytes) if read.tail_bytes is not None else read.offset
        data = os.pread(fd, read.max_bytes, start) if start < size else b""
    except OSError as err:
        return refuse("failed", f"cannot read {path}: {err.strerror}")
    finally:
        os.close(fd)
    return OutputChunk(
        request_id=read.request_id,
        offset=start,
        size=max(size, start + len(data)),  # the file may have grown since fstat
        data_b64=base64.b64encode(data).decode("ascii"),
    )
