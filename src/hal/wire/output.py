"""The job-output relay's wire schemas (ADR 0007): how the control plane reads a job's
stdout/stderr through the agent of the node that wrote it.

Agents start every exchange (ADR 0002), so the relay is a second long poll beside
``sync``, on its own endpoint so that the sync protocol and old agents are untouched::

    agent ── POST /v1/agent/{node}/output  OutputPoll{chunks: answers to earlier reads}
          ◀─ OutputReads{reads}             (held until a read is wanted or wait_seconds)

The server imports these models from here (as it imports ``hal.htc.rest``); nothing in
this module imports a server module.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hal.wire.base import WireModel

MAX_READ_BYTES = 1 << 20  # per read: a follow of a chatty job moves in 1 MiB steps
MAX_WAIT_SECONDS = 60.0


class OutputRead(WireModel):
    """Read part of a job's output file on this node (server → agent).

    ``path`` is what the agent opened for the job: the server expands the job's output
    pattern with the same rules (``hal.slurm.filenames``). The agent serves it only if it
    is a regular file, not a symbolic link, owned by the user the job ran as (``uid``
    when the agent runs as root, else the agent's own user) — the pattern is the
    submitter's choice (``--output=/etc/shadow``).
    """

    request_id: str = Field(min_length=1, max_length=64)
    job_id: int
    path: str = Field(min_length=1, max_length=4096)
    uid: int | None = None  # the job's Unix user on the server's host, as in Launch.uid
    offset: int = Field(default=0, ge=0)
    tail_bytes: int | None = Field(default=None, ge=0)  # set: start at size - tail_bytes
    max_bytes: int = Field(default=MAX_READ_BYTES, ge=1, le=MAX_READ_BYTES)


class OutputChunk(WireModel):
    """The answer to one ``OutputRead`` (agent → server). ``error`` set: nothing was read
    and ``message`` says why."""

    request_id: str
    offset: int = 0  # where the data starts in the file
    size: int = 0  # the file's size when it was read
    data_b64: str = ""
    error: Literal["", "not_found", "denied", "failed"] = ""
    message: str = ""


class OutputPoll(WireModel):
    """The agent's long poll: answers to the reads of the previous reply, and how long
    the server may hold the request waiting for new reads."""

    chunks: list[OutputChunk] = Field(default_factory=list)
    wait_seconds: float = Field(default=20.0, ge=0, le=MAX_WAIT_SECONDS)


class OutputReads(WireModel):
    reads: list[OutputRead] = Field(default_factory=list)
