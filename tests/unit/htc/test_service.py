"""Executable services: the length-prefixed stdin/stdout protocol against a real program
(``hal/htc/exec_example.py``, stdlib only), and what keeps request and
reply in lock-step when a task times out or the program dies."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from hal.htc import service
from hal.htc.examples import EXECUTABLE

PROGRAM = {"kind": "exec", "argv": EXECUTABLE}


class Interrupted(Exception):
    pass


@pytest.fixture
def program() -> Iterator[tuple[Any, Any]]:
    call, close = service.load(PROGRAM)
    yield call, close
    close()


def test_requests_and_replies_follow_the_documented_frames(program: tuple[Any, Any]) -> None:
    call, _ = program
    assert call(b"abc") == b"ABC"
    assert call("text is sent as UTF-8") == b"TEXT IS SENT AS UTF-8"
    assert call(b"") == b""
    with pytest.raises(service.ServiceError, match=r"^no such trade$"):
        call(b"fail:no such trade")
    assert call(b"still in step") == b"STILL IN STEP"


def test_a_task_interrupted_mid_reply_does_not_hand_its_reply_to_the_next(
    program: tuple[Any, Any],
) -> None:
    """The worker's task timeout (SIGALRM) strikes while the program still works on a
    task. Its late reply must not become the next task's: the program is restarted."""
    call, _ = program

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Interrupted):
            call(b"sleep:400")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert call(b"next") == b"NEXT"


def test_a_program_that_dies_under_a_task_raises_service_exited(
    program: tuple[Any, Any],
) -> None:
    call, _ = program
    with pytest.raises(service.ServiceExited, match="exited with status 7"):
        call(b"crash")


def test_a_program_that_cannot_start_fails_the_load() -> None:
    with pytest.raises(FileNotFoundError):
        service.load({"kind": "exec", "argv": ["/no/such/program"]})


# A program that prints a line to stdout (a debug line, say) on the request "noise",
# instead of a length-prefixed reply, and echoes any other request.
NOISY = r"""
import struct, sys
stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
while header := stdin.read(4):
    request = stdin.read(struct.unpack("<I", header)[0])
    if request == b"noise":
        stdout.write(b"starting the pricer, version 2\n")
    else:
        stdout.write(struct.pack("<I", len(request)) + request)
    stdout.flush()
"""


def test_output_that_is_not_the_protocol_fails_the_task_at_once() -> None:
    """Text on stdout was read as the length of a reply (b"star": 1.9 GB), and the task
    waited for it for ever (or until its timeout, with no word of why). It fails at
    once, saying what the program did; the program is started again for the next task."""
    call, close = service.load({"kind": "exec", "argv": [sys.executable, "-c", NOISY]})
    try:
        assert call(b"before") == b"before"
        with pytest.raises(service.ServiceProtocolError) as err:
            call(b"noise")
        assert "wrote non-protocol output to stdout (it began b'star'" in str(err.value)
        assert "write logs to stderr" in str(err.value)
        assert call(b"after") == b"after"
    finally:
        close()


@pytest.mark.parametrize("args", [(5,), ([104, 105],), ({"a": 1},), (b"a", b"b"), ()])
def test_a_task_argument_that_is_not_bytes_or_str_is_refused(
    program: tuple[Any, Any], args: tuple[Any, ...]
) -> None:
    """``bytes(5)`` made five zero bytes of an int; a list of ints became bytes; two
    arguments named the internal ``ExecutableService.call``."""
    call, _ = program
    with pytest.raises(TypeError, match="takes exactly one argument, bytes or str"):
        call(*args)
    assert call(bytearray(b"ok")) == b"OK"
