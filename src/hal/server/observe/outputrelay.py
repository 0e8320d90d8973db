"""``OutputRelay``: a job's stdout/stderr read through the agent of the node that wrote it,
for control planes that do not share the job's filesystem (ADR 0007).

::

    GET /v1/jobs/{id}/output ─▶ relay.read(node, OutputRead) ─▶ mailbox[node] ─┐ wake
                                      ▲ future[request_id]                      ▼
    agent ── POST /v1/agent/{node}/output  OutputPoll{chunks} ──▶ relay.poll(): resolve
          ◀─────────────────────────────── OutputReads{reads} ◀── the futures, hand out reads

Each read is one round trip of at most 1 MiB; ``relayed_output`` strings them into the
response: until the end of the file, or with ``follow`` until the job has ended and a
read after its end brought nothing new (the same rule as the shared-filesystem path,
``hal.server.observe.joboutput``).

Failure handling: a read the agent does not answer within ``timeout_s`` fails with
``Unavailable`` naming the node and what to do. The first read happens before the
response starts, so its error becomes the HTTP status; later reads of a ``follow`` are
retried until the job ends (an agent restarting mid-stream costs a pause, not the
stream), and of a plain read abort the response (the client sees a short transfer,
never a silently truncated file).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from hal.core.errors import HalError, NotFound, PermissionDenied, Unavailable
from hal.core.job import Job
from hal.core.states import NodeState
from hal.state.cluster import Cluster
from hal.state.launch import unix_ids
from hal.wire.output import MAX_READ_BYTES, OutputChunk, OutputPoll, OutputRead, OutputReads

FOLLOW_POLL_S = 0.5  # between reads of a follow that reached the end of the file


@dataclass(slots=True)
class _Mailbox:
    """One node's reads waiting for its agent's next poll."""

    reads: list[OutputRead] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    polled_at: float = 0.0  # when the agent last polled (0: never since the server started)


@dataclass(frozen=True, slots=True)
class OutputTarget:
    """One output file of one job, on the node that holds it."""

    job: Job
    node: str
    path: str
    uid: int | None

    @classmethod
    def of(cls, job: Job, path: str) -> OutputTarget:
        """``path`` on the job's batch host (its first node), which launched it."""
        if job.allocation is None or not job.allocation.nodes:
            raise NotFound(f"job {job.display_id} has not started, so it has no output yet")
        ids = unix_ids(job.spec.user)
        return cls(job, job.allocation.nodes[0], path, ids[0] if ids else None)


class OutputRelay:
    def __init__(self, cluster: Cluster, *, timeout_s: float = 10.0) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._mailboxes: dict[str, _Mailbox] = {}
        self._waiting: dict[str, asyncio.Future[OutputChunk]] = {}
        self._ids = itertools.count(1)
        self._closing = False

    def close(self) -> None:
        """The server is stopping: held polls answer now (with no reads) instead of
        keeping the server's graceful shutdown waiting for them, and new ones at once."""
        self._closing = True
        for box in self._mailboxes.values():
            box.wake.set()

    # -- the agent's long poll ------------------------------------------------------------
    async def poll(self, node: str, poll: OutputPoll) -> OutputReads:
        """Take the agent's answers, then hold the request until a read is wanted or
        ``poll.wait_seconds`` have passed."""
        for chunk in poll.chunks:
            future = self._waiting.get(chunk.request_id)
            if future is not None and not future.done():
                future.set_result(chunk)
            # else: its reader gave up (timeout) or left; the answer is dropped
        box = self._mailboxes.setdefault(node, _Mailbox())
        box.polled_at = self.cluster.clock.now()
        if not box.reads and poll.wait_seconds > 0 and not self._closing:
            box.wake.clear()
            try:
                async with asyncio.timeout(poll.wait_seconds):
                    await box.wake.wait()
            except TimeoutError:
                pass
        reads, box.reads = box.reads, []
        box.polled_at = self.cluster.clock.now()
        return OutputReads(reads=reads)

    # -- the output route -------------------------------------------------------------------
    async def read(
        self, target: OutputTarget, *, offset: int = 0, tail_bytes: int | None = None
    ) -> OutputChunk:
        """One chunk from ``offset`` (or the last ``tail_bytes``), through the agent.
        Raises ``NotFound``/``PermissionDenied`` for what the agent refused and
        ``Unavailable`` when it cannot be asked or does not answer."""
        self._check_connected(target)
        request_id = f"{next(self._ids)}"
        read = OutputRead(
            request_id=request_id,
            job_id=target.job.id,
            path=target.path,
            uid=target.uid,
            offset=offset,
            tail_bytes=tail_bytes,
            max_bytes=MAX_READ_BYTES,
        )
        future: asyncio.Future[OutputChunk] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        box = self._mailboxes.setdefault(target.node, _Mailbox())
        box.reads.append(read)
        box.wake.set()
        try:
            async with asyncio.timeout(self.timeout_s):
                chunk = await future
        except TimeoutError as err:
            box.reads = [r for r in box.reads if r is not read]  # not handed out: drop it
            raise Unavailable(self._silent(target, box)) from err
        finally:
            self._waiting.pop(request_id, None)
        if chunk.error == "not_found":
            raise NotFound(
                f"the output of job {target.job.display_id} ({target.path}) does not exist on "
                f"node {target.node}: the job has not written it yet, or it was removed"
            )
        if chunk.error == "denied":
            raise PermissionDenied(f"node {target.node} refused to serve it: {chunk.message}")
        if chunk.error:
            raise Unavailable(f"node {target.node} could not read it: {chunk.message}")
        return chunk

    def _check_connected(self, target: OutputTarget) -> None:
        node = self.cluster.nodes.get(target.node)
        where = (
            f"the output of job {target.job.display_id} is on node {target.node} ({target.path})"
        )
        if node is None:
            raise Unavailable(f"{where}, which is no longer part of the cluster")
        if target.node not in self.cluster.agent_sessions:
            state = "DOWN" if node.state is NodeState.DOWN else "not connected"
            raise Unavailable(
                f"{where}, whose agent is {state}: start the agent there (`hal agent`) and "
                "try again, or read the file on the node"
            )

    def _silent(self, target: OutputTarget, box: _Mailbox) -> str:
        where = f"the agent of node {target.node} did not answer within {self.timeout_s:g} s"
        if box.polled_at == 0.0:
            return (
                f"{where}; it does not relay job output (an agent older than this server?): "
                f"upgrade it, or read {target.path} on {target.node}"
            )
        return f"{where}; try again, or read {target.path} on {target.node}"


def decode(chunk: OutputChunk | None) -> bytes:
    return base64.b64decode(chunk.data_b64) if chunk is not None and chunk.data_b64 else b""


async def relayed_output(
    relay: OutputRelay,
    target: OutputTarget,
    *,
    offset: int = 0,
    tail_bytes: int | None = None,
    follow: bool = False,
    finished: Callable[[], bool] = lambda: True,
) -> AsyncIterator[bytes]:
    """The file's bytes through the agent, as ``joboutput.read_output`` yields a local
    file's. The first read happens here, before the caller starts its response, so that
    its error is the response's status; a ``follow`` of a running job whose file does not
    exist yet waits for it instead."""
    first: OutputChunk | None
    try:
        first = await relay.read(target, offset=offset, tail_bytes=tail_bytes)
    except NotFound:
        if not follow or finished():
            raise
        first = None
    return _stream(relay, target, first, offset, follow, finished)


async def _stream(
    relay: OutputRelay,
    target: OutputTarget,
    chunk: OutputChunk | None,
    pos: int,
    follow: bool,
    finished: Callable[[], bool],
) -> AsyncIterator[bytes]:
    done = False
    while True:
        data = decode(chunk)
        if chunk is not None:
            pos = chunk.offset + len(data)
        if data:
            yield data
        if chunk is not None and pos < chunk.size:
            pass  # more is there now
        elif not follow or done:
            return
        else:
            await asyncio.sleep(FOLLOW_POLL_S)
        done = follow and finished()  # read once more after the end: the last lines arrive
        try:
            chunk = await relay.read(target, offset=pos)
        except HalError:
            if not follow:
                raise
            chunk = None  # the agent is away, or no file yet: ask again until the job ends
