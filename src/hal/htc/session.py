"""``Session``: the broker's in-memory record of one session (tasks, workers, results).

The result *outbox* holds results in chunks (one per delivery) numbered by a running
sequence of results; the client acknowledges the sequence it has received, and only
unacknowledged chunks are kept. When the client reattaches, the unacknowledged chunks are
sent again, so a result is lost neither by a disconnect nor by a reconnect.
"""

from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from hal.htc import protocol as p
from hal.htc.rest import SessionOptions
from hal.htc.tasks import TaskBook

if TYPE_CHECKING:
    from hal.htc.journal import Journal

# Dispatch pauses when this many results wait for the client: a session whose client is
# gone (or slow) must not grow the broker's memory without bound.
MAX_UNACKED_RESULTS = 262_144
# How many tasks a worker may hold (its *window*): sized so that about TARGET_WINDOW_S of
# work is queued on it, from the session's measured task length. Until that length is
# known, a worker holds MIN_WINDOW tasks: a cold session of long tasks must not give them
# all to the first worker that connects (the later ones would idle, and a task a worker
# holds can no longer be withdrawn by ``future.cancel()``).
TARGET_WINDOW_S = 0.004
MIN_WINDOW = 2
MAX_WINDOW = 4096


class Connection(Protocol):
    def send(self, message: list[Any]) -> None: ...
    def close(self) -> None: ...


@dataclass(slots=True, eq=False)
class Worker:
    job_id: int
    session: str
    conn: Connection | None = None  # None while the job is pending
    host: str = ""
    pid: int = 0
    # pending -> loading -> ready -> draining -> exiting. A record stays until the
    # control plane reports its job ended, so every job counts against max_workers
    # (``pool.py``). When its connection ends: "lost" while it ran a task that may be
    # failed as poison (the verdict waits for its job's end state or its restart:
    # ``Broker.on_worker_lost``); "restarting" while its job's keeper starts its
    # process again (``keeper.py``); "exiting" once its job is ending.
    state: str = "pending"
    launched_at: float = 0.0
    ready_at: float = 0.0  # first ready (a restarted process keeps its job's lease)
    last_result_at: float = 0.0
    lost_at: float = 0.0  # when its connection ended (lost, restarting)
    note: str = ""  # what the worker said before it died (its service program's exit)
    keeper: bool = False  # its job starts its process again when a task kills it


@dataclass(slots=True, eq=False)
class Session:
    id: str
    user: str
    options: SessionOptions
    created: float
    key: str = field(default_factory=lambda: secrets.token_hex(16))
    worker_key: str = field(default_factory=lambda: secrets.token_hex(16))
    state: str = "OPEN"
    reason: str = ""
    ended: float | None = None
    book: TaskBook = field(default_factory=TaskBook)
    common: bytes | None = None
    client: Connection | None = None
    # since when no client is attached (clock), None while one is: a session whose client
    # went away without DETACH is ended after the broker's grace (``Broker.reap``)
    clientless_since: float | None = None
    detached: bool = False  # a client detached on purpose: it may run with none, for ever
    workers: dict[int, Worker] = field(default_factory=dict)
    target_workers: int = 0
    outbox: list[Any] = field(default_factory=list)  # results gathered this loop turn
    unacked: deque[tuple[int, list[Any]]] = field(default_factory=deque)
    unacked_results: int = 0
    sent_seq: int = 0
    acked_seq: int = 0
    next_task_id: int = 1
    start_failures: int = 0
    last_activity: float = 0.0
    rate: float = 0.0  # completions per second, smoothed
    _rate_count: int = 0
    _rate_at: float = 0.0
    task_seconds: float = 0.0  # smoothed run time of one task (sets ``window``)
    window: int = MIN_WINDOW  # tasks each of its workers may hold (``set_task_seconds``)
    # a worker returned a task's answer (a value or the service's own error): from then
    # on a service program that dies under a task is the task's doing, not a service that
    # cannot start (``Broker.service_exited``)
    answered: bool = False
    journal: Journal | None = None  # recoverable sessions only (options.journal)
    # left for the next broker at shutdown (``Broker.suspend``): nothing more is recorded,
    # so it takes no client and does not end here (its journal stays to be recovered)
    suspended: bool = False

    @property
    def live(self) -> bool:
        return self.state in ("OPEN", "CLOSED")

    @property
    def survives_client(self) -> bool:
        """Meant to run on without a client: recoverable (journal) or detached on purpose.
        Any other session ends when its client goes (``Broker.reap``, ``CANCEL_SESSION``)."""
        return self.options.journal or self.detached

    @property
    def paused(self) -> bool:
        return self.unacked_results >= MAX_UNACKED_RESULTS

    def flush(self) -> None:
        """Move this turn's results to the unacknowledged chunks and send them."""
        out = self.outbox
        if not out:
            return
        self.outbox = []
        for chunk in by_size(out):
            n = len(chunk) // 3
            self.sent_seq += n
            self.unacked.append((self.sent_seq, chunk))
            self.unacked_results += n
            if self.client is not None:
                self.client.send([p.RESULTS, self.sent_seq, chunk])

    def ack(self, seq: int) -> None:
        seq = min(seq, self.sent_seq)  # a client cannot acknowledge what it was not sent
        unacked = self.unacked
        while unacked and unacked[0][0] <= seq:
            _, chunk = unacked.popleft()
            self.unacked_results -= len(chunk) // 3
        self.acked_seq = max(self.acked_seq, seq)

    def resend(self) -> None:
        if self.client is None:
            return
        for end, chunk in self.unacked:
            self.client.send([p.RESULTS, end, chunk])

    def count_completions(self, n: int, now: float) -> None:
        self._rate_count += n
        elapsed = now - self._rate_at
        if elapsed >= 1.0:
            current = self._rate_count / elapsed
            self.rate = current if self.rate == 0 else 0.5 * self.rate + 0.5 * current
            self._rate_count = 0
            self._rate_at = now

    def set_task_seconds(self, per_task: float) -> None:
        """A measured run time of one task: smoothed into ``task_seconds``, which sets the
        window of every worker of the session, those that join later included."""
        s = self.task_seconds
        self.task_seconds = per_task if s == 0 else 0.7 * s + 0.3 * per_task
        window = int(TARGET_WINDOW_S / max(self.task_seconds, 1e-7))
        self.window = max(MIN_WINDOW, min(MAX_WINDOW, window))

    def decay_rate(self, now: float) -> None:
        if now - self._rate_at > 2.0:
            self.count_completions(0, now)


def by_size(out: list[Any]) -> list[list[Any]]:
    """``(task_id, status, payload)`` triples in chunks a client reads (``frame_slices``):
    many big results of one turn must not make a frame it refuses (it would drop the
    connection). ``out`` itself, unsplit, in the usual case."""
    if sum(map(len, islice(out, 2, None, 3))) <= p.FRAME_BUDGET:
        return [out]
    runs = p.frame_slices([len(payload) for payload in out[2::3]], len(out))
    return [out[3 * start : 3 * end] for start, end in runs]
