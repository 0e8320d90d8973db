"""A standby waits for the server lock in a session of its own (``LockWaiter``): the lock
is its the moment the holder's session ends, without a poll's delay; a cancelled wait and
a wait whose session is ended answer None and hold nothing; after an outage the leader
takes its lock again first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy import text

from hal.core.errors import Conflict
from hal.state.server_lock import LockWaiter, ServerLock
from hal.state.store import SqlStateStore

# a session waiting for an advisory lock on this test's database (not another test's)
WAITING = (
    "locktype = 'advisory' AND NOT granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


class _Wait:
    """``waiter.wait`` on a thread: what it answered, and when."""

    def __init__(self, waiter: LockWaiter, grace: float = 0.0) -> None:
        self.answer: ServerLock | None = None
        self.at = 0.0
        self.thread = threading.Thread(target=self._run, args=(waiter.wait, grace))
        self.thread.start()

    def _run(self, wait: Callable[[float], ServerLock | None], grace: float) -> None:
        self.answer = wait(grace)
        self.at = time.monotonic()


def _waiting(store: SqlStateStore) -> int:
    """Sessions waiting for an advisory lock, as PostgreSQL sees them."""
    with store.engine.connect() as conn:
        return int(
            conn.execute(text(f"SELECT count(*) FROM pg_locks WHERE {WAITING}")).scalar_one()
        )


def _until(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_the_lock_is_granted_when_the_holder_lets_go_and_not_before(pg_url: str) -> None:
    store = SqlStateStore(pg_url)
    store.migrate()
    holder = ServerLock.take(store)
    wait = _Wait(LockWaiter(store))
    _until(lambda: _waiting(store) == 1)
    time.sleep(0.5)
    assert wait.thread.is_alive()  # held by the other: still waiting
    released = time.monotonic()
    holder.release()
    wait.thread.join(10)
    assert wait.answer is not None and wait.at >= released
    try:
        try:
            ServerLock.take(store)
            raise AssertionError("the lock was not the waiter's")
        except Conflict:
            pass
    finally:
        wait.answer.release()
    ServerLock.take(store).release()  # free again
    store.close()


def test_a_cancelled_wait_and_an_ended_session_hold_nothing(pg_url: str) -> None:
    store = SqlStateStore(pg_url)
    store.migrate()
    holder = ServerLock.take(store)
    waiter = LockWaiter(store)
    wait = _Wait(waiter)
    _until(lambda: _waiting(store) == 1)
    waiter.cancel()
    wait.thread.join(10)
    assert not wait.thread.is_alive() and wait.answer is None
    assert _waiting(store) == 0

    # a session ended by someone else (a new leader ends every other server's sessions)
    ended = _Wait(LockWaiter(store))
    _until(lambda: _waiting(store) == 1)
    with store.engine.begin() as conn:
        conn.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_locks WHERE {WAITING}"))
    ended.thread.join(10)
    assert not ended.thread.is_alive() and ended.answer is None
    holder.release()
    ServerLock.take(store).release()  # nobody holds it
    store.close()


def test_after_an_outage_the_leader_takes_its_lock_again_before_the_standby_asks(
    pg_url: str,
) -> None:
    """A wait with a grace (a standby's first wait after its session ended, as in a
    database restart) asks only after it: a leader that takes its lock again within it
    keeps it, and the standby waits for it as before."""
    store = SqlStateStore(pg_url)
    store.migrate()
    wait = _Wait(LockWaiter(store), grace=2.0)
    time.sleep(0.5)
    leader = ServerLock.take(store)  # the leader's lease keeper, within the grace
    _until(lambda: _waiting(store) == 1)  # then the standby asks, and waits
    assert wait.thread.is_alive()
    leader.release()
    wait.thread.join(10)
    assert wait.answer is not None
    wait.answer.release()
    store.close()
