"""Bad input to HTC that a unit can show: session options no worker could run, malformed
SUBMIT frames, reused task ids, and a client that sends after it stopped."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

# helpers of the neighbouring tests (pytest puts this directory on sys.path)
from test_broker import connect, ok, open_session, ready_worker, tasks, turn
from test_client_session import scripted_broker

from hal.core.errors import Conflict, InvalidRequest, PayloadTooLarge
from hal.htc import HtcClient, worker
from hal.htc import protocol as p
from hal.htc.broker import Broker, Peer
from hal.htc.client_session import Session as ClientSession
from hal.htc.errors import SessionEnded, TaskFailed
from hal.htc.rest import ServiceSpec, SessionOptions, SessionTicket, check_options
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


def test_a_worker_whose_broker_is_gone_says_so_in_a_line() -> None:
    """A worker job started after its broker went away (or whose connection broke) ended
    with a traceback in the job's log; it says what happened and exits 5."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["--broker", f"127.0.0.1:{port}", "--session", "s", "--key", "k"]
    # the job's command, keeper and all (a subprocess: the keeper forks)
    done = subprocess.run(
        [sys.executable, "-m", "hal.htc.worker", *argv],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert done.returncode == worker.EXIT_BROKER_LOST  # said: no restart
    assert (
        done.stderr
        == f"hal-htc-worker: lost the HTC broker at 127.0.0.1:{port}: Connection refused\n"
    )


EXEC_WELCOME = {**WELCOME, "service_kind": "exec"}


def test_an_executables_task_argument_that_is_not_bytes_or_str_is_refused_at_submit() -> None:
    """``s.submit(5)`` on an executable's session ran the program on 5 zero bytes
    (``bytes(5)``), a list of ints became bytes, and two arguments failed on the worker
    naming an internal class. Refused before anything is sent."""
    with scripted_broker([[p.WELCOME, EXEC_WELCOME]]) as (ticket, received, _):
        session = ClientSession(ticket)
        try:
            for args in [(5,), ([104, 105],), ({"a": 1},), (b"a", b"b"), ()]:
                with pytest.raises(TypeError, match=r"task 0 .*one argument, bytes or str"):
                    session.submit(*args)
            with pytest.raises(TypeError, match=r"task 1 .*bytes or str, not int 7"):
                session.map([b"fine", 7])
                next(session.map([b"fine", 7]))
            session.submit("text")
            session.submit_many([(b"bytes",)])
        finally:
            session.disconnect()
    assert [m[1] for m in received if m[0] == p.SUBMIT] == [
        [1, p.pack(["text"])],
        [2, p.pack([b"bytes"])],
    ]


@pytest.mark.parametrize("items", [["ab"], [1, 2], [(1,), b"x"]])
def test_submit_many_refuses_items_that_are_not_argument_tuples(items: list[Any]) -> None:
    """``submit_many(["ab"])`` called the service with ("a", "b"); ``[1, 2]`` gave
    "'int' object is not iterable"."""
    with scripted_broker([[p.WELCOME, WELCOME]]) as (ticket, received, _):
        session = ClientSession(ticket)
        try:
            with pytest.raises(TypeError, match=r"each item must be a tuple \(or list\) of"):
                session.submit_many(items)
        finally:
            session.disconnect()
    assert [m for m in received if m[0] == p.SUBMIT] == []


def test_a_star_map_refuses_items_that_are_not_argument_tuples() -> None:
    with scripted_broker([[p.WELCOME, WELCOME]]) as (ticket, received, _):
        session = ClientSession(ticket)
        try:
            with pytest.raises(TypeError, match=r"item 1 is str 'ab'; each item must be a tuple"):
                list(session.map([(1,), "ab"], star=True))
        finally:
            session.disconnect()
    assert [m for m in received if m[0] == p.SUBMIT] == []


def test_close_and_cancel_after_detach_say_to_reattach() -> None:
    """They failed with "lost the connection to the HTC broker: [Errno 9] Bad file
    descriptor" (``Unavailable``)."""
    replies = [[p.WELCOME, WELCOME], [p.DETACHED]]
    with scripted_broker(replies) as (ticket, received, _):
        session = ClientSession(ticket)
        session.detach()
        session.detach()  # once is enough: no error
        with pytest.raises(Conflict, match=r"is detached; to close the session, reattach"):
            session.close()
        with pytest.raises(Conflict, match=r"is detached; to cancel .*HtcClient\(\)\.cancel"):
            session.cancel()
    assert [m[0] for m in received] == [p.HELLO_CLIENT, p.DETACH]
    with scripted_broker([[p.WELCOME, WELCOME]]) as (ticket, _, _):
        session = ClientSession(ticket)
        results = session.map([1])  # read only after the disconnect
        session.disconnect()
        with pytest.raises(Conflict, match="is disconnected"):
            session.close()
        with pytest.raises(Conflict, match="is disconnected"):
            session.detach()
        with pytest.raises(Conflict, match="is disconnected; to send more tasks, reattach"):
            next(results)


def test_a_second_results_call_does_not_wait_for_results_already_delivered() -> None:
    """Each call counted down from ``outstanding_at_attach`` again: the second waited
    for results the first had yielded (a TimeoutError, or for ever)."""
    welcome = {**WELCOME, "outstanding": 2, "next_task_id": 9}  # 6 and 7: an earlier client's
    resent = [p.RESULTS, 2, [6, p.OK, p.pack(60), 7, p.OK, p.pack(70)]]
    with scripted_broker([[p.WELCOME, welcome], resent]) as (ticket, _, _):
        session = ClientSession(ticket)
        try:
            first = session.results(timeout=10)
            assert next(first).value == 60
            assert [r.value for r in session.results(timeout=1)] == [70]  # the rest
            assert list(session.results(timeout=1)) == []
            assert list(first) == []
        finally:
            session.disconnect()


def answering_broker(stop: threading.Event, failed: str = "") -> tuple[SessionTicket, list[Any]]:
    """A broker that answers each SUBMIT with the result of its first task only (the
    others keep running; ``failed``: it failed so) and each CANCEL with every id asked
    for, and records what it receives."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[Any] = []

    def serve() -> None:
        conn, _ = listener.accept()
        listener.close()
        seq = 0
        with conn, conn.makefile("rb") as stream:
            p.read_frame(stream)
            conn.sendall(p.frame([p.WELCOME, WELCOME]))
            while (message := p.read_frame(stream)) is not None:
                received.append(message)
                if message[0] == p.SUBMIT:
                    seq += 1
                    first = message[1][0]
                    status, value = (p.FAILED, failed) if failed else (p.OK, first)
                    conn.sendall(p.frame([p.RESULTS, seq, [first, status, p.pack(value)]]))
                elif message[0] == p.CANCEL:
                    conn.sendall(p.frame([p.CANCEL, message[1]]))
                    stop.set()

    threading.Thread(target=serve, daemon=True).start()
    port = listener.getsockname()[1]
    return SessionTicket(session="s1", broker=f"127.0.0.1:{port}", key="k"), received


@pytest.mark.parametrize("leave", ["break", "close"])
def test_leaving_a_map_early_withdraws_the_tasks_it_sent(leave: str) -> None:
    """A ``break`` out of a map left its tasks running, and the ``with`` block's close
    waited for all of them (``Executor.map`` cancels its pending futures when its
    generator is closed). The map now withdraws those not finished, and forgets them
    once the broker has answered."""
    stop = threading.Event()
    ticket, received = answering_broker(stop)
    session = ClientSession(ticket)
    try:
        if leave == "break":
            for value in session.map(range(10)):
                assert value == 1
                break
        else:
            results = session.map(range(10))
            assert next(results) == 1
            results.close()  # type: ignore[attr-defined]  # (a generator)
        assert stop.wait(10)
        deadline = time.monotonic() + 10
        while session._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert session._pending == {}
    finally:
        session.disconnect()
    cancels = [m[1] for m in received if m[0] == p.CANCEL]
    assert cancels == [list(range(2, 11))]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_map_that_raises_a_tasks_error_withdraws_the_rest(ordered: bool) -> None:
    """One failure in an unordered map left 65,536 tasks (its window) running."""
    stop = threading.Event()
    ticket, received = answering_broker(stop, failed="ValueError: bad")
    session = ClientSession(ticket)
    try:
        with pytest.raises(TaskFailed, match="ValueError: bad"):
            list(session.map(range(5), ordered=ordered))
        assert stop.wait(10)
    finally:
        session.disconnect()
    assert [m[1] for m in received if m[0] == p.CANCEL] == [[2, 3, 4, 5]]


def test_a_map_checks_its_options_when_called_not_when_first_read() -> None:
    with scripted_broker([[p.WELCOME, WELCOME]]) as (ticket, _, _):
        session = ClientSession(ticket)
        try:
            with pytest.raises(InvalidRequest, match="window: 0"):
                session.map([1], window=0)  # not iterated
        finally:
            session.disconnect()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_workers": 0}, "max_workers: 0: input should be greater than or equal to 1"),
        ({"priority": -1}, "priority: -1: input should be greater than or equal to 1"),
        ({"retries": -1}, "retries: -1: input should be greater than or equal to 0"),
        ({"cpus_per_worker": 0}, "cpus_per_worker: 0: input should be greater than"),
        ({"task_timeout": 0}, "task_timeout: 0: input should be greater than 0"),
        ({"memory_per_worker": 0}, "memory_per_worker: 0: input should be greater than"),
        ({"environment": {"A": 1}}, "environment.A: 1: input should be a valid string"),
    ],
)
def test_options_pydantic_refuses_raise_invalid_request_naming_the_parameter(
    options: dict[str, Any], message: str
) -> None:
    """They raised pydantic's ``ValidationError`` (with a link to its docs), which code
    catching ``HalError`` missed, while the server's own checks raise ``InvalidRequest``.
    Refused before any request (the URL here has no server)."""
    with HtcClient("http://127.0.0.1:9", "t") as hc, pytest.raises(InvalidRequest) as err:
        hc.open_session("m:f", **options)
    assert err.value.message.startswith(message)
    assert not isinstance(err.value.__cause__, ValidationError)


@pytest.mark.parametrize("service", [123, None, b"m:f", ["./pricer", 1]])
def test_a_service_that_is_neither_a_function_nor_an_argv_is_refused_clearly(
    service: Any,
) -> None:
    """``open_session(123)`` said "'int' object is not iterable"."""
    with (
        HtcClient("http://127.0.0.1:9", "t") as hc,
        pytest.raises(InvalidRequest, match=r"^service: .*'package\.module:function'"),
    ):
        hc.open_session(service)


@pytest.mark.parametrize(("make", "why"), [("", "does not exist"), ("file", "is not a directory")])
def test_a_workdir_this_host_cannot_enter_is_refused_before_the_session_opens(
    tmp_path: Path, make: str, why: str
) -> None:
    """The session opened, and its workers ran the service in /tmp without a word (their
    job's "couldn't chdir" line went to ``worker_output``, /dev/null). Refused before any
    request (the URL here has no server), naming the path and what to do."""
    path = tmp_path / "nowhere"
    if make:
        path.write_text("")
    with HtcClient("http://127.0.0.1:9", "t") as hc, pytest.raises(InvalidRequest) as err:
        hc.open_session("m:f", workdir=str(path))
    assert err.value.field == "workdir"
    assert err.value.message == (
        f"workdir: {str(path)!r} {why} on this host ({socket.gethostname()}); the workers "
        "run the service there: create it, or pass workdir= a directory the worker nodes "
        "share"
    )
