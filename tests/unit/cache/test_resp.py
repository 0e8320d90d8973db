"""Request parsing and reply encoding of the Redis protocol."""

from __future__ import annotations

import pytest

from hal.cache import resp
from hal.cache.commands import parse_memory


def test_pipelined_commands_split_across_reads_are_reassembled() -> None:
    parser = resp.RequestParser()
    data = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$2\r\nxy\r\n"
    out = []
    for i in range(0, len(data), 5):
        out += parser.feed(data[i : i + 5])
    assert out == [[b"GET", b"a"], [b"SET", b"b", b"xy"]]


def test_inline_commands_work_like_in_redis() -> None:
    parser = resp.RequestParser()
    assert parser.feed(b"PING\r\nGET a") == [[b"PING"]]
    assert parser.feed(b"\r\n*1\r\n$4\r\nPING\r\n") == [[b"GET", b"a"], [b"PING"]]
    assert parser.feed(b"*1\r\n$4\r\nPING\r\n") == [[b"PING"]]


def test_garbage_is_a_protocol_error() -> None:
    parser = resp.RequestParser()
    with pytest.raises(resp.ProtocolError):
        parser.feed(b"*1\r\n:5\r\n")


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"$3\r\nGET\r\n",  # a bare bulk string
        b"*2\r\n$3\r\nGET\r\n*1\r\n$1\r\na\r\n",  # a nested array
        b"*2\r\n$3\r\nGET\r\n$-1\r\n",  # a nil argument
    ],
)
def test_requests_must_be_arrays_of_bulk_strings(request_bytes: bytes) -> None:
    parser = resp.RequestParser()
    assert parser.feed(b"*1\r\n$4\r\nPING\r\n") == [[b"PING"]]
    with pytest.raises(resp.ProtocolError, match="array of bulk strings"):
        parser.feed(request_bytes)


def test_nil_and_maps_differ_between_resp2_and_resp3() -> None:
    assert resp.nil(False) == b"$-1\r\n" and resp.nil(True) == b"_\r\n"
    pair = [(resp.bulk(b"k"), resp.bulk(b"v"))]
    assert resp.mapping(pair, True) == b"%1\r\n$1\r\nk\r\n$1\r\nv\r\n"
    assert resp.mapping(pair, False) == b"*2\r\n$1\r\nk\r\n$1\r\nv\r\n"
    assert resp.error("ERR a\r\nb") == b"-ERR a  b\r\n"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("100", 100),
        ("1kb", 1024),
        ("1k", 1000),
        ("2MB", 2 * 1024**2),
        ("1gb", 1024**3),
        ("x", None),
        ("-1", None),
    ],
)
def test_memory_values_accept_redis_units(text: str, value: int | None) -> None:
    assert parse_memory(text) == value
