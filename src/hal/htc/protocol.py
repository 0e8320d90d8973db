"""The broker's binary protocol: length-prefixed msgpack frames over TCP.

Every frame is a 4-byte little-endian body length followed by one msgpack array whose
first item is the message kind. Arrays rather than maps because the hot messages carry
thousands of tasks and field names would double their size. Task lists are *flat*
(``[id, payload, id, payload, ...]``) so decoding allocates no per-task container.

A task payload is opaque bytes to the broker (the client packed the arguments, the worker
unpacks them), so the broker never decodes user data. No pickle anywhere on the wire:
arguments and results are msgpack values (numbers, strings, bytes, lists, dicts).

    client -> broker   HELLO_CLIENT [sid, secret]     SUBMIT [flat id,payload]
                       COMMON [bytes]   ACK [seq]      CLOSE []   DETACH []
                       CANCEL [ids]  (withdraw tasks no worker holds yet)
                       CANCEL_SESSION [reason]  (end it CANCELLED: the client gives up)
    broker -> client   WELCOME [info]   RESULTS [seq, flat id,status,payload]
                       ENDED [state, reason]   DETACHED []   ERROR [message]
                       CANCEL [ids]  (the answer: those withdrawn; they never run)
    worker -> broker   HELLO_WORKER [sid, secret, job_id, host, pid, {keeper, died}]
                       (keeper: its job restarts its process when it dies; died: how
                       the job's previous process ended, "" for the first)
                       RESULTS [0, flat id,status,payload]   LOAD_ERROR [message]
                       SERVICE_EXITED [message]  (its executable died under a task;
                                                  the worker exits next)
    broker -> worker   INIT [service, common, timeout_s, workdir]   TASKS [flat id,payload]
                       STOP []
    api    -> broker   CONTROL [key, op, args]   broker -> api   REPLY [ok, data]

The protocol has no heartbeat: a peer whose host vanishes (no FIN, no RST) is found by
TCP keepalive, which all three parties turn on (``keep_alive``).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any, BinaryIO

import msgpack  # type: ignore[import-untyped]  # ships no stubs

# The worker's session secret reaches it in its job's environment, never on its command
# line: every user of the node reads command lines (ps), a process's environment only its
# own user and root.
WORKER_KEY_ENV = "HAL_HTC_WORKER_KEY"
HEADER = struct.Struct("<I")
MAX_FRAME_BYTES = 256 * 1024 * 1024  # a bigger frame is a bug or an attack, not a batch
MAX_ITEM_BYTES = MAX_FRAME_BYTES - 1024  # one task's packed arguments or result, with its id
FRAME_BUDGET = 64 * 1024 * 1024  # senders start a new frame past this many payload bytes

# TCP keepalive: an idle connection is probed after KEEPALIVE_IDLE_S, then every
# KEEPALIVE_INTERVAL_S; KEEPALIVE_PROBES unanswered probes end it, so a peer whose host
# vanished is found in about a minute (the system default, two hours, left a client's
# ``future.result()`` and a worker's read waiting for it that long or, with keepalive
# off, for ever). Probes are answered by the peer's kernel, so a busy peer is not dead.
KEEPALIVE_IDLE_S = 30
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_PROBES = 3


def frame_slices(sizes: Sequence[int], most: int) -> list[tuple[int, int]]:
    """``(start, end)`` runs of at most ``most`` items and about ``FRAME_BUDGET`` bytes
    (one item at least each), so no frame grows past what the other side reads. Without
    a loop in Python when the items' bytes fit in one budget (the usual case)."""
    n = len(sizes)
    if sum(sizes) <= FRAME_BUDGET:
        return [(i, min(i + most, n)) for i in range(0, n, most)]
    runs: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, item in enumerate(sizes):
        if i > start and (i - start >= most or size + item > FRAME_BUDGET):
            runs.append((start, i))
            start, size = i, 0
        size += item
    runs.append((start, n))
    return runs


# Message kinds (first item of every frame).
HELLO_CLIENT = 1
HELLO_WORKER = 2
WELCOME = 3
SUBMIT = 4
RESULTS = 5
ACK = 6
TASKS = 7
INIT = 8
STOP = 9
COMMON = 10
ENDED = 11
LOAD_ERROR = 12
CONTROL = 13
REPLY = 14
CLOSE = 15
DETACH = 16
DETACHED = 17
ERROR = 18
CANCEL = 19
CANCEL_SESSION = 20
SERVICE_EXITED = 21

# Task outcomes (the status item of a result).
OK = 0  # payload: the packed return value
FAILED = 1  # payload: the packed error text (the service raised)
TIMED_OUT = 2  # payload: the packed error text
POISON = 3  # payload: the packed error text (the task kept killing workers)
CANCELLED = 4

STATUS_NAMES = {OK: "ok", FAILED: "failed", TIMED_OUT: "timed_out", POISON: "poison"}


def keep_alive(sock: Any, *, bound_unacked: bool = True) -> None:
    """Turn on TCP keepalive with the timings above, those the platform has (Linux has
    all three; macOS names the idle time ``TCP_KEEPALIVE``). Read at call time, so a
    test may shorten them.

    Keepalive probes only an idle connection. With ``bound_unacked`` (Linux's
    ``TCP_USER_TIMEOUT``), data left unacknowledged for as long also ends it: a host that
    vanished while a frame (a SUBMIT, an ACK, results) was in flight is otherwise retried
    for about 15 minutes (``tcp_retries2``). Only the side talking to the broker sets it,
    as the broker reads all it is sent at once; some kernels also end a connection whose
    peer keeps its receive window shut that long, which a worker running a long task
    does to the broker."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle = getattr(socket, "TCP_KEEPIDLE", getattr(socket, "TCP_KEEPALIVE", None))
    options = [
        (idle, KEEPALIVE_IDLE_S),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_S),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
    ]
    if bound_unacked:
        limit_ms = (KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_PROBES) * 1000
        options.append((getattr(socket, "TCP_USER_TIMEOUT", None), limit_ms))
    for option, value in options:
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def frame(message: list[Any]) -> bytes:
    body = pack(message)
    return HEADER.pack(len(body)) + body


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, get whole messages back."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[list[Any]]:
        buf = self._buffer
        buf += data
        messages: list[list[Any]] = []
        start = 0
        end = len(buf)
        while end - start >= 4:
            (size,) = HEADER.unpack_from(buf, start)
            if size > MAX_FRAME_BYTES:
                raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
            if end - start - 4 < size:
                break
            message = unpack(bytes(buf[start + 4 : start + 4 + size]))
            if not isinstance(message, list) or not message or not isinstance(message[0], int):
                raise ProtocolError("a frame must hold a non-empty array starting with a kind")
            messages.append(message)
            start += 4 + size
        if start:
            del buf[:start]
        return messages


def read_frame(stream: BinaryIO) -> list[Any] | None:
    """Blocking read of one message from a buffered stream (``sock.makefile("rb")``, the
    worker's side). None at end of stream."""
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    body = stream.read(size)
    if len(body) < size:
        return None
    message = unpack(body)
    if not isinstance(message, list) or not message:
        raise ProtocolError("a frame must hold a non-empty array")
    return message
