"""The control plane's side of the job-output relay (ADR 0007), with an in-process agent
loop that answers reads with the agent's real reader: whole files in 1 MiB round trips,
a follow that ends with the job, and errors that say what to do."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from hal.core.clock import VirtualClock
from hal.core.errors import NotFound, PermissionDenied, Unavailable
from hal.observe.outputfiles import read_chunk
from hal.server.observe.outputrelay import OutputRelay, OutputTarget, relayed_output
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.testing.builders import make_job, make_node
from hal.wire.output import MAX_READ_BYTES, OutputChunk, OutputPoll


@pytest.fixture
def relay(cluster: Cluster) -> OutputRelay:
    cluster.nodes = {"n1": make_node("n1").build()}
    cluster.agent_sessions["n1"] = AgentSession("n1")
    return OutputRelay(cluster, timeout_s=5.0)


def target(path: Path) -> OutputTarget:
    job = make_job(7).running_on("n1", start=0.0).build()
    return OutputTarget(job, "n1", str(path), os.geteuid())


@contextlib.asynccontextmanager
async def agent(relay: OutputRelay) -> AsyncIterator[list[int]]:
    """The agent's output loop (``AgentShell._output_loop``) without HTTP; yields the
    number of reads answered per poll."""
    answered: list[int] = []

    async def loop() -> None:
        answers: list[OutputChunk] = []
        while True:
            reply = await relay.poll("n1", OutputPoll(chunks=answers, wait_seconds=5))
            answers = [read_chunk(r) for r in reply.reads]
            answered.append(len(answers))

    task = asyncio.create_task(loop())
    try:
        yield answered
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def collect(body: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in body])


def test_a_file_bigger_than_a_read_arrives_whole_in_order(
    relay: OutputRelay, tmp_path: Path
) -> None:
    out = tmp_path / "slurm-7.out"
    payload = os.urandom(2 * MAX_READ_BYTES + 12345)
    out.write_bytes(payload)

    async def scenario() -> None:
        async with agent(relay) as answered:
            assert await collect(await relayed_output(relay, target(out))) == payload
            assert sum(answered) == 3  # 1 MiB per round trip
            tail = await collect(await relayed_output(relay, target(out), tail_bytes=10))
            assert tail == payload[-10:]
            middle = await collect(
                await relayed_output(relay, target(out), offset=len(payload) - 5)
            )
            assert middle == payload[-5:]

    asyncio.run(scenario())


def test_follow_streams_what_the_job_writes_until_it_has_ended(
    relay: OutputRelay, tmp_path: Path
) -> None:
    """``hal logs -f`` of a running job on a node the server cannot see: lines arrive as
    they are written, and the stream ends after the job did, with its last line."""
    out = tmp_path / "slurm-7.out"
    ended = False

    async def scenario() -> None:
        async with agent(relay):
            # the job has not created its file yet: a follow waits for it
            body = await relayed_output(relay, target(out), follow=True, finished=lambda: ended)
            received: list[bytes] = []

            async def reader() -> None:
                async for chunk in body:
                    received.append(chunk)

            task = asyncio.create_task(reader())
            out.write_bytes(b"line 1\n")
            await until(lambda: b"".join(received) == b"line 1\n")
            assert not task.done()
            with out.open("ab") as f:
                f.write(b"line 2\n")
            await until(lambda: b"".join(received) == b"line 1\nline 2\n")
            with out.open("ab") as f:
                f.write(b"last\n")
            nonlocal ended
            ended = True
            await asyncio.wait_for(task, 30)
            assert b"".join(received) == b"line 1\nline 2\nlast\n"

    asyncio.run(scenario())


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.01)


def test_what_the_agent_refuses_maps_to_the_users_errors(
    relay: OutputRelay, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("x")
    link = tmp_path / "slurm-7.out"
    link.symlink_to(secret)

    async def scenario() -> None:
        async with agent(relay):
            with pytest.raises(NotFound, match="does not exist on node n1"):
                await relayed_output(relay, target(tmp_path / "none.out"))
            with pytest.raises(PermissionDenied, match="symbolic link"):
                await relayed_output(relay, target(link))

    asyncio.run(scenario())


def test_a_node_without_a_connected_agent_says_to_start_it(
    relay: OutputRelay, cluster: Cluster, tmp_path: Path
) -> None:
    del cluster.agent_sessions["n1"]

    async def scenario() -> None:
        with pytest.raises(Unavailable, match=r"agent is not connected: start the agent"):
            await relay.read(target(tmp_path / "slurm-7.out"))

    asyncio.run(scenario())


def test_an_agent_that_never_polls_is_named_and_its_read_is_dropped(
    cluster: Cluster, clock: VirtualClock, tmp_path: Path
) -> None:
    """An agent older than the relay keeps syncing but never asks for reads: the reader
    gives up after the timeout, and the read is not handed to a later poll."""
    cluster.nodes = {"n1": make_node("n1").build()}
    cluster.agent_sessions["n1"] = AgentSession("n1")
    relay = OutputRelay(cluster, timeout_s=0.1)

    async def scenario() -> None:
        with pytest.raises(Unavailable, match=r"does not relay job output.*upgrade it"):
            await relay.read(target(tmp_path / "slurm-7.out"))
        reply = await relay.poll("n1", OutputPoll(wait_seconds=0))
        assert reply.reads == []
        # an answer to a read nobody waits for any more is dropped, not an error
        late = OutputChunk(request_id="1", data_b64="aGk=")
        assert (await relay.poll("n1", OutputPoll(chunks=[late], wait_seconds=0))).reads == []
        with pytest.raises(Unavailable, match=r"did not answer within 0\.1 s; try again"):
            await relay.read(target(tmp_path / "slurm-7.out"))

    asyncio.run(scenario())
