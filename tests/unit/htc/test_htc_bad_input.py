"""Bad input to HTC that a unit can show: session options no worker could run, malformed
SUBMIT frames, reused task ids, and a client that sends after it stopped."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

# helpers of the neighbouring tests (pytest puts this directory on sys.path)
from test_broker import connect, ok, open_session, ready_worker, tasks, turn
from test_client_session import scripted_broker

from hal.core.errors import Conflict, InvalidRequest, PayloadTooLarge
from hal.htc import protocol as p
from hal.htc import worker
from hal.htc.broker import Broker, Peer
from hal.htc.client_session import Session as ClientSession
from hal.htc.errors import SessionEnded
from hal.htc.rest import ServiceSpec, SessionOptions, check_options
from hal.htc.session import Session
from hal.htc.tasks import TaskBook


def options(**over: Any) -> SessionOptions:
    base: dict[str, Any] = {"service": ServiceSpec(target="m:f"), "workdir": "/tmp"}
    return SessionOptions(**(base | over))


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"service": ServiceSpec(target="")}, "service.target"),
        ({"service": ServiceSpec(target="module_only")}, "service.target"),
        ({"service": ServiceSpec(kind="exec", argv=[])}, "service.argv"),
        ({"service": ServiceSpec(kind="exec", argv=["./x\x00"])}, "service.argv[0]"),
        ({"name": "a\x00b"}, "name"),
        ({"workdir": "/tmp/\x00"}, "workdir"),
        ({"workdir": "relative"}, "workdir"),
        ({"python": " "}, "python"),
        ({"environment": {"A": "x\x00"}}, "environment.'A'"),
        ({"environment": {"A=B": "x"}}, "environment"),
        ({"environment": {"": "x"}}, "environment"),
        ({"environment": {"A": "x" * (1024 * 1024 + 1)}}, "environment"),
        ({"task_timeout_seconds": 1e10}, "task_timeout_seconds"),  # setitimer overflowed
        ({"task_timeout_seconds": float("inf")}, "task_timeout_seconds"),
        ({"worker_lease_seconds": 1e300}, "worker_lease_seconds"),
        ({"memory_per_worker_bytes": 2**63}, "memory_per_worker_bytes"),
        ({"min_workers": 65}, "min_workers"),  # above the default max_workers, 64
    ],
)
def test_options_no_worker_could_run_are_refused_naming_the_field(
    over: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        check_options(options(**over))
    assert err.value.field == field
    assert err.value.message.startswith(field + ": ")


def test_valid_options_pass() -> None:
    check_options(options())
    check_options(options(service=ServiceSpec(kind="exec", argv=["./pricer", "--fast"])))
    check_options(options(task_timeout_seconds=86400.0, environment={"A": ""}, name="n"))
    check_options(options(min_workers=8, max_workers=8))


async def _submit(flat: Any) -> tuple[Any, list[list[Any]], list[list[Any]]]:
    broker = Broker()
    session = open_session(broker)
    client, transport = connect(broker)
    broker.on_message(client, [p.HELLO_CLIENT, "s1", session.key])
    client.data_received(p.frame([p.SUBMIT, flat]))
    worker = ready_worker(broker, session, job_id=5)
    await turn()
    return session, transport.sent[1:], worker.sent


@pytest.mark.parametrize(
    ("flat", "why"),
    [
        ([1, p.pack([1]), "x", p.pack([2])], "task ids must be integers"),
        ([1, p.pack([1]), 2], "flat list"),
        (7, "flat list"),
        ([1, p.pack([1]), 2**64 - 1, p.pack([2])], "task ids must be integers"),
        ([1, p.pack([1]), 2, "not bytes"], "payloads must be bytes"),
        ([1, p.pack([1]), 1, p.pack([2])], "task ids must be unique"),
    ],
)
def test_a_malformed_submit_queues_none_of_its_tasks_and_says_so(flat: Any, why: str) -> None:
    """A bad id used to queue the tasks before it and then drop the client's connection;
    an id past 2**63 made the next WELCOME unpackable (no reattach)."""
    session, to_client, to_worker = asyncio.run(_submit(flat))
    assert session.book.counters.submitted == 0 and session.book.unfinished == 0
    assert session.next_task_id == 1
    assert len(to_client) == 1 and to_client[0][0] == p.ERROR and why in to_client[0][1]
    assert p.TASKS not in [m[0] for m in to_worker]


def test_a_submit_to_a_closed_session_is_refused_not_dropped() -> None:
    async def main() -> list[list[Any]]:
        broker = Broker()
        session = open_session(broker)
        client, transport = connect(broker)
        broker.on_message(client, [p.HELLO_CLIENT, "s1", session.key])
        broker.on_message(client, [p.SUBMIT, tasks(1)])
        broker.on_message(client, [p.CLOSE])
        broker.on_message(client, [p.SUBMIT, tasks(2)])
        await turn()
        assert session.book.counters.submitted == 1
        return transport.sent[1:]

    sent = asyncio.run(main())
    assert sent == [
        [p.ERROR, "session s1 is CLOSED: it takes no new tasks; none of its 1 tasks was queued"]
    ]


def test_an_id_still_unfinished_is_refused_in_a_later_submit_and_free_once_done() -> None:
    """Two tasks under one id shared an in-flight entry: one result was lost, a retry ran
    the other's payload, and a dead worker's requeue dropped one."""

    async def main() -> tuple[Session, list[list[Any]]]:
        broker = Broker()
        session = open_session(broker)
        client, transport = connect(broker)
        broker.on_message(client, [p.HELLO_CLIENT, "s1", session.key])
        broker.on_message(client, [p.SUBMIT, tasks(7, 8)])
        broker.on_message(client, [p.SUBMIT, tasks(9, 7)])  # 7 still unfinished
        worker = ready_worker(broker, session, job_id=5)
        await turn()
        assert isinstance(session.workers[5].conn, Peer)
        broker.on_message(session.workers[5].conn, [p.RESULTS, 0, ok(7, 8)])
        await turn()
        broker.on_message(client, [p.SUBMIT, tasks(7)])  # finished: the id is free again
        await turn()
        assert worker.sent[-1] == [p.TASKS, tasks(7)]
        return session, transport.sent[1:]

    session, to_client = asyncio.run(main())
    assert to_client[0][0] == p.ERROR and "unique" in to_client[0][1]
    assert "none of its 2 tasks was queued" in to_client[0][1]
    assert session.book.counters.submitted == 3


def test_a_reused_task_id_does_not_leave_the_session_waiting_forever() -> None:
    book = TaskBook()
    book.add([1, b"a", 1, b"b", 2, b"c"])
    flat = book.take(worker=5, limit=10)
    assert book.in_flight_count == 2  # two entries in flight, not three
    book.complete(5, [1, p.OK, p.pack(1), 2, p.OK, p.pack(2)])
    assert book.unfinished == 0
    assert flat[0::2] == [1, 1, 2]


WELCOME = {"session": "s1", "state": "OPEN", "next_task_id": 1, "outstanding": 0}


def test_a_task_too_big_for_a_frame_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(p, "MAX_ITEM_BYTES", 1000)
    monkeypatch.setattr(p, "FRAME_BUDGET", 2500)
    with scripted_broker([[p.WELCOME, WELCOME]]) as (ticket, received, _):
        session = ClientSession(ticket)
        try:
            with pytest.raises(PayloadTooLarge, match=r"task 1 .* over the 1000"):
                session.submit_many([(b"x",), (b"y" * 2000,)])
            session.submit_many([(b"z" * 900,)] * 5)  # 5 tasks: split by size, not lost
        finally:
            session.disconnect()
    submits = [m for m in received if m[0] == p.SUBMIT]
    assert [len(m[1]) // 2 for m in submits] == [2, 2, 1]
    assert [i for m in submits for i in m[1][0::2]] == [1, 2, 3, 4, 5]


def test_tasks_after_close_detach_or_end_are_refused_not_lost() -> None:
    ended = [p.WELCOME, WELCOME], [p.ENDED, "CANCELLED", "cancelled by ann"]
    with scripted_broker(list(ended)) as (ticket, _, _):
        session = ClientSession(ticket)
        try:
            assert session._ended_event.wait(10)
            with pytest.raises(SessionEnded, match="CANCELLED"):
                session.submit(1)  # used to wait forever
            with pytest.raises(SessionEnded):
                next(session.map([1]))
        finally:
            session.disconnect()
    with scripted_broker([[p.WELCOME, WELCOME]]) as (ticket, _, _):
        session = ClientSession(ticket)
        session.disconnect()
        with pytest.raises(Conflict, match=r"disconnected; .*attach\('s1'\)"):
            session.submit(1)  # used to say "Bad file descriptor"
    closed = {**WELCOME, "state": "CLOSED"}
    with scripted_broker([[p.WELCOME, closed]]) as (ticket, received, _):
        session = ClientSession(ticket)
        try:
            with pytest.raises(Conflict, match="is closed: it takes no new tasks"):
                session.submit(1)
        finally:
            session.disconnect()
    assert [m for m in received if m[0] == p.SUBMIT] == []


@pytest.mark.parametrize("option", ["window", "chunk"])
def test_a_map_window_or_chunk_below_1_is_refused(option: str) -> None:
    """``window=0`` left no room to submit and the map waited forever; ``chunk=0`` read
    an empty batch as the end of the items and returned none of their results."""
    with scripted_broker([[p.WELCOME, WELCOME]]) as (ticket, received, _):
        session = ClientSession(ticket)
        try:
            for bad in (0, -1):
                with pytest.raises(InvalidRequest, match=rf"{option}: .*at least 1"):
                    next(session.map([1, 2], **{option: bad}))
        finally:
            session.disconnect()
    assert [m for m in received if m[0] == p.SUBMIT] == []


def test_a_result_too_big_for_a_frame_fails_its_task_and_the_rest_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A result over a frame made the broker drop the worker, and the task ran again until
    it was called poison; now the worker fails that task saying why, and splits the
    other results into frames by size."""
    monkeypatch.setattr(p, "MAX_ITEM_BYTES", 1000)
    monkeypatch.setattr(p, "FRAME_BUDGET", 1500)
    monkeypatch.setattr(worker, "FLUSH_AFTER_S", 3600.0)  # only size splits frames here
    ours, theirs = socket.socketpair()
    with ours, theirs:
        tasks = [1, p.pack([5000]), 2, p.pack([900]), 3, p.pack([900]), 4, p.pack([900])]
        theirs.sendall(p.frame([p.TASKS, tasks]) + p.frame([p.STOP]))
        stream = ours.makefile("rb")
        assert worker.serve(ours, stream, lambda n: b"r" * n, 0.0) == 0
        ours.shutdown(socket.SHUT_WR)
        decoder = p.FrameDecoder()
        frames: list[list[Any]] = []
        while chunk := theirs.recv(1 << 16):
            frames += decoder.feed(chunk)
    flat = [x for f in frames for x in f[2]]
    assert flat[0:2] == [1, p.FAILED] and "over the 1000" in p.unpack(flat[2])
    assert flat[3::3] == [2, 3, 4] and flat[4::3] == [p.OK] * 3
    assert [len(f[2]) // 3 for f in frames] == [3, 1]  # past 1,500 result bytes: sent


def test_big_results_of_one_turn_go_to_the_client_in_frames_it_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Results gathered in one broker turn are sent in chunks of about ``FRAME_BUDGET``
    bytes, each with its own running sequence number (the client acknowledges by it);
    before, one frame could exceed what the client reads and lose the connection."""
    monkeypatch.setattr(p, "FRAME_BUDGET", 1500)

    class Client:
        sent: list[list[Any]] = []

        def send(self, message: list[Any]) -> None:
            self.sent.append(message)

        def close(self) -> None:
            pass

    session = Session(id="s1", user="ann", options=options(), created=0.0)
    session.client = client = Client()
    session.outbox = [x for i in range(1, 5) for x in (i, p.OK, b"r" * 700)]
    session.flush()
    assert [(m[1], m[2][0::3]) for m in client.sent] == [(2, [1, 2]), (4, [3, 4])]
    assert [end for end, _ in session.unacked] == [2, 4] and session.unacked_results == 4
    session.outbox = [5, p.OK, b"small"]
    session.flush()
    assert client.sent[-1][1:] == [5, [5, p.OK, b"small"]]


def test_a_worker_whose_broker_is_gone_says_so_in_a_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A worker job started after its broker went away (or whose connection broke) ended
    with a traceback in the job's log; it says what happened and exits 5."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rc = worker.main(["--broker", f"127.0.0.1:{port}", "--session", "s", "--key", "k"])
    err = capsys.readouterr().err
    assert rc == worker.EXIT_BROKER_LOST
    assert err == f"hal-htc-worker: lost the HTC broker at 127.0.0.1:{port}: Connection refused\n"
