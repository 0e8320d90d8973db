"""``TaskBook``: exactly-once results, retries, worker loss and poison tasks."""

from __future__ import annotations

from hal.htc import protocol as p
from hal.htc.tasks import TaskBook


def tasks(*ids: int) -> list[object]:
    flat: list[object] = []
    for i in ids:
        flat += [i, p.pack([i])]
    return flat


def ok(*ids: int) -> list[object]:
    flat: list[object] = []
    for i in ids:
        flat += [i, p.OK, p.pack(i)]
    return flat


def test_tasks_go_out_in_order_and_each_result_is_delivered_once() -> None:
    book = TaskBook()
    book.add(tasks(1, 2, 3))
    assert book.take(worker=7, limit=2)[::2] == [1, 2]
    assert book.complete(7, ok(1, 2, 2))[::3] == [1, 2]  # the duplicate 2 is dropped
    assert book.unfinished == 1
    assert book.counters.completed == 2


def test_a_result_from_another_worker_is_ignored() -> None:
    book = TaskBook()
    book.add(tasks(1))
    book.take(1, 10)
    assert book.complete(2, ok(1)) == []
    assert book.unfinished == 1


def test_a_failed_task_is_retried_first_then_reported() -> None:
    book = TaskBook(retries=1)
    book.add(tasks(1, 2))
    book.take(1, 1)
    assert book.complete(1, [1, p.FAILED, p.pack("boom")]) == []
    assert book.take(1, 1)[0] == 1  # back at the front of the backlog
    out = book.complete(1, [1, p.FAILED, p.pack("boom")])
    assert out[:2] == [1, p.FAILED]
    assert book.counters.retried == 1 and book.counters.failed == 1
    assert book.attempts == {}  # nothing kept for a finished task


def test_tasks_of_a_dead_worker_are_rerun_one_at_a_time_elsewhere() -> None:
    """A worker dies with a batch in flight: nobody is blamed yet, but the batch's tasks
    become suspects that run alone, so the next death has exactly one culprit."""
    book = TaskBook()
    book.add(tasks(1, 2, 3))
    book.take(1, 3)
    assert book.worker_lost(1, "job 1") == []
    assert book.deaths == {}
    assert book.take(2, 100) == tasks(1)  # one suspect, alone
    assert book.take(2, 100) == []  # nothing else while it runs
    book.complete(2, ok(1))
    assert book.take(2, 100) == tasks(2)


def test_a_task_that_keeps_killing_workers_is_failed_as_poison() -> None:
    book = TaskBook(max_worker_deaths=3)
    book.add(tasks(1, 2))
    book.take(1, 2)
    book.worker_lost(1, "job 1")
    out: list[object] = []
    worker = 2
    while not out:
        flat = book.take(worker, 100)
        if flat[0] == 2:
            book.complete(worker, ok(2))
            continue
        out = book.worker_lost(worker, f"job {worker} on node1")
        worker += 1
    assert out[:2] == [1, p.POISON]
    assert isinstance(out[2], bytes)
    message = p.unpack(out[2])
    assert "3 workers that died" in message and f"job {worker - 1}" in message
    assert book.unfinished == 0 and book.counters.failed == 1 and book.counters.completed == 1


def test_memory_is_flat_a_finished_task_leaves_nothing() -> None:
    book = TaskBook(retries=2)
    for start in range(0, 100_000, 1000):
        book.add(tasks(*range(start, start + 1000)))
        flat = book.take(1, 1000)
        book.complete(1, ok(*flat[::2]))
    assert book.unfinished == 0
    assert not book.in_flight[1] and not book.attempts and not book.deaths
    assert book.counters.completed == 100_000


def test_cancel_drops_everything() -> None:
    book = TaskBook()
    book.add(tasks(1, 2, 3))
    book.take(1, 1)
    assert book.cancel() == 3
    assert book.unfinished == 0


def test_a_withdrawn_task_is_never_taken_and_one_a_worker_holds_is_not_withdrawn() -> None:
    """``future.cancel()``: waiting tasks (queued or suspects) are withdrawn and skipped
    when their turn comes; a task in flight (a worker may be running it), a finished one
    and an unknown id are not, so the client is never told a running task was stopped."""
    book = TaskBook()
    book.add(tasks(1, 2, 3, 4, 5))
    assert book.take(7, 1)[::2] == [1]
    assert book.withdraw([1, 3, 3, 99, "x"]) == [3]
    assert book.withdraw([3]) == []  # once
    assert (book.waiting, book.unfinished) == (3, 4)
    assert book.take(7, 2)[::2] == [2, 4]  # 3 skipped, and the limit still filled
    assert book.complete(7, ok(1, 2, 4))[::3] == [1, 2, 4]
    assert book.withdraw([1]) == []
    book.take(8, 1)
    assert book.worker_lost(8, "gone") == []  # 5 is now a suspect
    assert book.withdraw([5]) == [5]
    assert book.take(9, 10) == [] and book.unfinished == 0 and not book.withdrawn
