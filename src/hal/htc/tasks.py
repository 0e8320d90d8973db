"""``TaskBook``: one session's tasks between submission and result (pure, no I/O).

Events in (``add``, ``take``, ``complete``, ``worker_lost``, ``requeue``, ``withdraw``,
``cancel``), outcomes out (flat ``[id, status, payload, ...]`` lists for the client). The
broker shell owns sockets and calls these; unit tests drive them directly.

Vocabulary:
- *backlog*: tasks waiting for a worker, oldest first (retries go to the front);
- *in flight*: tasks sent to a worker whose result has not come back, per worker, in
  dispatch order (a worker runs its tasks in that order);
- *withdrawn*: a waiting task the client cancelled; it stays in its queue, skipped when
  its turn comes (removing it from the middle of a deque of a million costs too much);
- *suspect*: a task that was in flight on a worker that died. Suspects are sent one at a
  time to a worker with nothing else in flight, so when a worker dies running a suspect
  the blame is exact; after ``max_worker_deaths`` such deaths the task is failed as
  poison instead of killing more workers.

Memory is flat in the number of tasks ever submitted: a finished task leaves nothing
behind, and the per-task retry record exists only for tasks that were retried.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from hal.htc import protocol as p


@dataclass(slots=True)
class TaskCounters:
    submitted: int = 0
    completed: int = 0  # finished OK
    failed: int = 0  # finished with an error (raised, timed out, poison, after retries)
    retried: int = 0
    worker_deaths: int = 0


class TaskBook:
    def __init__(self, *, retries: int = 0, max_worker_deaths: int = 3) -> None:
        self.retries = retries
        self.max_worker_deaths = max_worker_deaths
        self.backlog: deque[tuple[int, bytes]] = deque()
        self.suspects: deque[tuple[int, bytes]] = deque()
        self.in_flight: dict[int, dict[int, bytes]] = {}  # worker -> {task: payload}
        self.isolated: set[int] = set()  # workers running one suspect alone
        self.attempts: dict[int, int] = {}  # task -> errors so far (retried tasks only)
        self.deaths: dict[int, int] = {}  # task -> worker deaths blamed on it
        # ids submitted and not finished: a SUBMIT reusing one is refused (two tasks under
        # one id would share an in-flight entry: one result lost, a retry running the other)
        self.live: set[int] = set()
        self.withdrawn: set[int] = set()  # in backlog or suspects, to be skipped
        self.counters = TaskCounters()
        self.in_flight_count = 0

    # -- queries ----------------------------------------------------------------------
    @property
    def waiting(self) -> int:
        return len(self.backlog) + len(self.suspects) - len(self.withdrawn)

    @property
    def unfinished(self) -> int:
        return self.waiting + self.in_flight_count

    def load(self, worker: int) -> int:
        return len(self.in_flight.get(worker, ()))

    # -- events -----------------------------------------------------------------------
    def add(self, flat: list[Any]) -> None:
        """New tasks from the client: ``[id, payload, id, payload, ...]``."""
        backlog = self.backlog
        for i in range(0, len(flat) - 1, 2):
            backlog.append((flat[i], flat[i + 1]))
        self.live.update(flat[0::2])
        self.counters.submitted += len(flat) // 2

    def take(self, worker: int, limit: int) -> list[Any]:
        """Up to ``limit`` tasks for ``worker`` as a flat ``[id, payload, ...]`` list."""
        flight = self.in_flight.setdefault(worker, {})
        if worker in self.isolated or limit <= 0:
            return []
        if self.withdrawn:
            self._skip_withdrawn()
        if self.suspects:
            if flight:
                return []  # a suspect runs alone; wait for this worker to drain
            task_id, payload = self.suspects.popleft()
            flight[task_id] = payload
            self.isolated.add(worker)
            self.in_flight_count += 1
            return [task_id, payload]
        out: list[Any] = []
        backlog, withdrawn = self.backlog, self.withdrawn
        n = min(limit, len(backlog))
        before = len(flight)
        if withdrawn:  # the slower loop only while some are to be skipped
            while n and backlog:
                task_id, payload = backlog.popleft()
                if task_id in withdrawn:
                    withdrawn.discard(task_id)
                    continue
                flight[task_id] = payload
                out.append(task_id)
                out.append(payload)
                n -= 1
        else:
            for _ in range(n):
                task_id, payload = backlog.popleft()
                flight[task_id] = payload
                out.append(task_id)
                out.append(payload)
        # Not += n: a client that reused an id has one entry for both, and counting two
        # left a result forever missing (its session never ended).
        self.in_flight_count += len(flight) - before
        return out

    def complete(self, worker: int, flat: list[Any]) -> list[Any]:
        """Results from ``worker`` (``[id, status, payload, ...]``); returns the outcomes
        to deliver, in the same flat shape. Results for tasks not in flight on that
        worker (a duplicate, or a task already failed) are dropped: exactly once."""
        flight = self.in_flight.get(worker)
        if flight is None:
            return []
        out: list[Any] = []
        c = self.counters
        for i in range(0, len(flat) - 2, 3):
            task_id = flat[i]
            payload = flight.pop(task_id, None)
            if payload is None:
                continue
            self.in_flight_count -= 1
            status = flat[i + 1]
            if status != p.OK:
                tried = self.attempts.get(task_id, 0)
                if tried < self.retries:
                    self.attempts[task_id] = tried + 1
                    self.backlog.appendleft((task_id, payload))
                    c.retried += 1
                    continue
                c.failed += 1
            else:
                c.completed += 1
            self.live.discard(task_id)
            if self.attempts:
                self.attempts.pop(task_id, None)
            if self.deaths:
                self.deaths.pop(task_id, None)
            out.append(task_id)
            out.append(status)
            out.append(flat[i + 2])
        if not flight:
            self.isolated.discard(worker)
        return out

    def would_poison(self, worker: int) -> bool:
        """Whether ``worker``'s death now would fail its task as poison: it runs one task
        alone, and that task killed ``max_worker_deaths - 1`` workers before."""
        flight = self.in_flight.get(worker)
        if flight is None or len(flight) != 1:
            return False
        (task_id,) = flight
        return self.deaths.get(task_id, 0) + 1 >= self.max_worker_deaths

    def worker_lost(self, worker: int, why: str, advice: str = "") -> list[Any]:
        """``worker`` died or vanished. Its tasks become suspects; a task that was alone
        on it takes the blame. Returns outcomes for tasks failed as poison; their message
        names the death (``why``) and ends with ``advice`` (by default: run it outside
        HAL to see why it crashes)."""
        flight = self.in_flight.pop(worker, {})
        self.isolated.discard(worker)
        if not flight:
            return []
        self.counters.worker_deaths += 1
        self.in_flight_count -= len(flight)
        out: list[Any] = []
        if len(flight) == 1:
            ((task_id, _),) = flight.items()
            deaths = self.deaths.get(task_id, 0) + 1
            if deaths >= self.max_worker_deaths:
                self.live.discard(task_id)
                self.deaths.pop(task_id, None)
                self.attempts.pop(task_id, None)
                self.counters.failed += 1
                workers = "worker that" if deaths == 1 else "workers that"
                message = (
                    f"task {task_id} was running alone on {deaths} {workers} died "
                    f"(last: {why}); it was failed so that it kills no more workers. "
                    + (advice or "Run it outside HAL to see why it crashes the process")
                )
                return [task_id, p.POISON, p.pack(message)]
            self.deaths[task_id] = deaths
        # Behind suspects lost earlier, so a second crash cannot starve the first's.
        self.suspects.extend(flight.items())
        self.counters.retried += len(flight)
        return out

    def requeue(self, worker: int) -> int:
        """Give ``worker``'s tasks back without blaming them (it never could run any: its
        service failed to start). They go first, in their order: a suspect back to the
        suspects, the others to the backlog. Returns how many."""
        flight = self.in_flight.pop(worker, {})
        queue = self.suspects if worker in self.isolated else self.backlog
        self.isolated.discard(worker)
        self.in_flight_count -= len(flight)
        queue.extendleft(reversed(flight.items()))
        return len(flight)

    def withdraw(self, ids: list[Any]) -> list[int]:
        """The client cancels tasks ``ids``: those waiting (no worker holds them) are
        dropped and will never run; returns them. A task in flight is left alone (a worker
        may be running it), and so is one finished or unknown."""
        held = self.in_flight.values()
        out = [
            task_id
            for task_id in dict.fromkeys(ids)  # once each, in order
            if type(task_id) is int
            and task_id in self.live
            and task_id not in self.withdrawn
            and not any(task_id in flight for flight in held)
        ]
        for task_id in out:
            self.live.discard(task_id)
            self.withdrawn.add(task_id)
            self.attempts.pop(task_id, None)
            self.deaths.pop(task_id, None)
        return out

    def _skip_withdrawn(self) -> None:
        """Drop withdrawn tasks from the front of the suspects (each is taken alone, so
        one there must not hold up the rest); the backlog skips its own as it is taken."""
        while self.suspects and self.suspects[0][0] in self.withdrawn:
            self.withdrawn.discard(self.suspects.popleft()[0])

    def cancel(self) -> int:
        """Drop everything not finished; returns how many tasks were dropped."""
        dropped = self.unfinished
        self.backlog.clear()
        self.suspects.clear()
        self.in_flight.clear()
        self.isolated.clear()
        self.attempts.clear()
        self.deaths.clear()
        self.live.clear()
        self.withdrawn.clear()
        self.in_flight_count = 0
        return dropped
