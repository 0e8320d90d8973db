"""A job's stdout/stderr, read where the control plane can see it.

The fast path is the **shared filesystem**: the server expands the job's output pattern
exactly as the agent does (``hal.slurm.filenames``, with the batch host's node name) and
reads the file. That works on ``hal up`` and on clusters whose job directories are on a
shared filesystem mounted at the same path on the server. When the file is not there
(``open_output`` raises ``Unavailable``), the output route asks the job's agent for the
bytes instead (``hal.server.observe.outputrelay``, ADR 0007).

Safety: the output pattern is user-controlled (``--output=/etc/shadow``), and the server
may run as a more privileged user than the job. A file is served only if it is a regular
file (not a symlink) owned by the job's Unix user — or, for a user unknown on this host,
whose jobs run as the agent's own user, by the server's user.
"""

from __future__ import annotations

import asyncio
import os
import pwd
from collections.abc import AsyncIterator, Callable

from hal.core.errors import InvalidRequest, NotFound, PermissionDenied, Unavailable
from hal.core.job import Job
from hal.observe.outputfiles import NotServed, open_owned
from hal.slurm.filenames import FilenameFields, output_paths

CHUNK = 64 * 1024
POLL_S = 0.25


def output_path(job: Job, stream: str) -> str:
    """Absolute path of ``stream`` (``stdout``/``stderr``) of the job's current attempt."""
    if stream not in ("stdout", "stderr"):
        raise InvalidRequest("stream must be stdout or stderr", field="stream")
    if job.allocation is None or not job.allocation.nodes:
        raise NotFound(f"job {job.display_id} has not started, so it has no output yet")
    spec = job.spec
    fields = FilenameFields(
        job_id=job.id,
        name=spec.name,
        user=spec.user,
        node=job.allocation.nodes[0],
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
    )
    out, err = output_paths(
        spec.stdout or "",
        spec.stderr,
        spec.workdir,
        fields,
        array=job.array_job_id is not None,
    )
    return err if stream == "stderr" and err is not None else out


def _expected_owner(user: str) -> int:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return os.getuid()


def open_output(job: Job, stream: str) -> int:
    """An fd on the output file, after the safety checks above."""
    path = output_path(job, stream)
    try:
        fd, _info = open_owned(path, _expected_owner(job.spec.user))
    except FileNotFoundError as err:
        raise Unavailable(
            f"the output of job {job.display_id} ({path}) is not on the control plane's "
            "filesystem; read it on the node, or share the job directory with the server"
        ) from err
    except NotServed as err:
        if err.symlink:
            raise PermissionDenied(f"{path} is a symbolic link; it is not served") from err
        raise PermissionDenied(f"{path} is not a regular file owned by {job.spec.user}") from err
    except OSError as err:
        raise Unavailable(f"cannot open {path}: {err.strerror}") from err
    return fd


async def read_output(
    fd: int,
    *,
    offset: int = 0,
    tail_bytes: int | None = None,
    follow: bool = False,
    finished: Callable[[], bool] = lambda: True,
) -> AsyncIterator[bytes]:
    """Bytes from ``offset`` (or the last ``tail_bytes``); with ``follow``, keep reading as
    the file grows until the job has finished and the file stops growing."""
    try:
        size = os.fstat(fd).st_size
        pos = max(0, size - tail_bytes) if tail_bytes is not None else offset
        while True:
            chunk = os.pread(fd, CHUNK, pos)
            if chunk:
                pos += len(chunk)
                yield chunk
                continue
            if not follow:
                return
            done = finished()  # read once more after the end, so the last lines arrive
            await asyncio.sleep(POLL_S)
            if done and not os.pread(fd, 1, pos):
                return
    finally:
        os.close(fd)
