"""The client's connection to a session, against a scripted broker on a local socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hal.htc import protocol as p
from hal.htc.client_session import Session
from hal.htc.rest import SessionTicket


@contextmanager
def scripted_broker(
    replies: list[list[Any]],
) -> Iterator[tuple[SessionTicket, list[Any], threading.Event]]:
    """A broker that answers the client's HELLO with ``replies`` written in one ``send``
    (so they reach the client together) and records what the client sends until it
    hangs up; the event is set once an ACK came."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received: list[Any] = []
    acked = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as stream:
            received.append(p.read_frame(stream))  # HELLO_CLIENT
            conn.sendall(b"".join(p.frame(m) for m in replies))
            while (message := p.read_frame(stream)) is not None:
                received.append(message)
                if message[0] == p.ACK:
                    acked.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield SessionTicket(session="s1", broker=f"127.0.0.1:{port}", key="k"), received, acked
    finally:
        thread.join(10)
        listener.close()


def test_results_that_arrive_with_the_welcome_are_delivered_and_acknowledged() -> None:
    """A reattach to a recovered session: the broker writes WELCOME and resends the
    results the last client never acknowledged in the same turn, so the client's first
    read holds both. These were dropped with the rest of that read, and ``results()``
    then waited forever for them (the broker resends only on the next attach)."""
    welcome = {"session": "s1", "state": "OPEN", "next_task_id": 9, "outstanding": 2}
    resent = [p.RESULTS, 7, [6, p.OK, p.pack(60), 7, p.OK, p.pack(70)]]
    with scripted_broker([[p.WELCOME, welcome], resent]) as (ticket, received, acked):
        session = Session(ticket)
        try:
            got = {r.task_id: r.value for r in session.results(timeout=10)}
            assert acked.wait(30)
        finally:
            session.disconnect()
    assert got == {6: 60, 7: 70}
    assert received == [[p.HELLO_CLIENT, "s1", "k"], [p.ACK, 7]]


def test_an_end_that_arrives_with_the_welcome_ends_the_session() -> None:
    """Attaching to a session that ended while no client was attached: WELCOME, the
    unacknowledged results and ENDED come in one read."""
    welcome = {"session": "s1", "state": "DONE", "next_task_id": 2, "outstanding": 1}
    replies = [[p.WELCOME, welcome], [p.RESULTS, 1, [1, p.OK, p.pack(1)]], [p.ENDED, "DONE", ""]]
    with scripted_broker(replies) as (ticket, received, acked):
        session = Session(ticket)
        try:
            assert [r.value for r in session.results(timeout=10)] == [1]
            assert acked.wait(30)
            assert session.close(timeout=30) == "DONE"
        finally:
            session.disconnect()
    assert received[:2] == [[p.HELLO_CLIENT, "s1", "k"], [p.ACK, 1]]
