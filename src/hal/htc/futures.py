"""Where results land in the client: futures (one per task) and streams (``map``)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from hal.htc import protocol as p
from hal.htc.errors import TaskError, error_for


class Sink(Protocol):
    """Receives results on the client's reader thread. ``deliver`` runs once per result
    and must be cheap; ``wake`` runs once per received frame for each sink it touched."""

    def deliver(self, task_id: int, status: int, payload: bytes) -> None: ...
    def fail(self, error: BaseException) -> None: ...
    def wake(self) -> None: ...


class TaskFuture(concurrent.futures.Future[Any]):
    """The result of one task; ``task_id`` names it to the broker (and after a reattach).

    ``cancel()`` asks the broker to withdraw the task and waits for its answer: True when
    no worker held the task (it will never run). False when a worker holds it (it may be
    running: ``concurrent.futures`` says False for a running future too), when it has
    finished, or when the broker cannot answer (the session ended, this client detached,
    or the call comes from a done-callback, which runs on the thread that reads answers).
    """

    def __init__(self, task_id: int, withdraw: Callable[[TaskFuture], None] | None = None) -> None:
        super().__init__()
        self.task_id = task_id
        self._withdraw = withdraw

    def cancel(self) -> bool:
        if not self.done() and self._withdraw is not None:
            self._withdraw(self)  # returns once the broker answered (or cannot)
        return self.cancelled()

    def withdrawn(self) -> None:
        """The broker withdrew the task: it never runs, and this future is cancelled."""
        super().cancel()

    def deliver(self, task_id: int, status: int, payload: bytes) -> None:
        try:
            if status == p.OK:
                self.set_result(p.unpack(payload))
            else:
                self.set_exception(error_for(task_id, status, p.unpack(payload)))
        except concurrent.futures.InvalidStateError:
            pass  # the caller cancelled this future; its result has nowhere to go

    def fail(self, error: BaseException) -> None:
        if not self.done():
            self.set_exception(error)

    def wake(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class TaskResult:
    """A result read from a stream: ``value`` when it worked, else ``error``."""

    task_id: int
    value: Any = None
    error: TaskError | None = None

    @staticmethod
    def decode(task_id: int, status: int, payload: bytes) -> TaskResult:
        if status == p.OK:
            return TaskResult(task_id, p.unpack(payload))
        return TaskResult(task_id, None, error_for(task_id, status, p.unpack(payload)))


class ResultStream:
    """Results queued for one consumer (a ``map`` call, or orphans after a reattach)."""

    def __init__(self) -> None:
        self.done: deque[tuple[int, int, bytes]] = deque()
        self.cond = threading.Condition()

    def deliver(self, task_id: int, status: int, payload: bytes) -> None:
        self.done.append((task_id, status, payload))  # deque.append is thread-safe

    def fail(self, error: BaseException) -> None:
        self.wake()

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()


def as_completed(
    futures: Iterable[concurrent.futures.Future[Any]], timeout: float | None = None
) -> Iterator[concurrent.futures.Future[Any]]:
    """Futures in the order they finish (``concurrent.futures.as_completed``)."""
    return concurrent.futures.as_completed(list(futures), timeout)
