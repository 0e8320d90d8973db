"""``srun --pty``: task 0 in a pseudo-terminal on its node, driven from srun's terminal,
as an interactive shell wants (``srun --pty bash``).

The agent's keeper gives task 0 a pseudo-terminal of srun's terminal's size as its
stdin, stdout, stderr and controlling terminal (``hal.agent.step_input``); srun's
keystrokes reach it by the relayed-input path (``srun_input``), what it writes comes
back as task 0's stdout. srun puts its own terminal in raw mode meanwhile, so that
every key (Ctrl-C, Ctrl-D, Ctrl-Z, arrows) goes to the task's terminal as a byte, which
answers as a terminal does (echo, signals to its foreground job, line editing), and
restores it at the end. A resized window (SIGWINCH) resizes the task's terminal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import termios
import tty
from collections.abc import Iterator
from types import FrameType

from hal.compat.seam import Client, Console
from hal.core.errors import HalError

DEFAULT_SIZE = (24, 80)  # (rows, columns) where the terminal does not say


def wants_terminal(pty: bool, fd: int = 0) -> bool:
    """srun --pty with a terminal as srun's stdin, in srun's foreground."""
    if not pty or not os.isatty(fd):
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False


def terminal_size(fd: int = 0) -> tuple[int, int]:
    """srun's terminal's (rows, columns)."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return DEFAULT_SIZE
    if size.lines <= 0 or size.columns <= 0:
        return DEFAULT_SIZE
    return size.lines, size.columns


@contextlib.contextmanager
def raw_terminal(fd: int = 0) -> Iterator[None]:
    """srun's terminal in raw mode for the block; as it was after (also on an error)."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def following_size(job_id: int, step_id: int, console: Console, fd: int = 0) -> Iterator[None]:
    """For the block, each SIGWINCH sends srun's terminal's new size to the step (on a
    connection of its own: the main one waits in a read)."""
    clients: list[Client] = []

    def resized(_signum: int, _frame: FrameType | None) -> None:
        if not clients:
            clients.append(console.client_factory())
        with contextlib.suppress(HalError):  # (a lost resize: the next one fixes it)
            clients[0].send_step_input(job_id, step_id, 0, b"", winsize=terminal_size(fd))

    previous = signal.signal(signal.SIGWINCH, resized)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)
        for client in clients:
            client.close()
