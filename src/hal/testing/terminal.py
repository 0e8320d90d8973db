"""A command in a pseudo-terminal of its own, as a terminal emulator runs a shell: for
the tests and the bench of ``srun --pty`` (what it writes is read back, keys typed, the
window resized)."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping
from pathlib import Path


class Terminal:
    """A command in a pseudo-terminal of its own (its session's controlling terminal),
    as a terminal emulator runs a shell: what it writes is read back, keys are typed."""

    def __init__(self, argv: list[str], env: Mapping[str, str], cwd: Path, size: tuple[int, int]):
        self.master, self.slave = os.openpty()
        self.resize(*size)
        self.modes = termios.tcgetattr(self.slave)
        self.seen = b""
        self.process = subprocess.Popen(
            argv,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # noqa: PLW1509
        )

    def resize(self, rows: int, columns: int) -> None:
        """As a terminal window resized: the kernel sends its foreground SIGWINCH."""
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def await_raw(self, timeout: float = 30.0) -> None:
        """Until the command put its terminal in raw mode (srun, once its step runs)."""
        deadline = time.monotonic() + timeout
        while termios.tcgetattr(self.slave)[3] & termios.ICANON:
            assert time.monotonic() < deadline, "the terminal was never made raw"
            time.sleep(0.05)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def expect(self, pattern: bytes, timeout: float = 30.0) -> bytes:
        """Read until ``pattern`` (a regex) shows after what earlier calls matched; the
        text up to its end."""
        deadline = time.monotonic() + timeout
        while not (found := re.search(pattern, self.seen)):
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in {self.seen!r}"
            if select.select([self.master], [], [], min(left, 0.5))[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # (the command ended and closed its side)
                    time.sleep(0.05)
        text, self.seen = self.seen[: found.end()], self.seen[found.end() :]
        return text

    def wait(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)
        os.close(self.slave)
