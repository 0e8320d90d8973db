"""The broker's connection handling, driven message by message over fake transports.

Each test runs inside ``asyncio.run`` (the broker batches work with ``call_soon``) and
lets one loop turn pass with ``turn()`` where the broker would flush.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from hal.htc import broker as broker_module
from hal.htc import journal, worker
from hal.htc import protocol as p
from hal.htc.broker import Broker, Peer
from hal.htc.rest import ServiceSpec, SessionOptions, WorkerSync, WorkerSyncReply
from hal.htc.session import Session, Worker
from hal.htc.tasks import TaskBook


class FakeTransport:
    """What ``Peer`` needs of an asyncio transport; keeps the frames written to it."""

    def __init__(self) -> None:
        self.decoder = p.FrameDecoder()
        self.sent: list[list[Any]] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent += self.decoder.feed(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return None

    def kinds(self) -> list[int]:
        return [m[0] for m in self.sent]


def connect(broker: Broker) -> tuple[Peer, FakeTransport]:
    peer, transport = Peer(broker), FakeTransport()
    peer.connection_made(transport)  # type: ignore[arg-type]  # duck-typed transport
    return peer, transport


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def tasks(*ids: int) -> list[Any]:
    flat: list[Any] = []
    for i in ids:
        flat += [i, p.pack([i])]
    return flat


def ok(*ids: int) -> list[Any]:
    flat: list[Any] = []
    for i in ids:
        flat += [i, p.OK, p.pack(i)]
    return flat


def open_session(broker: Broker, *, journal_dir: str = "") -> Session:
    options = SessionOptions(service=ServiceSpec(target="m:f"), journal=bool(journal_dir))
    session = Session(id="s1", user="ann", options=options, created=0.0, book=TaskBook())
    if journal_dir:
        session.journal = journal.create(journal_dir, session)
    broker.sessions[session.id] = session
    return session


def attach_client(broker: Broker, session: Session) -> tuple[Peer, FakeTransport]:
    """A client connected and said HELLO to ``session``."""
    peer, transport = connect(broker)
    broker.on_message(peer, [p.HELLO_CLIENT, session.id, session.key])
    return peer, transport


def ready_worker(broker: Broker, session: Session, job_id: int) -> FakeTransport:
    peer, transport = connect(broker)
    broker.on_message(peer, [p.HELLO_WORKER, session.id, session.worker_key, job_id, "h", 1])
    broker.on_message(peer, [p.WELCOME, 1])
    return transport


def test_a_reattach_resends_unacked_results_right_after_the_welcome(tmp_path: Path) -> None:
    """A session reopened from its journal with results the killed broker's client never
    acknowledged: the reattaching client gets WELCOME and those results in the same turn
    (so its first read may hold both: see test_client_session), counted in
    ``outstanding``."""

    async def main() -> None:
        options = SessionOptions(service=ServiceSpec(target="m:f"), journal=True)
        old = Session(id="s1", user="ann", options=options, created=0.0, book=TaskBook())
        file = journal.create(str(tmp_path), old)
        file.append(["T", tasks(1, 2, 3, 4)])
        file.append(["R", ok(1, 2, 3)])
        file.append(["A", 1])
        file.close()
        broker = Broker(journal_dir=str(tmp_path))
        assert broker.recover() == ["s1"]
        await turn()
        peer, transport = connect(broker)
        broker.on_message(peer, [p.HELLO_CLIENT, "s1", old.key])
        welcome, resent = transport.sent
        assert welcome[0] == p.WELCOME and welcome[1]["outstanding"] == 3  # 4 to run, 2, 3
        assert resent == [p.RESULTS, 3, ok(2, 3)]
        broker.sessions["s1"].journal.remove()  # type: ignore[union-attr]

    asyncio.run(main())


def test_results_gathered_in_the_turn_of_an_attach_are_counted_as_outstanding() -> None:
    """A client attaches in the same loop turn as a worker's results arrive: those results
    are neither unfinished nor unacknowledged until the turn's flush (which sends them
    to this client), and leaving them out made ``results()`` stop before them."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        broker.submit(session, tasks(1, 2, 3))
        worker = ready_worker(broker, session, job_id=5)
        await turn()
        assert worker.sent[-1] == [p.TASKS, tasks(1, 2)]  # a new session's window: 2
        worker_peer = session.workers[5].conn
        assert isinstance(worker_peer, Peer)
        broker.on_message(worker_peer, [p.RESULTS, 0, ok(1, 2)])  # same turn as the attach
        _, transport = attach_client(broker, session)
        assert transport.sent[0][1]["outstanding"] == 3
        await turn()
        assert transport.sent[1:] == [[p.RESULTS, 2, ok(1, 2)]]

    asyncio.run(main())


def test_a_worker_released_while_loading_gets_no_tasks_when_it_says_it_is_ready() -> None:
    """The pool releases a worker that is still loading (the session's demand fell): it
    is sent STOP at once. Its WELCOME, already on the way, must not make it ready
    again, or tasks sent to it die with it and are blamed on it (poison after 3)."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        peer, transport = connect(broker)
        broker.on_message(peer, [p.HELLO_WORKER, "s1", session.worker_key, 5, "h", 1])
        broker.release(session, session.workers[5])
        assert transport.kinds() == [p.INIT, p.STOP]
        broker.on_message(peer, [p.WELCOME, 1])
        broker.submit(session, tasks(1))
        await turn()
        assert p.TASKS not in transport.kinds()
        assert session.workers[5].state == "draining" and session.book.waiting == 1

    asyncio.run(main())


def test_a_second_connection_for_a_connected_job_gives_back_the_first_ones_tasks() -> None:
    """Two worker processes in one job (or a worker that reconnects) say HELLO with the
    same job id. The tasks sent on the first connection are queued again instead of
    waiting forever for results only that connection could send, and results that come
    late on it are ignored."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        broker.submit(session, tasks(1, 2))
        first = ready_worker(broker, session, job_id=5)
        first_peer = session.workers[5].conn
        assert isinstance(first_peer, Peer)
        await turn()
        assert first.sent[-1] == [p.TASKS, tasks(1, 2)]
        second = ready_worker(broker, session, job_id=5)
        assert first.closed
        await turn()
        assert second.sent[-1][0] == p.TASKS  # suspects: one at a time
        assert second.sent[-1][1] == tasks(1)
        broker.on_message(first_peer, [p.RESULTS, 0, ok(1, 2)])  # late, from the first
        first_peer.connection_lost(None)
        assert session.book.unfinished == 2 and 5 in session.workers
        second_peer = session.workers[5].conn
        assert isinstance(second_peer, Peer)
        broker.on_message(second_peer, [p.RESULTS, 0, ok(1)])
        await turn()
        broker.on_message(second_peer, [p.RESULTS, 0, ok(2)])
        assert session.book.unfinished == 0 and session.book.counters.completed == 2

    asyncio.run(main())


def test_a_stopping_broker_sends_a_journaled_sessions_client_nothing_more(
    tmp_path: Path,
) -> None:
    """After ``suspend`` the journal is closed, so a result that still comes in is not
    recorded and the next broker runs its task again: the client must not see it (it
    would see that task twice, under sequence numbers the next broker reuses)."""

    async def main() -> None:
        broker = Broker(journal_dir=str(tmp_path))
        session = open_session(broker, journal_dir=str(tmp_path))
        client, transport = attach_client(broker, session)
        broker.on_message(client, [p.SUBMIT, tasks(1)])
        ready_worker(broker, session, job_id=5)
        await turn()
        broker.suspend()
        assert transport.closed and session.client is None
        worker_peer = session.workers[5].conn
        assert isinstance(worker_peer, Peer)
        broker.on_message(worker_peer, [p.RESULTS, 0, ok(1)])
        await turn()
        assert p.RESULTS not in transport.kinds()
        ((back, file),) = journal.recover(str(tmp_path), now=0.0)
        file.remove()
        assert list(back.book.backlog) == [(1, p.pack([1]))]  # runs again, unseen

    asyncio.run(main())


def test_tasks_and_results_never_reach_the_database(tmp_path: Path) -> None:
    """The task path stays in memory: 2,000 tasks submitted, run by a worker, returned to
    a client and acknowledged write nothing to the session records' database (a real
    SQLite file); only the session's own state changes do."""
    from sqlalchemy import event

    from hal.htc.records import SessionRecords

    records = SessionRecords(f"sqlite:///{tmp_path / 'hal.db'}")
    statements: list[str] = []
    event.listen(records.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))

    async def main() -> None:
        broker = Broker(records=records)
        session = open_session(broker)
        broker.persist(session, insert=True)
        client, client_sent = connect(broker)
        broker.on_message(client, [p.HELLO_CLIENT, session.id, session.key])
        worker = ready_worker(broker, session, job_id=5)
        worker_peer = session.workers[5].conn
        assert isinstance(worker_peer, Peer)
        broker._db.submit(lambda: None).result()  # the insert has run
        before = len(statements)
        broker.submit(session, tasks(*range(1, 2001)))
        await turn()
        ran: list[int] = []
        while len(ran) < 2000:  # the worker answers each window of tasks it is sent
            sent = [i for frame in worker.sent if frame[0] == p.TASKS for i in frame[1][::2]]
            fresh = sent[len(ran) :]
            assert fresh, "the broker stopped sending tasks"
            ran += fresh
            broker.on_message(worker_peer, [p.RESULTS, 0, ok(*fresh)])
            await turn()
        assert ran == list(range(1, 2001))
        returned = [m for m in client_sent.sent if m[0] == p.RESULTS]
        assert sum(len(m[2]) // 3 for m in returned) == 2000
        broker.on_message(client, [p.ACK, 2000])
        await turn()
        broker._db.submit(lambda: None).result()
        assert statements[before:] == []
        broker.close()

    asyncio.run(main())
    assert any("INSERT" in s for s in statements)  # the session itself was recorded
    records.close()


def test_a_paused_session_still_stops_a_drained_worker(monkeypatch: Any) -> None:
    """A session whose client is behind on acknowledgements sends no new tasks; a worker
    the pool released must still get STOP once its last result is in, not hold its
    job's CPUs until the client catches up."""
    import hal.htc.session as session_module

    async def main() -> None:
        monkeypatch.setattr(session_module, "MAX_UNACKED_RESULTS", 1)
        broker = Broker()
        session = open_session(broker)
        broker.submit(session, tasks(1, 2))
        transport = ready_worker(broker, session, job_id=5)
        await turn()
        assert transport.sent[-1] == [p.TASKS, tasks(1, 2)]
        worker = session.workers[5]
        broker.release(session, worker)  # draining: STOP once its tasks are back
        assert p.STOP not in transport.kinds()
        assert isinstance(worker.conn, Peer)
        broker.on_message(worker.conn, [p.RESULTS, 0, ok(1)])
        await turn()
        assert session.paused and p.STOP not in transport.kinds()  # 1 unacknowledged
        broker.on_message(worker.conn, [p.RESULTS, 0, ok(2)])  # its last one
        await turn()
        assert transport.kinds()[-1] == p.STOP

    asyncio.run(main())


def test_results_acknowledged_after_a_detach_are_not_sent_again() -> None:
    """Results sent just before the client's DETACH reach it and are acknowledged after:
    the ACK still counts, so the next attach does not get them a second time."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        client, transport = attach_client(broker, session)
        broker.submit(session, tasks(1, 2))
        ready_worker(broker, session, job_id=5)
        await turn()
        assert isinstance(session.workers[5].conn, Peer)
        broker.on_message(session.workers[5].conn, [p.RESULTS, 0, ok(1, 2)])
        await turn()
        assert transport.sent[-1] == [p.RESULTS, 2, ok(1, 2)]
        broker.on_message(client, [p.DETACH])  # crosses the RESULTS on the wire
        broker.on_message(client, [p.ACK, 2])
        assert transport.sent[-1] == [p.DETACHED]  # no "unexpected message"
        assert session.acked_seq == 2 and not session.unacked
        _, transport2 = attach_client(broker, session)
        await turn()
        assert transport2.sent[0][1]["outstanding"] == 0
        assert p.RESULTS not in transport2.kinds()

    asyncio.run(main())


class EndedJobs:
    """A control plane that reports the watched jobs as ended with ``state``."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.watched: list[int] = []

    async def sync(self, request: WorkerSync) -> WorkerSyncReply:
        self.watched = list(request.watch)
        return WorkerSyncReply(states={j: self.state for j in request.watch}, capacity_cpus=4)

    async def close(self) -> None:
        pass


def test_a_worker_whose_job_ended_unseen_gives_its_tasks_back() -> None:
    """A node that lost power sends no connection reset: the worker's job ends (NODE_FAIL)
    and the broker learns it from the control plane, not from the socket. Its tasks go
    back to the queue instead of staying in flight for good."""

    async def main() -> None:
        plane = EndedJobs("NODE_FAIL")
        broker = Broker(control_plane=plane)
        session = open_session(broker)
        broker.submit(session, tasks(1, 2))
        transport = ready_worker(broker, session, job_id=5)
        await turn()
        assert session.book.in_flight_count == 2
        await broker.pool_round()
        assert 5 in plane.watched and 5 not in session.workers
        assert session.book.in_flight_count == 0 and session.book.waiting == 2
        assert transport.closed

    asyncio.run(main())


def test_a_worker_that_fails_to_load_counts_once() -> None:
    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        peer, transport = connect(broker)
        broker.on_message(peer, [p.HELLO_WORKER, "s1", session.worker_key, 5, "h", 1])
        broker.on_message(peer, [p.LOAD_ERROR, "ModuleNotFoundError: m"])
        assert transport.closed
        peer.connection_lost(None)  # the close it asked for
        assert broker.totals.worker_failures["start"] == 1
        assert broker.totals.worker_failures["lost"] == 0

    asyncio.run(main())


def test_a_session_left_for_the_next_broker_neither_ends_nor_takes_a_client(
    tmp_path: Path,
) -> None:
    """Between ``suspend`` and the broker's exit, a closed session whose last result comes
    in must not end DONE (its journal would stay, and the next broker run it again under
    a session the records call done), and a client must not attach to it (it would get
    results never recorded)."""

    async def main() -> None:
        broker = Broker(journal_dir=str(tmp_path))
        session = open_session(broker, journal_dir=str(tmp_path))
        first, _ = attach_client(broker, session)
        broker.on_message(first, [p.SUBMIT, tasks(1)])
        broker.on_message(first, [p.CLOSE])  # it ends once its tasks are done
        ready_worker(broker, session, job_id=5)
        await turn()
        broker.suspend()
        worker_peer = session.workers[5].conn
        assert isinstance(worker_peer, Peer)
        broker.on_message(worker_peer, [p.RESULTS, 0, ok(1)])
        await turn()
        assert session.state == "CLOSED" and session.ended is None
        _, transport = attach_client(broker, session)
        assert transport.kinds() == [p.ERROR] and "stopping" in transport.sent[0][1]
        ((back, file),) = journal.recover(str(tmp_path), now=0.0)
        file.remove()
        assert back.state == "CLOSED" and list(back.book.backlog) == [(1, p.pack([1]))]

    asyncio.run(main())


def test_a_worker_job_cancelled_before_it_connected_is_stopped_when_it_does() -> None:
    """The pool released a pending worker (its job's cancel is on its way) and the job
    connects first: it is stopped, not given tasks that die with it and are blamed on it
    (a task alone on three such workers was failed as poison)."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        broker.submit(session, tasks(1))
        session.workers[5] = Worker(job_id=5, session="s1")  # launched, not connected
        broker.release(session, session.workers[5])
        assert 5 not in session.workers
        transport = ready_worker(broker, session, job_id=5)
        await turn()
        assert transport.kinds() == [p.STOP] and transport.closed
        assert session.book.waiting == 1

    asyncio.run(main())


def test_an_ack_past_what_was_sent_drops_nothing_unsent() -> None:
    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        client, _ = attach_client(broker, session)
        broker.on_message(client, [p.ACK, 10])  # nothing sent yet
        assert session.acked_seq == 0
        broker.submit(session, tasks(1))
        ready_worker(broker, session, job_id=5)
        await turn()
        assert isinstance(session.workers[5].conn, Peer)
        broker.on_message(session.workers[5].conn, [p.RESULTS, 0, ok(1)])
        await turn()
        assert session.unacked_results == 1  # its result waits for a real acknowledgement

    asyncio.run(main())


def test_both_ends_of_a_worker_connection_probe_it() -> None:
    """A worker's host, or the broker's, may vanish without a FIN: both ends of the live
    connection turn TCP keepalive on. Only the worker bounds unacknowledged data
    (``TCP_USER_TIMEOUT``); the broker must not drop a worker that keeps its receive
    window shut while it runs a long task."""

    limit_ms = 1000 * (p.KEEPALIVE_IDLE_S + p.KEEPALIVE_INTERVAL_S * p.KEEPALIVE_PROBES)

    async def main() -> None:
        broker = Broker()
        peers: list[Peer] = []

        def accept() -> Peer:
            peers.append(Peer(broker))
            return peers[-1]

        server = await asyncio.get_running_loop().create_server(accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        mine = await asyncio.to_thread(worker.connect, f"127.0.0.1:{port}")
        while not peers:
            await asyncio.sleep(0.01)
        theirs = peers[0].transport.get_extra_info("socket")
        try:
            for sock in (mine, theirs):
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                if hasattr(socket, "TCP_KEEPIDLE"):
                    idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
                    assert idle == p.KEEPALIVE_IDLE_S
            if hasattr(socket, "TCP_USER_TIMEOUT"):
                assert mine.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == limit_ms
                assert theirs.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 0
        finally:
            mine.close()
            peers[0].close()
            server.close()
            broker.close()

    asyncio.run(main())


def test_a_cancel_withdraws_waiting_tasks_journaled_before_the_answer(tmp_path: Path) -> None:
    """The client's CANCEL is answered with the tasks withdrawn (those no worker holds);
    the journal has them before the answer goes out, so a broker that dies right after
    does not rerun a task its client was told is cancelled."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker, journal_dir=str(tmp_path))
        peer, client = attach_client(broker, session)
        broker.on_message(peer, [p.SUBMIT, tasks(1, 2, 3)])
        worker_sends = ready_worker(broker, session, 5)
        session.window = 2
        await turn()
        assert [m[1][::2] for m in worker_sends.sent if m[0] == p.TASKS] == [[1, 2]]
        broker.on_message(peer, [p.CANCEL, [1, 3]])
        assert client.sent[-1] == [p.CANCEL, [3]]  # 1 is on the worker
        assert session.journal is not None
        ((back, file),) = journal.recover(str(tmp_path), now=0.0)
        file.close()
        assert list(back.book.backlog) == [(1, p.pack([1])), (2, p.pack([2]))]
        broker.close()

    asyncio.run(main())


class CancelledJobs:
    """A control plane that keeps the worker jobs the broker asked it to cancel."""

    def __init__(self) -> None:
        self.cancelled: list[int] = []

    async def sync(self, request: WorkerSync) -> WorkerSyncReply:
        self.cancelled += request.cancel
        return WorkerSyncReply(capacity_cpus=4)

    async def close(self) -> None:
        pass


class Clock:
    """The broker's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_whose_client_went_away_ends_lost_after_the_grace() -> None:
    """A client killed with SIGKILL sends nothing: its session stayed OPEN for ever and
    its workers held their CPUs. After ``client_grace`` with no client it ends LOST, the
    client-less moment counted from the connection's loss; a worker running a task has
    its job cancelled (it reads STOP only between tasks)."""

    async def main() -> None:
        clock, plane = Clock(), CancelledJobs()
        broker = Broker(clock=clock, client_grace=300, control_plane=plane)
        session = open_session(broker)
        peer, _ = attach_client(broker, session)
        broker.on_message(peer, [p.SUBMIT, tasks(1)])
        worker_transport = ready_worker(broker, session, job_id=5)
        await turn()
        clock.now += 1000  # a client attached is never reaped, however long
        broker.housekeeping()
        peer.connection_lost(None)
        clock.now += 299
        broker.housekeeping()
        assert session.state == "OPEN"
        clock.now += 1
        broker.housekeeping()
        assert session.state == "LOST" and "no client for 300 s" in session.reason
        assert worker_transport.kinds()[-1] == p.STOP
        await broker.pool_round()
        assert plane.cancelled == [5]

    asyncio.run(main())


def test_a_client_that_reattaches_within_the_grace_keeps_its_session() -> None:
    async def main() -> None:
        clock = Clock()
        broker = Broker(clock=clock, client_grace=300)
        session = open_session(broker)
        peer, _ = attach_client(broker, session)
        peer.connection_lost(None)
        clock.now += 299
        attach_client(broker, session)
        clock.now += 1000
        broker.housekeeping()
        assert session.state == "OPEN"

    asyncio.run(main())


def test_a_session_opened_but_never_connected_to_is_reaped_too() -> None:
    """The client died between the REST open and its connection to the broker."""

    async def main() -> None:
        clock = Clock()
        broker = Broker(clock=clock, client_grace=300, control_key="k")
        control, transport = connect(broker)
        options = SessionOptions(service=ServiceSpec(target="m:f")).model_dump()
        broker.on_message(control, [p.CONTROL, "k", "open", {"user": "ann", "options": options}])
        session = broker.sessions[transport.sent[0][2]["session"]]
        clock.now += 300
        broker.housekeeping()
        assert session.state == "LOST"

    asyncio.run(main())


def test_journaled_and_detached_sessions_run_on_without_a_client(tmp_path: Path) -> None:
    """Sessions meant to survive their client are never reaped, and say so in WELCOME
    (their client detaches rather than cancels when its block raises); a detach is for
    good, also when a later client of the session is killed."""

    async def main() -> None:
        clock = Clock()
        broker = Broker(clock=clock, client_grace=300, journal_dir=str(tmp_path))
        journaled = open_session(broker, journal_dir=str(tmp_path))
        peer, transport = attach_client(broker, journaled)
        assert transport.sent[0][1]["survives_client"] is True
        peer.connection_lost(None)
        options = SessionOptions(service=ServiceSpec(target="m:f"))
        plain = Session(id="s2", user="ann", options=options, created=0.0)
        broker.sessions["s2"] = plain
        first, transport = attach_client(broker, plain)
        assert transport.sent[0][1]["survives_client"] is False
        broker.on_message(first, [p.DETACH])
        first.connection_lost(None)
        second, transport = attach_client(broker, plain)
        assert transport.sent[0][1]["survives_client"] is True
        second.connection_lost(None)
        clock.now += 10_000
        broker.housekeeping()
        assert journaled.state == plain.state == "OPEN"
        assert journaled.journal is not None
        journaled.journal.remove()

    asyncio.run(main())


def test_a_client_that_gives_up_cancels_its_session_and_is_told() -> None:
    """``CANCEL_SESSION``: what ``Session.__exit__`` sends when its block raises."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        peer, transport = attach_client(broker, session)
        broker.on_message(peer, [p.SUBMIT, tasks(1, 2)])
        broker.on_message(peer, [p.CANCEL_SESSION, "its client left with KeyboardInterrupt"])
        assert session.state == "CANCELLED" and session.book.unfinished == 0
        assert transport.sent[-1] == [
            p.ENDED,
            "CANCELLED",
            "its client left with KeyboardInterrupt",
        ]

    asyncio.run(main())


def test_a_new_sessions_workers_hold_a_small_window_until_the_task_length_is_known() -> None:
    """A cold session's first window was 64 whatever its tasks' length: the first worker
    to connect took 8 tasks of 2 s and the second, ready a moment later, got none (and a
    task a worker holds cannot be withdrawn by ``future.cancel()``). A worker now holds
    ``MIN_WINDOW`` tasks until the session's task length is measured, and every worker,
    one that joins later too, gets the window that length implies."""

    async def main() -> None:
        clock = Clock()
        broker = Broker(clock=clock)
        session = open_session(broker)
        broker.submit(session, tasks(*range(1, 9)))
        first = ready_worker(broker, session, job_id=5)
        await turn()
        assert [m[1][::2] for m in first.sent if m[0] == p.TASKS] == [[1, 2]]
        second = ready_worker(broker, session, job_id=6)
        await turn()
        assert [m[1][::2] for m in second.sent if m[0] == p.TASKS] == [[3, 4]]
        clock.now += 2.0  # a task of 2 s: the window stays at its least
        worker = session.workers[5].conn
        assert isinstance(worker, Peer)
        broker.on_message(worker, [p.RESULTS, 0, ok(1)])
        await turn()
        assert session.window == 2
        assert [m[1][::2] for m in first.sent if m[0] == p.TASKS][-1] == [5]
        # short tasks: the measured length opens the window, for a worker joining now too
        options = SessionOptions(service=ServiceSpec(target="m:f"))
        short = Session(id="s2", user="ann", options=options, created=0.0)
        broker.sessions["s2"] = short
        broker.submit(short, tasks(*range(1, 1001)))
        early = ready_worker(broker, short, job_id=7)
        await turn()
        clock.now += 0.0001  # 2 tasks in 100 us
        worker = short.workers[7].conn
        assert isinstance(worker, Peer)
        broker.on_message(worker, [p.RESULTS, 0, ok(1, 2)])
        assert short.window == 80  # 4 ms of 50 us tasks
        late = ready_worker(broker, short, job_id=8)
        await turn()
        assert [len(m[1]) // 2 for m in early.sent if m[0] == p.TASKS] == [2, 80]
        assert [len(m[1]) // 2 for m in late.sent if m[0] == p.TASKS] == [80]

    asyncio.run(main())


def test_an_executable_that_exits_before_answering_fails_the_session_as_a_start_failure() -> None:
    """``/bin/false`` as a service: each worker's program died under its first task, so
    every task was blamed for 3 worker deaths (3 worker jobs per task, all failed as
    poison). Before the session's service ever answered, such a death counts as a
    failure to start: its tasks go back unblamed, and the third fails the session as a
    missing program does."""

    async def main() -> None:
        broker = Broker()
        session = open_session(broker)
        client, to_client = attach_client(broker, session)
        broker.on_message(client, [p.SUBMIT, tasks(1, 2, 3)])
        said = "the service program /bin/false exited with status 1 before answering any task"
        for job_id in (5, 6, 7):
            worker = ready_worker(broker, session, job_id)
            await turn()
            assert worker.sent[-1] == [p.TASKS, tasks(1, 2)]
            peer = session.workers[job_id].conn
            assert isinstance(peer, Peer)
            broker.on_message(peer, [p.SERVICE_EXITED, said])
            peer.connection_lost(None)  # the worker exits next
            assert worker.closed and job_id not in session.workers
            assert session.book.counters.worker_deaths == 0
            assert session.book.deaths == {}
        assert session.state == "FAILED"
        assert session.reason == (
            f"the service failed to start on 3 workers; the last one said: {said}"
        )
        assert to_client.sent[-1] == [p.ENDED, "FAILED", session.reason]
        assert broker.totals.worker_failures == {"start": 3}

    asyncio.run(main())


def test_once_the_service_answered_its_programs_exit_is_a_death_and_named_in_the_error() -> None:
    """A request that kills the program after the service answered others is a poison
    task, as before; the program's exit (what the worker said) is in its error."""

    async def main() -> None:
        broker = Broker()
        options = SessionOptions(
            service=ServiceSpec(kind="exec", argv=["./pricer"]), max_worker_deaths=1
        )
        session = Session(id="s1", user="ann", options=options, created=0.0, book=TaskBook())
        session.book.max_worker_deaths = 1
        broker.sessions["s1"] = session
        client, to_client = attach_client(broker, session)
        assert to_client.sent[0][1]["service_kind"] == "exec"  # the client checks arguments
        broker.on_message(client, [p.SUBMIT, tasks(1, 2)])
        ready_worker(broker, session, job_id=5)
        await turn()
        peer = session.workers[5].conn
        assert isinstance(peer, Peer)
        broker.on_message(peer, [p.RESULTS, 0, ok(1)])
        said = "the service program ./pricer exited with status 7 while running a task"
        broker.on_message(peer, [p.SERVICE_EXITED, said])
        peer.connection_lost(None)
        await turn()
        flat = [x for m in to_client.sent if m[0] == p.RESULTS for x in m[2]]
        assert flat[0::3] == [1, 2] and flat[1::3] == [p.OK, p.POISON]
        assert f"(last: job 5 on h (pid 1): {said})" in p.unpack(flat[5])
        assert "running alone on 1 worker that died" in p.unpack(flat[5])
        assert session.start_failures == 0 and session.state == "OPEN"

    asyncio.run(main())


class Reports:
    """A control plane that reports the watched jobs ended with ``state`` once
    ``state`` is set (before: still running)."""

    def __init__(self) -> None:
        self.state = ""

    async def sync(self, request: WorkerSync) -> WorkerSyncReply:
        states = {j: self.state for j in request.watch} if self.state else {}
        return WorkerSyncReply(states=states, capacity_cpus=4)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("state", "cause", "advice"),
    [
        (
            "OUT_OF_MEMORY",
            "the worker job ran out of memory: memory_per_worker=100 MiB",
            "Give the workers more memory (memory_per_worker)",
        ),
        (
            "TIMEOUT",
            "the worker job reached its time limit (worker_lease + 360 s = 420 s)",
            "raise worker_lease above the task's length",
        ),
        ("FAILED", "", "Run it outside HAL to see why it crashes the process"),
        ("", "", "Run it outside HAL to see why it crashes the process"),  # never reported
    ],
)
def test_a_worker_job_killed_for_its_memory_or_time_limit_is_reported_as_such(
    state: str, cause: str, advice: str
) -> None:
    """A task whose worker job was killed by its memory limit or its time limit was
    failed as poison with "Run it outside HAL to see why it crashes the process" (where
    it works). The verdict now waits for the job's end state (at most
    ``VERDICT_WAIT_S``) and says what killed it."""

    async def main() -> None:
        clock, plane = Clock(), Reports()
        broker = Broker(clock=clock, control_plane=plane)
        options = SessionOptions(
            service=ServiceSpec(target="m:f"),
            max_worker_deaths=1,
            memory_per_worker_bytes=100 * 2**20,
            worker_lease_seconds=60,
        )
        session = Session(id="s1", user="ann", options=options, created=0.0, book=TaskBook())
        session.book.max_worker_deaths = 1
        broker.sessions["s1"] = session
        client, to_client = attach_client(broker, session)
        broker.on_message(client, [p.SUBMIT, tasks(1)])
        ready_worker(broker, session, job_id=5)
        await turn()
        peer = session.workers[5].conn
        assert isinstance(peer, Peer)
        peer.connection_lost(None)  # killed: nothing said
        await broker.pool_round()  # the job has not ended yet for the control plane
        await turn()
        assert p.RESULTS not in to_client.kinds() and session.book.unfinished == 1
        plane.state = state
        clock.now += 0.0 if state else broker_module.VERDICT_WAIT_S
        await broker.pool_round()
        await turn()
        ((_, _, outcome),) = [m for m in to_client.sent if m[0] == p.RESULTS]
        assert outcome[:2] == [1, p.POISON]
        message = p.unpack(outcome[2])
        assert message.startswith("task 1 was running alone on 1 worker that died (last: job 5")
        assert (f"(pid 1): {cause})" if cause else "(pid 1))") in message
        assert message.endswith(advice) or advice in message
        assert session.book.unfinished == 0
        # its job counts (max_workers) until the control plane reports its end
        assert 5 not in session.workers if state else session.workers[5].state == "exiting"

    asyncio.run(main())
