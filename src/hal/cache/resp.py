"""RESP2/RESP3 encoding for the cache node, and request parsing.

Requests are parsed by hiredis's C reader (the same parser redis-py uses), which is what lets
a Python node keep up with a pipelining client. Inline commands (``PING\\r\\n`` typed into a
socket) are split by hand, as Redis does, until the connection sends its first RESP array:
hiredis cannot tell us whether it sits between two commands, and real clients never mix.
Replies are built here; a connection that sent ``HELLO 3`` gets RESP3 (``_`` for nil, ``%``
maps), everyone else RESP2.
"""

from __future__ import annotations

from collections.abc import Iterable

import hiredis

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NIL2 = b"$-1\r\n"
NIL3 = b"_\r\n"
EMPTY_ARRAY = b"*0\r\n"


class ProtocolError(Exception):
    """The client sent bytes that are not RESP; Redis closes such connections."""


def error(message: str) -> bytes:
    # Redis error replies are one line: keep client text from breaking the framing
    return b"-" + message.replace("\r", " ").replace("\n", " ").encode() + b"\r\n"


def integer(n: int) -> bytes:
    return b":%d\r\n" % n


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def simple(text: str) -> bytes:
    return b"+" + text.encode() + b"\r\n"


def nil(resp3: bool) -> bytes:
    return NIL3 if resp3 else NIL2


def array(items: Iterable[bytes]) -> bytes:
    """``items`` are already-encoded replies."""
    parts = list(items)
    return b"*%d\r\n" % len(parts) + b"".join(parts)


def mapping(pairs: list[tuple[bytes, bytes]], resp3: bool) -> bytes:
    """A map of encoded keys and values: ``%`` in RESP3, a flat array in RESP2."""
    head = b"%%%d\r\n" % len(pairs) if resp3 else b"*%d\r\n" % (2 * len(pairs))
    return head + b"".join(k + v for k, v in pairs)


class RequestParser:
    """Feed bytes, take complete commands (lists of bytes arguments)."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader()
        self._inline = b""
        self._in_resp = False

    def feed(self, data: bytes) -> list[list[bytes]]:
        out: list[list[bytes]] = []
        if self._inline or (not self._in_resp and data[:1] != b"*"):
            data = self._take_inline(self._inline + data, out)
            if not data:
                return out
        reader = self._reader
        reader.feed(data)
        self._in_resp = True
        gets, append = reader.gets, out.append
        try:
            # plain loops and exact type tests: this runs once per pipelined command, and
            # all() over a generator cost about as much as hiredis's own parsing
            while (cmd := gets()) is not False:
                if type(cmd) is not list:
                    raise ProtocolError("expected an array of bulk strings")
                for arg in cmd:
                    if type(arg) is not bytes:
                        raise ProtocolError("expected an array of bulk strings")
                if cmd:
                    append(cmd)
        except hiredis.ProtocolError as err:
            raise ProtocolError(str(err)) from err
        return out

    def _take_inline(self, data: bytes, out: list[list[bytes]]) -> bytes:
        while data and data[:1] != b"*":
            line, sep, rest = data.partition(b"\n")
            if not sep:
                if len(data) > 64 * 1024:
                    raise ProtocolError("too big inline request")
                self._inline = data
                return b""
            args = line.rstrip(b"\r").split()
            if args:
                out.append(args)
            data = rest
        self._inline = b""
        return data
