"""srun's own stdin for a step's tasks on this node (ADR 0012, "srun's input").

The control plane sends the bytes srun read (``StepInput``, by offset); the agent
appends them to the step folder's ``input`` file and, at srun's EOF, writes ``input.end``
with the input's length. The keeper gives each task that reads it (``StepLaunch.
relay_ranks``) a pipe as its stdin, and a feeder of its own (a child of the keeper)
copies the file into each pipe, closing it once the task has had every byte up to
``input.end``::

    agent ── StepInput ──▶ <folder>/input, input.end
    keeper's feeder: input ──▶ pipe ──▶ task's stdin  (EOF after input.end's length)
                     how far each task got ──▶ <folder>/fed ──▶ agent ──▶ server

A file between them, not a pipe from the agent, because the tasks outlive their agent
(as their output files do): a new agent appends to the same file, and the feeder, the
keeper's, never sees the agent go. The server sends more only as the tasks take it
(``fed``): the file holds at most the server's buffer beyond the slowest task, and what
every task has read is punched out of it (its disk blocks freed).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import time
from typing import NoReturn

from hal.agent.supervisor import write_atomic

INPUT_FILE = "input"  # srun's input, as the agent got it
INPUT_END = "input.end"  # its length, once srun's input ended
FED_FILE = "fed"  # "rank offset" a line: how far each task got; -1: it takes no more
READ_BYTES = 1 << 16
FEED_MIN_SECONDS = 0.005  # between looks at the file, after input
FEED_MAX_SECONDS = 0.1  # ... once it has been quiet a while
PUNCH_BYTES = 1 << 20  # free the file's blocks every task has read, a MiB at a time
CLOSED = -1
_PUNCH_HOLE = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE


def write_input(folder: str, offset: int, data: bytes) -> int:
    """Bytes ``offset..`` of srun's input into the step's input file, past what it has
    (a repeat is skipped); its length after. A gap (bytes missing before ``offset``) is
    not written: the server sends from what the tasks were given, never past the file."""
    fd = os.open(os.path.join(folder, INPUT_FILE), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        have = os.fstat(fd).st_size
        if offset <= have < offset + len(data):
            view = memoryview(data)[have - offset :]
            while view:
                view = view[os.pwrite(fd, view, have) :]
                have = offset + len(data) - len(view)
        return have
    finally:
        os.close(fd)


def end_input(folder: str, length: int | None = None) -> None:
    """srun's input ends at ``length`` (None: where the file is: the rest was lost)."""
    if length is None:
        try:
            length = os.stat(os.path.join(folder, INPUT_FILE)).st_size
        except OSError:
            length = 0
    if not os.path.exists(os.path.join(folder, INPUT_END)):
        write_atomic(folder, INPUT_END, f"{length}\n")


def input_length(folder: str) -> int:
    try:
        return os.stat(os.path.join(folder, INPUT_FILE)).st_size
    except OSError:
        return 0


def read_end(folder: str) -> int | None:
    try:
        with open(os.path.join(folder, INPUT_END)) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def read_fed(folder: str) -> dict[int, int]:
    """rank → how many bytes of the input its task was given (``CLOSED``: it takes no
    more); {} before the feeder wrote any."""
    try:
        with open(os.path.join(folder, FED_FILE)) as f:
            text = f.read()
    except OSError:
        return {}
    fed = {}
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            rank, offset = line.split()
            fed[int(rank)] = int(offset)
    return fed


def feed(folder: str, pipes: dict[int, int]) -> NoReturn:
    """The feeder (a child of the keeper): copy the input file into each rank's pipe
    (``pipes``: rank → the write end, the task holds the read end) until that task had
    all of it, then close the pipe (its EOF); a task that ended or closed its stdin is
    given no more. Exits once every pipe is closed; the keeper kills it with the tasks'
    other leftovers where one never reads."""
    code = 0
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a gone reader is EPIPE, not death
        _feed(folder, pipes)
    except BaseException:
        code = 1
    os._exit(code)


def _feed(folder: str, pipes: dict[int, int]) -> None:
    fed = dict.fromkeys(pipes, 0)
    for fd in pipes.values():
        os.set_blocking(fd, False)
    source: int | None = None
    punched = 0
    said: dict[int, int] = {}
    interval = FEED_MIN_SECONDS
    while pipes:
        if source is None:
            with contextlib.suppress(OSError):
                source = os.open(os.path.join(folder, INPUT_FILE), os.O_RDWR | os.O_CLOEXEC)
        end = read_end(folder)
        size = os.fstat(source).st_size if source is not None else 0
        moved = False
        for rank, fd in list(pipes.items()):
            if end is not None and fed[rank] >= end:
                _close(pipes, fed, rank)
                continue
            if source is None or fed[rank] >= size:
                continue
            data = os.pread(source, min(READ_BYTES, size - fed[rank]), fed[rank])
            try:
                fed[rank] += os.write(fd, data)
                moved = True
            except BlockingIOError:
                pass
            except OSError:  # EPIPE: the task ended, or closed its stdin
                _close(pipes, fed, rank)
        if fed != said:
            write_atomic(folder, FED_FILE, "".join(f"{r} {o}\n" for r, o in sorted(fed.items())))
            said = dict(fed)
        low = min((o for o in fed.values() if o != CLOSED), default=size)
        if source is not None and low - punched >= PUNCH_BYTES:
            punched = _punch(source, low - low % PUNCH_BYTES) or punched
        if moved:
            interval = FEED_MIN_SECONDS
            continue
        waiting = [fd for rank, fd in pipes.items() if fed[rank] < size]
        if waiting:  # a full pipe: until its task reads (or ends)
            poller = select.poll()
            for fd in waiting:
                poller.register(fd, select.POLLOUT)
            poller.poll(FEED_MAX_SECONDS * 1000)
        else:
            time.sleep(interval)
            interval = min(interval * 2, FEED_MAX_SECONDS)


def _close(pipes: dict[int, int], fed: dict[int, int], rank: int) -> None:
    with contextlib.suppress(OSError):
        os.close(pipes.pop(rank))
    fed[rank] = CLOSED


def _punch(fd: int, upto: int) -> int:
    """Free the input file's blocks before ``upto`` (its size stays); ``upto``, or 0
    where the filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.fallocate(fd, _PUNCH_HOLE, ctypes.c_long(0), ctypes.c_long(upto)) == 0:
            return upto
    except (OSError, AttributeError):  # (no libc fallocate: the file keeps its blocks)
        pass
    return 0
