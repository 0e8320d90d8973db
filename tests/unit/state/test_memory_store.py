"""The memory store (``hal.state.memory_store``) passes the ``StateStore`` conformance
suite that SQLite and PostgreSQL pass (tests/integration/state/test_store_conformance.py),
serialises its writers as SQLite does, and refuses what only SQL can do."""

from __future__ import annotations

import threading

import pytest

from hal.state.memory_store import MemoryStateStore
from hal.state.store import sql_store, sql_transaction
from hal.testing.store_conformance import CASES, Case, case_name


@pytest.mark.parametrize("case", CASES, ids=case_name)
def test_memory_store_conforms(case: Case) -> None:
    store = MemoryStateStore()
    case(lambda: store)  # opened again: the same object, whose data stays


def test_a_second_transaction_on_the_same_thread_is_refused_at_once() -> None:
    """On SQLite a transaction opened inside another on the same thread waits for the
    outer one for ever (until the busy timeout): here it is a bug that raises, and the
    outer transaction still commits."""
    store = MemoryStateStore()
    with store.transaction() as tx:
        assert tx.reserve_job_ids(2) == 1
        with pytest.raises(RuntimeError, match="open on this thread already"):
            store.transaction().__enter__()
    with store.transaction() as tx:
        assert tx.reserve_job_ids(1) == 3


def test_a_transaction_on_another_thread_waits_for_the_open_one() -> None:
    """Two writers, as the server's database thread and a command's: the second begins
    once the first has committed, so their job ids never overlap."""
    store = MemoryStateStore()
    trying, done = threading.Event(), threading.Event()
    got: list[int] = []

    def second() -> None:
        trying.set()
        with store.transaction() as tx:
            got.append(tx.reserve_job_ids(5))
        done.set()

    with store.transaction() as tx:
        assert tx.reserve_job_ids(10) == 1
        other = threading.Thread(target=second)
        other.start()
        trying.wait()
        assert not done.wait(0.2)  # (it cannot begin while this one is open)
    other.join()
    assert got == [11]


def test_what_only_sql_keeps_says_so_over_the_memory_store() -> None:
    """Crontabs, artifacts and retention keep SQL tables of their own: over the memory
    store they fail with what to do, not an AttributeError deep inside."""
    store = MemoryStateStore()
    with pytest.raises(TypeError, match="build it over SQLite"):
        sql_store(store)
    with store.transaction() as tx, pytest.raises(TypeError, match="over SQLite"):
        sql_transaction(tx)
