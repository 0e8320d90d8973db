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

With ``srun --pty`` task 0's stdin is a pseudo-terminal instead of a pipe (the keeper
opens it, ``open_terminal``): the feeder types the input into its master, copies what
the terminal writes into task 0's stdout file, and follows srun's window size
(``WINSIZE_FILE``, written by the agent from ``StepInput.winsize``).

Neither waits for the other's next look: the agent writes a byte into the folder's
``input.wake`` FIFO after each write, which the feeder waits on, and the feeder into
``output.wake`` after copying the terminal's output, which the agent waits on (both made
by the agent with the folder, ``make_wakes``). Each side still looks now and then on its
own (a keeper or agent from before them, a wake-up lost while an agent restarts).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import select
import signal
import struct
import termios
from typing import NoReturn

from hal.agent.handshake import write_atomic

INPUT_FILE = "input"  # srun's input, as the agent got it
INPUT_END = "input.end"  # its length, once srun's input ended
FED_FILE = "fed"  # "rank offset" a line: how far each task got; -1: it takes no more
READ_BYTES = 1 << 16
FEED_MIN_SECONDS = 0.005  # between looks at the file, after input
FEED_MAX_SECONDS = 0.1  # ... once it has been quiet a while
PTY_POLL_SECONDS = 0.01  # at most, with a terminal (srun --pty: its keystrokes)
WINSIZE_FILE = "winsize"  # "rows columns": srun's terminal, resized (srun --pty)
INPUT_WAKE = "input.wake"  # FIFO: the agent wrote input or a size (the feeder waits on it)
OUTPUT_WAKE = "output.wake"  # FIFO: the feeder copied the terminal's output (the agent's)
WAKE_FLAGS = os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC  # the waiting side's: never an EOF
PUNCH_BYTES = 1 << 20  # free the file's blocks every task has read, a MiB at a time
CLOSED = -1
_PUNCH_HOLE = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE


def make_wakes(folder: str, terminal: bool) -> None:
    """The step folder's wake-up FIFOs: ``INPUT_WAKE``, and ``OUTPUT_WAKE`` with a
    terminal (root's, as the folder)."""
    for name in (INPUT_WAKE, OUTPUT_WAKE) if terminal else (INPUT_WAKE,):
        with contextlib.suppress(FileExistsError):
            os.mkfifo(os.path.join(folder, name), 0o600)


def open_wake(folder: str, name: str) -> int:
    """The waiting side of a wake-up FIFO (its POLLIN: woken), -1 where there is none."""
    try:
        return os.open(os.path.join(folder, name), WAKE_FLAGS)
    except OSError:
        return -1


def wake(folder: str, name: str, fd: int = -1) -> int:
    """Wake the side waiting on FIFO ``name``, through ``fd`` (-1: opened here); the
    descriptor to use next time (-1 where none waits: ENXIO, EPIPE)."""
    try:
        if fd < 0:
            fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.write(fd, b"!")
    except BlockingIOError:
        pass  # (full: the waiting side has wake-ups to read)
    except OSError:
        if fd >= 0:
            os.close(fd)
        return -1
    return fd


def drain(fd: int) -> None:
    """Read a wake-up FIFO's pending bytes."""
    with contextlib.suppress(OSError):
        while os.read(fd, 4096):
            pass


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


def feed(folder: str, pipes: dict[int, int], out: int = -1) -> NoReturn:
    """The feeder (a child of the keeper): copy the input file into each rank's pipe
    (``pipes``: rank → the write end, the task holds the read end) until that task had
    all of it, then close the pipe (its EOF); a task that ended or closed its stdin is
    given no more. With ``out`` (srun --pty), rank 0's "pipe" is the master of its
    pseudo-terminal: what the terminal writes is copied to ``out`` (the task's stdout
    file) and the window follows ``WINSIZE_FILE``; srun's EOF does not close it (a
    terminal has none: its task reads ^D). Exits once every pipe is closed and the
    terminal's task side is gone; the keeper kills it with the tasks' other leftovers
    where one never reads."""
    code = 0
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a gone reader is EPIPE, not death
        _feed(folder, pipes, pipes[0] if out >= 0 else -1, out)
    except BaseException:
        code = 1
    os._exit(code)


def _feed(folder: str, pipes: dict[int, int], terminal: int, out: int) -> None:
    fed = dict.fromkeys(pipes, 0)
    for fd in pipes.values():
        os.set_blocking(fd, False)
    source: int | None = None
    punched = 0
    said: dict[int, int] = {}
    interval = FEED_MIN_SECONDS
    size_seen = -1
    woken = open_wake(folder, INPUT_WAKE)  # (the agent wrote input: look now)
    told = -1  # OUTPUT_WAKE's write end
    # pipes to close once the record says so: a task that reads its EOF may end, and the
    # keeper then kills the feeder, before a record written after the close
    closing: list[int] = []

    def close(rank: int) -> None:
        fd = pipes.pop(rank)
        if fd != terminal:  # (the terminal stays open for its output)
            closing.append(fd)
        fed[rank] = CLOSED

    while pipes or terminal >= 0:
        moved = False
        if terminal >= 0:
            size_seen = _follow_size(folder, terminal, size_seen)
            copied = _copy_output(terminal, out)
            if copied is None:  # its task side is closed: the task and its children ended
                if 0 in pipes:
                    close(0)
                with contextlib.suppress(OSError):
                    os.close(terminal)
                terminal = -1
            elif copied:
                told = wake(folder, OUTPUT_WAKE, told)
            moved = bool(copied)
        if source is None:
            with contextlib.suppress(OSError):
                source = os.open(os.path.join(folder, INPUT_FILE), os.O_RDWR | os.O_CLOEXEC)
        end = read_end(folder)
        size = os.fstat(source).st_size if source is not None else 0
        for rank, fd in list(pipes.items()):
            if end is not None and fed[rank] >= end:
                close(rank)
                continue
            if source is None or fed[rank] >= size:
                continue
            data = os.pread(source, min(READ_BYTES, size - fed[rank]), fed[rank])
            try:
                fed[rank] += os.write(fd, data)
                moved = True
            except BlockingIOError:
                pass
            except OSError:  # EPIPE: the task ended, or closed its stdin (EIO: terminal)
                close(rank)
        if fed != said:
            write_atomic(folder, FED_FILE, "".join(f"{r} {o}\n" for r, o in sorted(fed.items())))
            said = dict(fed)
        for fd in closing:
            with contextlib.suppress(OSError):
                os.close(fd)
        closing.clear()
        low = min((o for o in fed.values() if o != CLOSED), default=size)
        if source is not None and low - punched >= PUNCH_BYTES:
            punched = _punch(source, low - low % PUNCH_BYTES) or punched
        if moved:
            interval = FEED_MIN_SECONDS
            continue
        # a full pipe (until its task reads), the terminal's output, the agent's wake-up
        events = {fd: select.POLLOUT for rank, fd in pipes.items() if fed[rank] < size}
        timeout = FEED_MAX_SECONDS if events else interval
        if terminal >= 0:
            events[terminal] = events.get(terminal, 0) | select.POLLIN
            if woken < 0:
                timeout = min(timeout, PTY_POLL_SECONDS)  # (srun's keystrokes)
        if woken >= 0:
            events[woken] = select.POLLIN
        poller = select.poll()
        for fd, mask in events.items():
            poller.register(fd, mask)
        poller.poll(timeout * 1000)
        if woken >= 0:
            drain(woken)
        interval = min(interval * 2, FEED_MAX_SECONDS)


def open_terminal(size: tuple[int, ...]) -> tuple[int, int]:
    """A pseudo-terminal (master, slave) of ``size`` (rows, columns), close-on-exec."""
    master, slave = os.openpty()
    _set_size(master, size)
    return master, slave


def _set_size(fd: int, size: tuple[int, ...]) -> None:
    with contextlib.suppress(OSError, ValueError, IndexError, struct.error):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))


def write_size(folder: str, rows: int, columns: int) -> None:
    """srun's terminal is now ``rows`` x ``columns``: the feeder resizes the task's."""
    write_atomic(folder, WINSIZE_FILE, f"{rows} {columns}\n")


def _follow_size(folder: str, terminal: int, seen: int) -> int:
    """Resize the terminal when ``WINSIZE_FILE`` changed since ``seen`` (its mtime, ns;
    the kernel tells the task's foreground group with SIGWINCH); the mtime now."""
    path = os.path.join(folder, WINSIZE_FILE)
    try:
        mtime = os.stat(path).st_mtime_ns
        if mtime != seen:
            with open(path) as f:
                _set_size(terminal, tuple(int(x) for x in f.read().split()))
        return mtime
    except (OSError, ValueError):
        return seen


def _copy_output(terminal: int, out: int) -> int | None:
    """What the terminal's task side wrote, appended to ``out``: bytes copied, or None
    once that side is closed (EIO)."""
    copied = 0
    while copied < READ_BYTES:
        try:
            data = os.read(terminal, READ_BYTES)
        except BlockingIOError:
            return copied
        except OSError:
            return None
        if not data:
            return None
        with contextlib.suppress(OSError):  # (the agent's disk: the output is lost)
            os.write(out, data)
        copied += len(data)
    return copied


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
