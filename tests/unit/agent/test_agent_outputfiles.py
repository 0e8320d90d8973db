"""The agent's side of the job-output relay (ADR 0007): byte ranges of a job's output file
for the control plane, the same safety checks as the server's own reads, and the HTTP
transport of the relay's long poll."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path

import httpx
import pytest

from hal.agent.channel import HttpAgentChannel, OutputChannel
from hal.observe.outputfiles import job_owner, read_chunk
from hal.wire.output import OutputChunk, OutputPoll, OutputRead


def read(path: Path | str, **kw: object) -> OutputChunk:
    return read_chunk(OutputRead(request_id="r1", job_id=7, path=str(path), **kw))  # type: ignore[arg-type]


def data(chunk: OutputChunk) -> bytes:
    return base64.b64decode(chunk.data_b64)


def test_a_range_from_an_offset_and_the_tail(tmp_path: Path) -> None:
    out = tmp_path / "slurm-7.out"
    out.write_bytes(b"0123456789")
    whole = read(out)
    assert (data(whole), whole.offset, whole.size, whole.error) == (b"0123456789", 0, 10, "")
    part = read(out, offset=4, max_bytes=3)
    assert (data(part), part.offset, part.size) == (b"456", 4, 10)
    tail = read(out, tail_bytes=4)
    assert (data(tail), tail.offset) == (b"6789", 6)
    past = read(out, offset=50)  # a follow ahead of a truncated file: nothing, no error
    assert (data(past), past.offset, past.error) == (b"", 50, "")


def test_a_missing_file_is_not_found_and_a_relative_path_fails(tmp_path: Path) -> None:
    missing = read(tmp_path / "none.out")
    assert missing.error == "not_found" and "none.out" in missing.message
    assert read("relative/slurm-7.out").error == "failed"


def test_symbolic_links_are_not_followed(tmp_path: Path) -> None:
    """``--output`` is the submitter's choice: a link to someone else's file is refused
    rather than served by an agent that may run as root."""
    secret = tmp_path / "secret"
    secret.write_text("x")
    link = tmp_path / "slurm-7.out"
    link.symlink_to(secret)
    refused = read(link)
    assert refused.error == "denied" and "symbolic link" in refused.message
    assert refused.data_b64 == ""


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "slurm-7.out"
    out.write_text("mine")
    me = os.geteuid()
    assert read(out, uid=me).error == ""
    if me != 0:
        # a non-root agent ran the job as itself, whatever the server's uid says
        assert job_owner(12345) == me and read(out, uid=12345).error == ""
        pytest.skip("changing a file's owner needs root")
    os.chown(out, 12345, 12345)
    assert job_owner(12345) == 12345
    assert read(out, uid=12345).error == ""  # a root agent ran the job as uid 12345
    refused = read(out, uid=None)  # the job ran as the agent's user (root)
    assert refused.error == "denied" and "uid 0" in refused.message


def test_directories_are_refused(tmp_path: Path) -> None:
    assert read(tmp_path).error in ("denied", "failed")


def test_the_http_channel_relays_output_polls() -> None:
    """``POST /v1/agent/{node}/output`` carries the answers up and the reads down; the
    read timeout allows for the server holding the poll."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, json={"reads": [{"request_id": "9", "job_id": 3, "path": "/w/slurm-3.out"}]}
        )

    async def scenario() -> None:
        ch = HttpAgentChannel("http://hal:8470", "s3cret", transport=httpx.MockTransport(handler))
        assert isinstance(ch, OutputChannel)
        answer = OutputChunk(request_id="8", offset=0, size=2, data_b64="aGk=")
        reply = await ch.output("n1", OutputPoll(chunks=[answer], wait_seconds=5))
        assert [(r.request_id, r.path, r.offset) for r in reply.reads] == [
            ("9", "/w/slurm-3.out", 0)
        ]
        await ch.aclose()

    asyncio.run(scenario())
    (request,) = seen
    assert request.url.path == "/v1/agent/n1/output"
    assert json.loads(request.content)["chunks"][0]["data_b64"] == "aGk="
    assert request.extensions["timeout"]["read"] >= 5 + 10
