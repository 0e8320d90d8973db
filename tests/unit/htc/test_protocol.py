"""The frame codec: whole messages come out whatever way the bytes were split."""

from __future__ import annotations

import io
from typing import Any

import pytest

from hal.htc import protocol as p


def test_frames_split_at_every_byte_decode_to_the_same_messages() -> None:
    messages: list[list[Any]] = [
        [p.SUBMIT, [1, b"a", 2, b"bc"]],
        [p.ACK, 7],
        [p.RESULTS, 2, [1, p.OK, b"x"]],
    ]
    data = b"".join(p.frame(m) for m in messages)
    decoder = p.FrameDecoder()
    out = []
    for i in range(len(data)):
        out += decoder.feed(data[i : i + 1])
    assert out == messages


def test_many_frames_in_one_read() -> None:
    data = b"".join(p.frame([p.ACK, i]) for i in range(1000))
    assert [m[1] for m in p.FrameDecoder().feed(data)] == list(range(1000))


def test_oversized_frame_is_refused_before_buffering_it() -> None:
    with pytest.raises(p.ProtocolError):
        p.FrameDecoder().feed(p.HEADER.pack(p.MAX_FRAME_BYTES + 1))


def test_a_frame_must_be_an_array_with_a_kind() -> None:
    body = p.pack({"not": "an array"})
    with pytest.raises(p.ProtocolError):
        p.FrameDecoder().feed(p.HEADER.pack(len(body)) + body)


def test_read_frame_from_a_stream_and_eof() -> None:
    stream = io.BytesIO(p.frame([p.STOP]) + p.frame([p.TASKS, [1, b"x"]]))
    assert p.read_frame(stream) == [p.STOP]
    assert p.read_frame(stream) == [p.TASKS, [1, b"x"]]
    assert p.read_frame(stream) is None


def test_bytes_stay_bytes_and_text_stays_text() -> None:
    assert p.unpack(p.pack([b"\x00\xff", "é"])) == [b"\x00\xff", "é"]
