"""``StepLauncher``: the agent's handle on the step launcher process (``forkserver``),
which forks batch jobs' step supervisors and job steps' keepers alike (``handshake``),
and ``ChildWatch``, its watch on each child forked: the "started" pipe and the exit.

Requests are queued and written without ever blocking the event loop; replies are read
as they come, each handed to the callback its request named. Blocking writes could
deadlock: with a thousand launches queued, the launcher would block sending replies the
agent is not reading while the agent blocks sending requests the launcher is not reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from hal.agent.forkserver import BATCH
from hal.agent.isolation import Isolation
from hal.agent.procfs import open_pidfd
from hal.host.process import start_ticks

log = logging.getLogger("hal.agent")

STOP_TIMEOUT_SECONDS = 5.0
RESTART_INTERVAL_SECONDS = 1.0  # a launcher that keeps dying is not restarted in a loop


@dataclass(frozen=True, slots=True)
class LaunchReply:
    job_id: int
    # which of the job's launches: its attempt, or (kind "step") the step's run and id
    # (``steps._launch_key``)
    key: int
    pid: int = 0  # the supervisor or keeper
    ticks: int = 0  # its start time (clock ticks since boot)
    error: str = ""


OnReply = Callable[[LaunchReply], None]


class StepLauncher:
    """One per agent: launches of ``kind`` ``forkserver.BATCH`` (a batch job's step
    supervisor, keyed by the job's attempt) and ``forkserver.STEP`` (a step's keeper,
    keyed by the step's run and id)."""

    def __init__(self, isolation: Isolation) -> None:
        self.isolation = isolation
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._outgoing: deque[tuple[bytes, int, LaunchReply, OnReply]] = deque()
        # sent, awaiting their reply (which comes in the order they were sent)
        self._in_flight: deque[tuple[LaunchReply, OnReply]] = deque()
        self._writing = False
        self._started_at = 0.0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._started_at = time.monotonic()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # -P: no current directory on sys.path; the environment (PYTHONPATH) is the
        # agent's, so the launcher imports the same hal.
        args = [sys.executable, "-P", "-m", "hal.agent.forkserver", str(theirs.fileno())]
        iso = self.isolation
        args += [iso.kind, iso.base, iso.devices, iso.cores, iso.accounting]
        self._process = subprocess.Popen(args, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        ours.setblocking(False)
        self._sock = ours
        loop.add_reader(ours.fileno(), self._read)

    def launch(
        self,
        job_id: int,
        key: int,
        job_dir: str,
        started_w: int,
        on_reply: OnReply,
        kind: str = BATCH,
    ) -> None:
        """Queue a launch (``key``: the job's attempt, or the step's run and id for a
        step keeper); ``started_w`` is handed over (closed here once sent); ``on_reply``
        gets the reply, or the error that stands for it."""
        if (
            self._sock is None
            and self._loop is not None
            and time.monotonic() - self._started_at >= RESTART_INTERVAL_SECONDS
        ):
            self.start(self._loop)
        if self._sock is None:
            os.close(started_w)
            on_reply(LaunchReply(job_id, key, error="the step launcher is not running"))
            return
        request = {"job_id": job_id, "key": key, "job_dir": job_dir, "kind": kind}
        message = json.dumps(request).encode()
        self._outgoing.append((message, started_w, LaunchReply(job_id, key), on_reply))
        self._write()

    def stop(self) -> None:
        """Close the socket; the launcher finishes the requests it already received and
        exits on EOF. Supervisors keep running. Requests still queued here were never
        sent: their job folders have no supervisor, and the next agent reports them as
        launch failures."""
        for _, fd, _, _ in self._outgoing:
            os.close(fd)
        self._outgoing.clear()
        self._in_flight.clear()
        self._close(kill=False)

    def _close(self, *, kill: bool) -> None:
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            if self._writing:
                self._loop.remove_writer(self._sock.fileno())
            self._sock.close()
        self._sock = None
        self._writing = False
        if self._process is not None:
            if kill:
                self._process.kill()
            try:
                self._process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def _write(self) -> None:
        assert self._sock is not None and self._loop is not None
        while self._outgoing:
            message, fd, pending, on_reply = self._outgoing[0]
            try:
                socket.send_fds(self._sock, [message], [fd])
            except BlockingIOError:
                if not self._writing:
                    self._loop.add_writer(self._sock.fileno(), self._write)
                    self._writing = True
                return
            except OSError as err:
                log.error("the step launcher is gone (%s)", err)
                self._restart()
                return
            self._outgoing.popleft()
            os.close(fd)
            self._in_flight.append((pending, on_reply))
        if self._writing:
            self._loop.remove_writer(self._sock.fileno())
            self._writing = False

    def _read(self) -> None:
        assert self._sock is not None
        while True:
            try:
                message = self._sock.recv(64 * 1024)
            except BlockingIOError:
                return
            except OSError:
                message = b""
            if not message:
                log.error("the step launcher exited; starting a new one")
                self._restart()
                return
            data = json.loads(message)
            expected, on_reply = self._in_flight.popleft()
            reply = LaunchReply(
                job_id=int(data["job_id"]),
                key=int(data["key"]),
                pid=int(data.get("pid", 0)),
                ticks=int(data.get("ticks", 0)),
                error=str(data.get("error", "")),
            )
            if (reply.job_id, reply.key) != (expected.job_id, expected.key):
                raise RuntimeError(f"step launcher replied out of order: {reply} for {expected}")
            on_reply(reply)

    def _restart(self) -> None:
        """The launcher died. Requests without a reply go back to the shell as errors;
        it looks for a recorded supervisor (the launcher may have started one) before
        declaring a launch failed."""
        pending = list(self._in_flight)
        self._in_flight.clear()
        while self._outgoing:
            _, fd, reply, on_reply = self._outgoing.popleft()
            os.close(fd)
            pending.append((reply, on_reply))
        self._close(kill=True)
        if self._loop is not None and (
            time.monotonic() - self._started_at >= RESTART_INTERVAL_SECONDS
        ):
            self.start(self._loop)
        for reply, on_reply in pending:
            on_reply(LaunchReply(reply.job_id, reply.key, error="the step launcher exited"))


class ChildWatch:
    """The agent's watch on one child the launcher forked (a batch job's supervisor, a
    step's keeper): the one message it says on its "started" pipe (``on_started``), and
    its exit (``on_exit``, once; the pipe's message first when both are ready at once).
    The exit is seen on a pidfd, opened only once the child's pid and start time are
    known (``follow``) and checked against that time (a recycled pid is not the child);
    without pidfds (Linux < 5.3) the owner polls ``check``. The child lives on after
    ``close``: an agent that stops only stops watching."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        started_fd: int | None,
        on_started: Callable[[bytes], None],
        on_exit: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._on_started = on_started
        self._on_exit = on_exit
        self.pid = 0
        self.ticks = 0
        self.polled = False  # no pidfd: ``check`` it now and then
        self._pidfd: int | None = None
        self._started_fd = started_fd
        if started_fd is not None:
            os.set_blocking(started_fd, False)
            loop.add_reader(started_fd, self._read_started)

    @property
    def gone(self) -> bool:
        """Whether the child (pid and start time) no longer runs."""
        return not self.pid or start_ticks(self.pid) != self.ticks

    def follow(self, pid: int, ticks: int) -> None:
        """Watch the child ``pid`` started at ``ticks`` (as the launcher recorded it)."""
        self.pid, self.ticks = pid, ticks
        pidfd = open_pidfd(pid)
        if pidfd is not None and start_ticks(pid) != ticks:
            os.close(pidfd)  # the pid was recycled before pidfd_open: ours is gone
            pidfd = None
        if pidfd is not None:
            self._pidfd = pidfd
            self._loop.add_reader(pidfd, self._exited)
        elif self.gone:
            self._exited()  # a quick one: already over
        else:
            self.polled = True

    def check(self) -> None:
        """For a polled watch: its exit, if it has come."""
        if self.polled and self.gone:
            self._exited()

    def close(self) -> None:
        for fd in (self._pidfd, self._started_fd):
            if fd is not None:
                self._loop.remove_reader(fd)
                os.close(fd)
        self._pidfd = self._started_fd = None
        self.polled = False

    def _read_started(self) -> None:
        fd = self._started_fd
        if fd is None:
            return
        try:
            message = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            message = b""
        self._loop.remove_reader(fd)
        os.close(fd)
        self._started_fd = None
        self._on_started(message)

    def _exited(self) -> None:
        self._read_started()
        self.close()
        self._on_exit()
