"""srun's own stdin, relayed to a step's tasks on other nodes (ADR 0012, "srun's input"),
as Slurm's srun forwards it: to every task (``-i all``, the default) or to task N alone
(``-i N``); its EOF closes the tasks' stdin.

srun sends it only where there is something to relay: a stdin that is /dev/null or
closed (a batch script's), or a terminal srun does not have in the foreground, leaves
the tasks /dev/null and sends nothing. A thread of its own reads it and posts it by
offset (``POST .../steps/{n}/input``; a resend is harmless) on a connection of its own,
so neither the output relay nor signal forwarding waits for it; the server holds a
request while the step's buffer is full, which is how a slow reader slows srun.

srun holds what it sent until the server says every task has been given it, and once
its stdin has ended asks until no task reads more: a restarted server asks for what it
lost again (``hal.state.step_input``).
"""

from __future__ import annotations

import contextlib
import os
import select
import stat
import threading
from typing import TYPE_CHECKING

from hal.compat.seam import Client, Console
from hal.core.errors import HalError, Unavailable

if TYPE_CHECKING:
    from hal.compat.seam import ClientFactory

CHUNK_BYTES = 1 << 20  # per request, at most (wire.steps.MAX_INPUT_CHUNK)
READ_BYTES = 1 << 16
RETRY_SECONDS = 1.0  # between tries while the server does not answer
POLL_SECONDS = 2.0  # while stdin is quiet and the tasks were not given all it sent


def input_target(mode: str) -> tuple[bool, int | None]:
    """srun ``-i MODE``: whether srun's own stdin goes to the tasks, and to which rank
    alone (None: every task)."""
    word = mode.lower()
    if word == "all":
        return True, None
    if mode.isdigit():
        return True, int(mode)
    return False, None


def relays_stdin(fd: int = 0) -> bool:
    """Whether srun's stdin holds anything to relay: not closed, not /dev/null, and not
    a terminal whose foreground srun is not in (reading it would stop srun)."""
    try:
        mine = os.fstat(fd)
    except OSError:
        return False
    if stat.S_ISCHR(mine.st_mode):
        with contextlib.suppress(OSError):
            null = os.stat(os.devnull)
            if mine.st_rdev == null.st_rdev:
                return False
        if os.isatty(fd):
            try:
                return os.tcgetpgrp(fd) == os.getpgrp()
            except OSError:
                return False
    return True


class InputSender:
    """Reads srun's stdin (``fd``) on a daemon thread and sends it to step ``step_id``
    of job ``job_id`` until it ends (then its EOF), until no task reads more, or until
    ``stop``. ``connect``: a client of its own (the main one waits in a read)."""

    def __init__(
        self,
        job_id: int,
        step_id: int,
        console: Console,
        connect: ClientFactory,
        fd: int = 0,
    ) -> None:
        self.job_id, self.step_id, self.fd = job_id, step_id, fd
        self.console = console
        self.connect = connect
        self.stopped = threading.Event()
        self.ended = False  # stdin's end was read (a terminal's Ctrl-D comes once)
        self.thread = threading.Thread(target=self._run, name="srun-input", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """The step has ended: send no more (a read of stdin in progress is left to
        srun's exit; the thread is a daemon's)."""
        self.stopped.set()

    def _run(self) -> None:
        client: Client | None = None
        try:
            client = self.connect()
            self._relay(client)
        except HalError as err:
            if not self.stopped.is_set():
                self.console.err(f"srun: warning: stopped relaying srun's input: {err.message}")
        except OSError:
            pass  # (srun's stdin failed: the tasks get no more of it; nothing else to say)
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()

    def _relay(self, client: Client) -> None:
        held = bytearray()  # what srun read from ``kept`` on: not yet given to every task
        kept = offset = 0  # the server has what is before ``offset``
        eof = False
        while not self.stopped.is_set():
            # (all sent: read more, or, while stdin is quiet and the tasks were not given
            # all yet, ask what they were given, which a restarted server answers with
            # where to send again from)
            quiet = offset == kept + len(held) and not eof
            if quiet and (kept == offset or self._ready(POLL_SECONDS)):
                data = self._read()
                held += data
                eof = not data
                continue
            try:
                reply = client.send_step_input(
                    self.job_id,
                    self.step_id,
                    offset,
                    bytes(held[offset - kept :]),
                    eof=eof,
                    kept=kept,
                )
            except Unavailable:  # (the control plane restarts: as the output relay)
                self.stopped.wait(RETRY_SECONDS)
                continue
            if reply.lost:
                self.console.err(
                    "srun: warning: the control plane restarted and lost srun's input "
                    "it held; the tasks were given its end"
                )
                return
            if reply.closed:
                return  # no task reads more: what srun reads now goes nowhere
            if not kept <= reply.offset <= kept + len(held):  # (the server lost bytes)
                raise HalError(f"the server has srun's input up to {reply.offset} only")
            offset = reply.offset  # (below srun's: a restarted server asks for it again)
            given = offset if reply.given is None else min(max(reply.given, kept), offset)
            del held[: given - kept]
            kept = given
            if eof and reply.given is None and offset == kept + len(held):
                return  # (a server that does not say what was given has its end)

    def _ready(self, wait: float) -> bool:
        """Whether stdin has something (or its end) to read within ``wait`` s."""
        try:
            ready, _, _ = select.select([self.fd], [], [], wait)
        except (OSError, ValueError):
            return True  # (the read says what is wrong)
        return bool(ready)

    def _read(self) -> bytes:
        """Up to ``CHUNK_BYTES`` of stdin: what one read gives, and what more is there
        at once (a pipe gives at most its buffer a read); b"" at its end."""
        if self.ended:
            return b""
        data = os.read(self.fd, READ_BYTES)
        while data and len(data) < CHUNK_BYTES:
            ready, _, _ = select.select([self.fd], [], [], 0)
            if not ready:
                break
            more = os.read(self.fd, min(READ_BYTES, CHUNK_BYTES - len(data)))
            if not more:
                self.ended = True
                break
            data += more
        return data
