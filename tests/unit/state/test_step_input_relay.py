"""srun's stdin on the server (``hal.state.step_input``): what it holds is bounded from
the slowest task's place on (srun waits, nothing is lost), each node gets every byte
once per agent session, from its slowest task's place again when its agent registers
anew, and tasks that read no more hold nothing back."""

from __future__ import annotations

import base64
import itertools

from hal.state.step_input import CHUNK_BYTES, RELAY_BYTES, InputRelay, readers
from hal.wire.agent import StepInput


def relay() -> InputRelay:
    return InputRelay(7, 1, 0, {"n1": (0,), "n2": (1, 2)})


def joined(pushed: list[StepInput]) -> tuple[int, bytes, bool]:
    """(first offset, the bytes, whether the end came) of consecutive pushes."""
    data = b"".join(base64.b64decode(p.data_b64) for p in pushed)
    for before, after in itertools.pairwise(pushed):
        assert after.offset == before.offset + len(base64.b64decode(before.data_b64))
    return pushed[0].offset, data, any(p.eof for p in pushed)


def test_readers_are_every_rank_or_the_one_named() -> None:
    nodes, ranks = ("n1", "n2"), [(0, 1), (2, 3)]
    assert readers(nodes, ranks, None) == {"n1": (0, 1), "n2": (2, 3)}
    assert readers(nodes, ranks, 2) == {"n2": (2,)}  # srun -i 2: n1 gets nothing


def test_bytes_go_to_each_node_once_in_chunks_and_a_resend_is_skipped() -> None:
    r = relay()
    assert r.take(0, b"abc", eof=False) == 3
    assert r.take(1, b"bcdef", eof=True) == 6  # (srun sent again from 1: "bc" skipped)
    for node in ("n1", "n2"):
        assert joined(r.pushes(node)) == (0, b"abcdef", True)
        assert r.pushes(node) == []  # (once per session)
    big = InputRelay(7, 1, 0, {"n1": (0,)})
    big.take(0, b"x" * (CHUNK_BYTES + 1), eof=False)
    assert [len(base64.b64decode(p.data_b64)) for p in big.pushes("n1")] == [CHUNK_BYTES, 1]


def test_the_end_alone_comes_after_the_bytes() -> None:
    r = relay()
    r.take(0, b"ab", eof=False)
    assert joined(r.pushes("n1")) == (0, b"ab", False)
    assert r.take(2, b"", eof=True) == 2
    (end,) = r.pushes("n1")
    assert (end.offset, end.data_b64, end.eof) == (2, "", True)


def test_srun_waits_while_the_slowest_task_holds_the_buffer() -> None:
    """Backpressure: bytes past ``RELAY_BYTES`` from the slowest task's place are not
    taken (srun sends them again); a task's progress makes room."""
    r = relay()
    assert r.take(0, b"y" * (RELAY_BYTES + 10), eof=False) == RELAY_BYTES
    r.progress("n1", 0, 100, closed=False)
    r.progress("n2", 1, 5000, closed=False)
    r.progress("n2", 2, 50, closed=False)
    assert r.base == 50 and r.space() == 50  # (rank 2 is the slowest)
    assert r.take(RELAY_BYTES, b"y" * 100, eof=False) == RELAY_BYTES + 50


def test_tasks_that_read_no_more_hold_nothing_back() -> None:
    r = relay()
    r.take(0, b"z" * 10, eof=False)
    r.progress("n1", 0, 0, closed=True)  # (ended, or closed its stdin)
    r.node_ended("n2")
    assert r.done and r.data == b""
    assert r.take(10, b"more", eof=True) == 14  # (taken and dropped: srun is told to stop)


def test_an_agent_registering_again_gets_all_from_its_slowest_task() -> None:
    """Its instructions of the session before are dropped with it; its input file skips
    what it has."""
    r = relay()
    r.take(0, b"0123456789", eof=True)
    r.pushes("n2")
    r.progress("n2", 1, 8, closed=False)
    r.progress("n2", 2, 4, closed=False)
    r.registered("n2")
    assert joined(r.pushes("n2")) == (4, b"456789", True)


def test_a_relay_taken_up_by_a_restarted_server_sends_srun_back_to_what_it_kept() -> None:
    """The old server had bytes 0..10 and had given every task 0..4 (srun kept 4..);
    the new one places the relay at srun's ``kept``, sends srun back there, and the
    nodes get all from it again (their input files skip what they have)."""
    r = relay()
    r.placed = False
    assert r.take(0, b"", eof=False) == 0 and not r.placed  # (a resize alone: no kept)
    assert r.pushes("n1") == []
    assert r.take(10, b"abc", eof=False, kept=4) == 4  # (back to 4: srun sends again)
    assert (r.placed, r.base, r.data) == (True, 4, b"")
    assert r.take(4, b"456789abc", eof=True, kept=4) == 13
    for node in ("n1", "n2"):
        assert joined(r.pushes(node)) == (4, b"456789abc", True)
