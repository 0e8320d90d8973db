"""``Session``: the client's connection to one session on the broker.

Task ids are assigned here, in order, from the broker's ``next_task_id`` (so a
reattached client continues where the last one stopped). A reader thread receives
result frames, hands each result to the sink registered for its id (a future, or a
``map`` stream), acknowledges the frame so the broker can forget it, and wakes the
consumers once per frame rather than once per task.

A session that survives its client (``journal=True``) and was given a way to ask for a
new ticket (``HtcClient`` gives one when ``reattach`` is more than 0) reattaches by itself
when its connection is lost (its broker died, a takeover moved it to another server):
the reader thread asks for a ticket until ``reattach`` seconds have passed, connects,
sends again the tasks whose ``SUBMIT`` the broker never recorded (those from its
``next_task_id`` on; the client keeps each task's payload until its result comes), and
goes on. Open futures and maps never notice, except for the wait; results that come a
second time (acknowledged to the dead broker, resent by the new one) are dropped.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

from hal.core.errors import Conflict, HalError, InvalidRequest, PayloadTooLarge, Unavailable
from hal.htc import protocol as p
from hal.htc import sigterm
from hal.htc.errors import SessionEnded, TaskError
from hal.htc.futures import ResultStream, Sink, TaskFuture, TaskResult
from hal.htc.rest import SessionTicket

CONNECT_TIMEOUT_S = 30.0
CANCEL_TIMEOUT_S = 30.0  # a future's cancel() waits this long for the broker's answer
LEAVE_TIMEOUT_S = 10.0  # cancel() and detach() wait this long for the broker's answer
WAIT_SLICE_S = 0.5  # how often a blocked consumer re-checks whether the session ended
DEFAULT_WINDOW = 65_536  # tasks a map keeps in flight: bounds memory on both sides
DEFAULT_CHUNK = 2_048  # tasks per SUBMIT frame
REATTACH_PAUSE_S = (0.5, 5.0)  # first and longest pause between reattach attempts

log = logging.getLogger("hal.htc")


class Session:
    def __init__(
        self,
        ticket: SessionTicket,
        common: bytes | None = None,
        *,
        reattach: Callable[[], SessionTicket] | None = None,
        reattach_s: float = 0.0,
    ) -> None:
        """Connect to the session; ``common`` (``pack_common``) is sent once welcomed.
        ``reattach`` gives a new ticket for this session (through whichever server
        leads); with it and ``reattach_s`` > 0, a lost connection of a session that
        survives its client is reattached for up to that many seconds."""
        self.id = ticket.session
        self._new_ticket = reattach if reattach_s > 0 else None
        self._reattach_s = reattach_s
        self.reattaches = 0  # how often this client reattached by itself
        self._send_lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._pending: dict[int, Sink] = {}
        self._orphans = ResultStream()  # results of tasks this client did not submit
        self._ended: tuple[str, str] | None = None
        self._stopped = ""  # "closed", "detached", "disconnected": no new tasks from here
        self._detached = threading.Event()
        self._ended_event = threading.Event()
        self._lost_reason = "the connection to the HTC broker was lost"
        # CANCEL requests sent and answered: the broker answers in order, so the nth
        # answer is the nth request's (one that timed out still cancels when it comes)
        self._cancels = threading.Condition()
        self._cancels_sent = 0
        self._cancels_answered = 0
        self._sigterm = False  # this block set the SIGTERM handler (``sigterm.install``)
        self._closing = False  # CLOSE sent: sent again after a reattach
        self._sock, self._decoder, welcome, early = connect(ticket)
        if common is not None:
            self._send([p.COMMON, common])
        self.state = str(welcome.get("state", "OPEN"))
        if self.state == "CLOSED":  # reattached to a closed session: it takes no tasks
            self._stopped = "closed"
        self._next_id = int(welcome["next_task_id"])
        self._own_from = self._next_id  # ids below are an earlier client's tasks
        self._seen_orphans: set[int] = set()  # of those, the results delivered
        self.outstanding_at_attach = int(welcome.get("outstanding", 0))
        self._outstanding = self.outstanding_at_attach  # of those, not yet from results()
        # an executable's task takes one bytes or str argument: refused here otherwise
        self._exec = welcome.get("service_kind") == "exec"
        # recoverable (journal=True) or detached on purpose once: leaving the block
        # through an exception detaches it rather than cancel it
        self.survives_client = bool(welcome.get("survives_client", False))
        # payloads of tasks sent and not answered, to send again after a reattach
        self._inflight: dict[int, bytes] | None = (
            {} if self._new_ticket is not None and self.survives_client else None
        )
        self._reader = threading.Thread(
            target=self._read_loop, args=(early,), name=f"htc-{self.id}", daemon=True
        )
        self._reader.start()

    # -- context manager --------------------------------------------------------------
    def __enter__(self) -> Session:
        self._sigterm = sigterm.install()  # SIGTERM in the block: as Ctrl-C
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Normal exit: ``close()`` (wait for the tasks, DONE). An exception (Ctrl-C, a
        bug in the block), also one while that ``close()`` waits (Ctrl-C because it takes
        too long): nobody will read the results, so the session is cancelled and its
        workers freed, unless it is meant to survive its client (``journal=True``, or
        detached before): then it is detached, to be reattached by id. It used to be
        left OPEN with no client, its workers holding their CPUs for ever. A block that
        detached (or disconnected) the session leaves it as it is. SIGTERM in the block
        raises ``sigterm.Terminated`` there, so it does the same as Ctrl-C."""
        try:
            if exc_type is None:
                if self._stopped in ("detached", "disconnected"):
                    return
                try:
                    self.close()
                except BaseException as err:
                    self._leave(sigterm.exception_name(type(err)))
                    raise
                return
            self._leave(sigterm.exception_name(exc_type))
        finally:
            if self._sigterm:
                sigterm.uninstall()

    def _leave(self, why: str) -> None:
        """The block is left through the exception ``why``: cancel or detach, then
        disconnect."""
        try:
            if self._ended is None and self._stopped in ("", "closed"):
                if self.survives_client:
                    self.detach()
                else:
                    self.cancel(f"its client left the session's block with {why}")
        except (Unavailable, OSError):
            pass  # the broker ends a session whose client is gone (after its grace)
        finally:
            self.disconnect()

    # -- submitting -------------------------------------------------------------------
    def submit(self, *args: Any) -> TaskFuture:
        """One task: the service is called with ``args``."""
        return self.submit_many([args])[0]

    def submit_many(self, calls: Iterable[tuple[Any, ...] | list[Any]]) -> list[TaskFuture]:
        """Many tasks in one frame per ``DEFAULT_CHUNK``; each item is one call's
        arguments, as a tuple: ``[(x,), (y,)]``."""
        self._check_open()
        items = calls if isinstance(calls, list) else list(calls)
        if not all(isinstance(args, tuple | list) for args in items):
            i, bad = next((i, a) for i, a in enumerate(items) if not isinstance(a, tuple | list))
            raise TypeError(
                f"submit_many: item {i} is {type(bad).__name__} {bad!r:.60}; each item must "
                "be a tuple (or list) of arguments, e.g. submit_many([(x,), (y,)]) or "
                "submit_many([(a, b)])"
            )
        if self._exec:
            for i, args in enumerate(items):
                check_exec_args(args, i)
        payloads = [p.pack(list(args)) for args in items]
        sizes = check_sizes(payloads)
        first = self._allocate(len(payloads))
        futures = [TaskFuture(first + i, self._withdraw) for i in range(len(payloads))]
        pending = self._pending
        for f in futures:
            pending[f.task_id] = f
        for start, end in p.frame_slices(sizes, DEFAULT_CHUNK):
            flat: list[Any] = []
            for i, payload in enumerate(payloads[start:end], first + start):
                flat += (i, payload)
            self._send_tasks(flat)
        if self._ended is not None:  # ended while these were registered: fail, not hang
            for f in futures:
                f.fail(SessionEnded(*self._ended))
        return futures

    def map(
        self,
        calls: Iterable[Any],
        *,
        ordered: bool = True,
        star: bool = False,
        window: int = DEFAULT_WINDOW,
        chunk: int = DEFAULT_CHUNK,
        return_exceptions: bool = False,
    ) -> Iterator[Any]:
        """Run the service on each item and yield the results (in input order unless
        ``ordered=False``). Each item is one argument, or an argument tuple with
        ``star=True``. At most ``window`` tasks are in flight, so a million-item
        iterator runs in flat memory (ordered, results held for an earlier one count
        toward ``window``). A failed task raises its ``TaskError`` (ordered: in its
        place, after the results before it), or is yielded as one with
        ``return_exceptions``.

        The options and the session are checked here; tasks are sent as the results
        are read (lazily, so that ``window`` bounds them). Leaving the map early (a
        ``break``, the error it raises, closing it) withdraws the tasks it sent that no
        worker holds yet, as ``Executor.map`` cancels its pending futures; results of
        those a worker holds are dropped."""
        for option, n in (("window", window), ("chunk", chunk)):
            if n < 1:  # window 0 waited forever; chunk 0 read as the end of the items
                raise InvalidRequest(f"{option}: {n}; it must be at least 1", field=option)
        self._check_open()
        return self._map(iter(calls), ordered, star, window, chunk, return_exceptions)

    def _map(
        self,
        items: Iterator[Any],
        ordered: bool,
        star: bool,
        window: int,
        chunk: int,
        return_exceptions: bool,
    ) -> Iterator[Any]:
        stream = ResultStream()
        index_of: dict[int, int] = {}  # task id -> item index, for tasks not finished
        next_index = 0
        exhausted = False
        buffered: dict[int, Any] = {}
        yield_next = 0
        pack, pending = p.pack, self._pending
        try:
            while True:
                # results waiting for an earlier one count too: behind a slow task, an
                # ordered map would otherwise keep submitting and hold every later result
                room = window - len(index_of) - len(buffered)
                while not exhausted and room > 0:
                    batch = list(itertools.islice(items, min(chunk, room)))
                    if not batch:
                        exhausted = True
                        break
                    self._check_open()  # (a map read first after a detach, say)
                    if star and not all(isinstance(x, (tuple, list)) for x in batch):
                        i, bad = next(
                            (i, x) for i, x in enumerate(batch) if not isinstance(x, (tuple, list))
                        )
                        raise TypeError(
                            f"map(star=True): item {next_index + i} is {type(bad).__name__} "
                            f"{bad!r:.60}; each item must be a tuple of arguments"
                        )
                    if self._exec:
                        for i, x in enumerate(batch, next_index):
                            check_exec_args(x if star else (x,), i)
                    payloads = [pack(list(x) if star else [x]) for x in batch]
                    sizes = check_sizes(payloads, next_index)
                    first = self._allocate(len(payloads))
                    for start, end in p.frame_slices(sizes, len(payloads)):
                        flat: list[Any] = []
                        for offset in range(start, end):
                            task_id = first + offset
                            index_of[task_id] = next_index + offset
                            pending[task_id] = stream
                            flat += (task_id, payloads[offset])
                        self._send_tasks(flat)
                    next_index += len(batch)
                    room -= len(batch)
                if exhausted and not index_of:
                    return
                self._wait(stream)
                done = stream.done
                while done:
                    task_id, status, payload = done.popleft()
                    index = index_of.pop(task_id)
                    outcome = TaskResult.decode(task_id, status, payload)
                    value: Any = outcome.value
                    if outcome.error is not None:
                        if not (return_exceptions or ordered):
                            raise outcome.error
                        value = outcome.error
                    if not ordered:
                        yield value
                        continue
                    buffered[index] = value  # an error too: raised in its place, not before
                    while yield_next in buffered:
                        value = buffered.pop(yield_next)
                        yield_next += 1
                        if isinstance(value, TaskError) and not return_exceptions:
                            raise value
                        yield value
        finally:
            if index_of:  # left early: nobody will read these
                self._abandon(stream, list(index_of))

    def _abandon(self, stream: ResultStream, task_ids: list[int]) -> None:
        """A map left before its tasks finished: withdraw those no worker holds (the
        broker's answer removes them from ``_pending``) and drop the results of the
        others as they come. Never raises: it runs while the map's own exit unwinds."""
        stream.done = deque(maxlen=0)  # what the reader delivers from now on is dropped
        if self._ended is not None or self._stopped in ("detached", "disconnected"):
            return
        with self._cancels:  # counted as ``_withdraw`` counts: answers come in order
            try:
                self._send([p.CANCEL, task_ids])
            except Unavailable:
                return
            self._cancels_sent += 1

    def results(self, timeout: float | None = None) -> Iterator[TaskResult]:
        """Results of tasks submitted by an earlier client of this session (after a
        reattach), until the ones outstanding at attach time are all in."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self._orphans
        # a count kept across calls: a second call yields only what the first did not
        # (it used to wait again for all of them: a timeout, or for ever)
        while self._outstanding > 0:
            if not stream.done:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self._outstanding} results of session {self.id} still missing"
                    )
                self._wait(stream, deadline)
                continue
            task_id, status, payload = stream.done.popleft()
            self._outstanding -= 1
            yield TaskResult.decode(task_id, status, payload)

    # -- session control --------------------------------------------------------------
    def close(self, timeout: float | None = None) -> str:
        """No more tasks: wait for the ones sent to finish, then end the session (DONE).
        Returns the final state."""
        self._check_attached("close")
        self._stopped = "closed"
        if self._ended is None:
            self._closing = True
            self._send([p.CLOSE])
            if not self._ended_event.wait(timeout):
                raise TimeoutError(f"session {self.id} did not finish in {timeout} s")
        self.disconnect()
        return self._ended[0] if self._ended else "DONE"

    def cancel(self, reason: str = "") -> str:
        """End the session now (CANCELLED, with ``reason``): queued tasks are dropped,
        open futures raise ``SessionEnded`` and the workers are released, as with
        ``HtcClient.cancel(id)``. Returns the final state (the last one known if the
        broker did not answer within ``LEAVE_TIMEOUT_S``)."""
        self._check_attached("cancel")
        self._stopped = "closed"
        if self._ended is None:
            self._send([p.CANCEL_SESSION, reason])
            self._ended_event.wait(LEAVE_TIMEOUT_S)
        state = self._ended[0] if self._ended is not None else self.state
        self.disconnect()
        return state

    def detach(self) -> None:
        """Leave the session running (reattach by id later). From here on it runs with
        no client for as long as it has work, also after a later client's crash."""
        if self._stopped == "detached":
            return
        self._check_attached("detach")
        self._stopped = self._stopped or "detached"
        if self._ended is None:
            self._send([p.DETACH])
            self._detached.wait(LEAVE_TIMEOUT_S)
        self.disconnect()

    def disconnect(self) -> None:
        self._stopped = self._stopped or "disconnected"
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    @property
    def ended(self) -> tuple[str, str] | None:
        """``(state, reason)`` once the broker said the session ended."""
        return self._ended

    # -- plumbing ---------------------------------------------------------------------
    def _check_attached(self, action: str) -> None:
        """``close``, ``cancel`` and ``detach`` need this client's connection: after
        ``detach()`` or ``disconnect()`` they used to fail with 'Bad file descriptor'."""
        if self._stopped in ("detached", "disconnected"):
            hint = f"HtcClient().attach({self.id!r}).{action}()"
            if action == "cancel":
                hint += f" or HtcClient().cancel({self.id!r})"
            raise Conflict(
                f"this client of session {self.id} is {self._stopped}; to {action} the "
                f"session, reattach: {hint}"
            )

    def _check_open(self) -> None:
        """Refuse new tasks the broker would not run (they used to wait forever, or fail
        with 'Bad file descriptor')."""
        # this client's own stop first: once it disconnects, the reader may also see the
        # connection end (LOST), which is not what the caller needs to hear
        if self._stopped == "closed":
            raise Conflict(f"session {self.id} is closed: it takes no new tasks; open another")
        if self._stopped:
            raise Conflict(
                f"this client of session {self.id} is {self._stopped}; to send more tasks, "
                f"reattach: HtcClient().attach({self.id!r})"
            )
        if self._ended is not None:
            raise SessionEnded(*self._ended)

    def _allocate(self, n: int) -> int:
        with self._id_lock:
            first = self._next_id
            self._next_id += n
            return first

    def _send(self, message: list[Any]) -> None:
        """Send one frame; while the reader reattaches, wait for it and send on the new
        connection."""
        data = p.frame(message)
        deadline = time.monotonic() + self._reattach_s
        while True:
            with self._send_lock:
                sock = self._sock
                try:
                    sock.sendall(data)
                    return
                except OSError as err:
                    error = err
            while self._may_reattach() and self._sock is sock and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._sock is sock:
                raise Unavailable(f"lost the connection to the HTC broker: {error}") from error

    def _send_tasks(self, flat: list[Any]) -> None:
        """A ``SUBMIT``. Its payloads are kept first when the session may reattach: a frame
        the dead broker never recorded is sent again by the reattach, not here (the new
        broker would refuse the ids a second time)."""
        inflight = self._inflight
        if inflight is None:
            self._send([p.SUBMIT, flat])
            return
        data = p.frame([p.SUBMIT, flat])
        with self._send_lock:
            for i in range(0, len(flat), 2):
                inflight[flat[i]] = flat[i + 1]
            with contextlib.suppress(OSError):
                self._sock.sendall(data)

    def _may_reattach(self) -> bool:
        return (
            self._new_ticket is not None
            and self.survives_client
            and self._ended is None
            and self._stopped in ("", "closed")
        )

    def _withdraw(self, future: TaskFuture) -> None:
        """``future.cancel()``: ask the broker to withdraw the task and wait for the
        answer, which the reader thread applies (``TaskFuture.withdrawn``). Not from the
        reader thread itself (a done-callback): it would wait for itself."""
        if self._ended is not None or self._detached.is_set():
            return
        if threading.current_thread() is self._reader:
            return
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        with self._cancels:
            try:
                self._send([p.CANCEL, [future.task_id]])  # in the lock: sent in count order
            except Unavailable:
                return
            self._cancels_sent += 1
            mine = self._cancels_sent
            while self._cancels_answered < mine and self._ended is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._detached.is_set():
                    return
                self._cancels.wait(min(left, WAIT_SLICE_S))

    def _wait(self, stream: ResultStream, deadline: float | None = None) -> None:
        with stream.cond:
            while not stream.done:
                if self._ended is not None:
                    state, reason = self._ended
                    raise SessionEnded(state, reason)
                if self._detached.is_set():
                    raise self._detached_error()
                left = WAIT_SLICE_S
                if deadline is not None:
                    left = min(left, deadline - time.monotonic())
                    if left <= 0:
                        return
                stream.cond.wait(left)

    def _read_loop(self, early: list[list[Any]]) -> None:
        """The reader thread: ``early`` (frames read with WELCOME) first, then the socket;
        a lost connection is reattached when the session allows it."""
        while True:
            try:
                if self._handle(early):
                    return
                sock, decoder = self._sock, self._decoder
                while True:
                    data = sock.recv(1 << 20)
                    if not data:
                        break
                    if self._handle(decoder.feed(data)):
                        return
            except (OSError, p.ProtocolError):
                pass
            if not self._may_reattach():
                break
            again = self._reattach()
            if again is None:
                break
            early = again
        self._end("LOST", self._lost_reason)

    def _reattach(self) -> list[list[Any]] | None:
        """Ask for a ticket and connect until ``reattach_s`` has passed; then send again
        what the new broker does not have. Returns the frames that came with WELCOME, or
        None (the session is lost: gone, ended, or no server answered in time)."""
        assert self._new_ticket is not None
        deadline = time.monotonic() + self._reattach_s
        pause, longest = REATTACH_PAUSE_S
        lost_reason = self._lost_reason
        while self._may_reattach():
            try:
                sock, decoder, welcome, early = connect(self._new_ticket())
                break
            except Unavailable as err:
                self._lost_reason = f"{lost_reason}; not reattached in {self._reattach_s} s: {err}"
            except HalError as err:  # the session is gone or over: nothing to reattach
                self._lost_reason = f"{lost_reason}; not reattached: {err}"
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            pause = min(pause * 2, longest)
        else:
            return None
        state = str(welcome.get("state", "OPEN"))
        first_new = int(welcome["next_task_id"])
        inflight = self._inflight or {}
        with self._send_lock, self._id_lock:
            if not self._may_reattach():  # disconnected meanwhile
                sock.close()
                return None
            old, self._sock, self._decoder = self._sock, sock, decoder
            self._next_id = max(self._next_id, first_new)
            cancels_sent = self._cancels_sent
            lost = sorted(i for i in inflight if i >= first_new)
            with contextlib.suppress(OSError):  # (the next reattach sends it all again)
                for start in range(0, len(lost), DEFAULT_CHUNK):
                    ids = lost[start : start + DEFAULT_CHUNK]
                    sock.sendall(p.frame([p.SUBMIT, [x for i in ids for x in (i, inflight[i])]]))
                if self._closing and state != "CLOSED":
                    sock.sendall(p.frame([p.CLOSE]))
        old.close()
        with self._cancels:  # CANCELs the dead broker never answered: none will come
            self._cancels_answered = max(self._cancels_answered, cancels_sent)
            self._cancels.notify_all()
        self._lost_reason = lost_reason
        self.state = state
        self.reattaches += 1
        log.warning(
            "HTC session %s reattached (%d tasks sent again, %d outstanding)",
            self.id,
            len(lost),
            int(welcome.get("outstanding", 0)),
        )
        return early

    def _handle(self, messages: list[list[Any]]) -> bool:
        """Act on received frames; True once DETACHED came (the reader stops)."""
        pending, orphans, sock = self._pending, self._orphans, self._sock
        inflight = self._inflight
        for message in messages:
            kind = message[0]
            if kind == p.RESULTS:
                flat = message[2]
                touched: set[Any] = set()
                for i in range(0, len(flat), 3):
                    task_id = flat[i]
                    sink = pending.pop(task_id, None)
                    if sink is None:
                        # delivered before (acknowledged to a broker that died first),
                        # or withdrawn: nobody waits for it
                        if task_id >= self._own_from or task_id in self._seen_orphans:
                            continue
                        self._seen_orphans.add(task_id)
                        sink = orphans
                    if inflight is not None:
                        inflight.pop(task_id, None)
                    sink.deliver(task_id, flat[i + 1], flat[i + 2])
                    touched.add(sink)
                with self._send_lock:
                    sock.sendall(p.frame([p.ACK, message[1]]))
                for sink in touched:
                    sink.wake()
            elif kind == p.CANCEL:
                for task_id in message[1]:
                    if inflight is not None:
                        inflight.pop(task_id, None)
                    withdrawn = pending.get(task_id)
                    if withdrawn is None:
                        continue
                    del pending[task_id]  # (an abandoned map's too: nothing more comes)
                    if isinstance(withdrawn, TaskFuture):
                        withdrawn.withdrawn()
                with self._cancels:
                    self._cancels_answered += 1
                    self._cancels.notify_all()
            elif kind == p.ENDED:
                self._end(str(message[1]), str(message[2]))
            elif kind == p.DETACHED:
                self._detached.set()
                self._fail_open(self._detached_error())
                return True
            elif kind == p.ERROR:
                self._lost_reason = str(message[1])  # the reason if the broker hangs up
        return False

    def _end(self, state: str, reason: str) -> None:
        if self._ended is not None:
            return
        self._ended = (state, reason)
        self.state = state
        self._ended_event.set()
        self._fail_open(SessionEnded(state, reason))

    def _detached_error(self) -> Conflict:
        return Conflict(
            f"this client of session {self.id} detached before the result came; the "
            f"session runs on: collect it with HtcClient().attach({self.id!r}).results()"
        )

    def _fail_open(self, error: BaseException) -> None:
        """No more results reach this client: every open future and stream hears why."""
        sinks = list(self._pending.values())
        self._pending.clear()
        for sink in {id(s): s for s in [*sinks, self._orphans]}.values():
            sink.fail(error)
            sink.wake()


def pack_common(value: Any) -> bytes:
    """Common data as sent, packed before the session opens: a value msgpack cannot
    pack (a set, an object) is refused here rather than leave an open session whose
    workers wait for common data that never comes."""
    try:
        return p.pack(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise TypeError(
            f"common data must be msgpack values (numbers, str, bytes, lists, dicts); {err}"
        ) from err


def check_exec_args(args: tuple[Any, ...], index: int) -> None:
    """An executable service's task takes one argument, bytes or str: anything else is
    refused before it is sent (an int used to become that many zero bytes)."""
    if len(args) == 1 and isinstance(args[0], (bytes, str, bytearray, memoryview)):
        return
    got = ", ".join(f"{type(a).__name__} {a!r:.40}" for a in args) or "no argument"
    raise TypeError(
        f"task {index} (0-based, in this call): an executable service's task takes one "
        f"argument, bytes or str, not {got}; encode anything richer yourself (msgpack, "
        "JSON, a struct)"
    )


def check_sizes(payloads: list[bytes], first_index: int = 0) -> list[int]:
    """The payloads' sizes. A task whose packed arguments exceed a frame would make the
    broker drop the connection (and with it every open future): refused here, before
    anything is sent."""
    sizes = list(map(len, payloads))
    if max(sizes, default=0) > p.MAX_ITEM_BYTES:
        i = next(i for i, size in enumerate(sizes) if size > p.MAX_ITEM_BYTES)
        raise PayloadTooLarge(
            f"task {first_index + i} (0-based, in this call): its arguments pack to "
            f"{sizes[i]} bytes, over the {p.MAX_ITEM_BYTES} a task may carry; send big data "
            "once as common data, or pass a path"
        )
    return sizes


def connect(
    ticket: SessionTicket,
) -> tuple[socket.socket, p.FrameDecoder, dict[str, Any], list[list[Any]]]:
    """Connect and say hello: the socket, its decoder, the broker's WELCOME, and the frames
    that came in the same read after it.

    The broker writes WELCOME and, in the same turn, the results a previous client left
    unacknowledged (and ENDED for a session that is over), so one ``recv`` often holds
    them all and the decoder has consumed them all. They go to the reader thread:
    dropped here, they would be lost for good (the broker resends only on the next
    attach) and ``results()`` would wait for them forever."""
    host, _, port = ticket.broker.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
    except OSError as err:
        raise Unavailable(f"cannot reach the HTC broker at {ticket.broker}: {err}") from err
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        p.keep_alive(sock)  # a vanished broker ends the session (LOST), not hangs it
        sock.sendall(p.frame([p.HELLO_CLIENT, ticket.session, ticket.key]))
        decoder = p.FrameDecoder()
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise Unavailable("the HTC broker closed the connection")
            messages = decoder.feed(data)
            for n, message in enumerate(messages):
                if message[0] == p.WELCOME:
                    sock.settimeout(None)
                    return sock, decoder, dict(message[1]), messages[n + 1 :]
                if message[0] == p.ERROR:
                    raise Unavailable(f"the HTC broker refused: {message[1]}")
    except OSError as err:
        sock.close()
        raise Unavailable(f"lost the connection to the HTC broker: {err}") from err
    except BaseException:
        sock.close()
        raise
