"""The journal of a recoverable session: what a restarted broker rebuilds from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.htc import journal
from hal.htc import protocol as p
from hal.htc.rest import ServiceSpec, SessionOptions
from hal.htc.session import Session
from hal.htc.tasks import TaskBook


def new_session() -> Session:
    options = SessionOptions(service=ServiceSpec(target="m:f"), retries=2, journal=True)
    return Session(id="s1", user="ann", options=options, created=5.0, book=TaskBook())


def test_unfinished_tasks_are_queued_again_and_unacked_outcomes_kept(tmp_path: Path) -> None:
    s = new_session()
    j = journal.create(str(tmp_path), s)
    j.append(["T", [1, b"a", 2, b"b", 3, b"c"]])
    j.append(["M", b"common"])
    j.append(["R", [2, p.OK, b"B", 1, p.FAILED, b"oops"]])
    j.append(["A", 1])
    j.append(["T", [4, b"d"]])
    j.close()
    ((back, file),) = journal.recover(str(tmp_path), now=9.0)
    file.close()
    assert (back.id, back.user, back.key, back.worker_key) == ("s1", "ann", s.key, s.worker_key)
    assert back.options.retries == 2 and back.state == "OPEN" and back.common == b"common"
    assert list(back.book.backlog) == [(3, b"c"), (4, b"d")]  # 1 and 2 are not re-run
    assert back.book.live == {3, 4}  # ids a SUBMIT may not reuse while unfinished
    c = back.book.counters
    assert (c.submitted, c.completed, c.failed) == (4, 1, 1)
    assert back.next_task_id == 5
    assert (back.sent_seq, back.acked_seq, back.unacked_results) == (2, 1, 1)
    assert list(back.unacked) == [(2, [1, p.FAILED, b"oops"])]


def test_a_torn_tail_is_dropped_and_appending_goes_on_after_it(tmp_path: Path) -> None:
    s = new_session()
    j = journal.create(str(tmp_path), s)
    j.append(["T", [1, b"a"]])
    j.append(["C"])
    j.close()
    path = tmp_path / "s1.journal"
    with path.open("ab") as f:
        f.write(p.frame(["T", [2, b"b"]])[:-3])  # a broker killed mid-write
    ((back, file),) = journal.recover(str(tmp_path), now=0.0)
    assert back.state == "CLOSED" and list(back.book.backlog) == [(1, b"a")]
    file.append(["R", [1, p.OK, b"A"]])
    file.close()
    ((again, file),) = journal.recover(str(tmp_path), now=0.0)
    file.remove()
    assert not again.book.backlog and again.book.counters.completed == 1
    assert not path.exists()


def test_the_default_directory_is_next_to_a_sqlite_database(tmp_path: Path) -> None:
    assert journal.default_dir(f"sqlite:///{tmp_path}/hal.db") == str(tmp_path / "htc-journal")
    assert journal.default_dir("postgresql://h/db") == ""


def test_unacked_outcomes_are_restored_in_frames_a_client_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Restored results are resent in chunks of at most a frame's budget, as ``flush``
    sends them: one chunk of them all could exceed what the client reads, and every
    reattach would then fail the same way."""
    monkeypatch.setattr(p, "FRAME_BUDGET", 1000)
    s = new_session()
    j = journal.create(str(tmp_path), s)
    j.append(["T", [x for i in range(1, 7) for x in (i, b"x")]])
    for i in range(1, 7):
        j.append(["R", [i, p.OK, bytes(400)]])
    j.append(["A", 1])
    j.close()
    ((back, file),) = journal.recover(str(tmp_path), now=0.0)
    file.close()
    ends = [end for end, _ in back.unacked]
    assert ends == [3, 5, 6]  # 2 results of 400 bytes per 1,000-byte frame, after the ack
    assert all(sum(len(x) for x in chunk[2::3]) <= 1000 for _, chunk in back.unacked)
    assert [chunk[0::3] for _, chunk in back.unacked] == [[2, 3], [4, 5], [6]]
    assert back.unacked_results == 5


def test_a_cancelled_task_is_not_queued_again(tmp_path: Path) -> None:
    """A task the client was told is cancelled (withdrawn before any worker held it)
    never runs, also after the broker restarts."""
    s = new_session()
    j = journal.create(str(tmp_path), s)
    j.append(["T", [1, b"a", 2, b"b", 3, b"c"]])
    j.append(["X", [2]])
    j.close()
    ((back, file),) = journal.recover(str(tmp_path), now=0.0)
    file.close()
    assert list(back.book.backlog) == [(1, b"a"), (3, b"c")]
    assert back.book.live == {1, 3}
