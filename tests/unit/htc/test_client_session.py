"""The client's connection to a session, against a scripted broker on a local socket."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

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


def test_the_connection_to_the_broker_is_probed_when_idle() -> None:
    """TCP keepalive is on, with the protocol's timings, on the live connection, and
    data left unacknowledged for as long ends it too."""
    welcome = {"session": "s1", "state": "OPEN", "next_task_id": 1, "outstanding": 0}
    with scripted_broker([[p.WELCOME, welcome]]) as (ticket, _, _):
        session = Session(ticket)
        try:
            sock = session._sock
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            if hasattr(socket, "TCP_KEEPIDLE"):
                idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
                assert idle == p.KEEPALIVE_IDLE_S
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == p.KEEPALIVE_PROBES
                limit = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
                assert limit == 1000 * (idle + p.KEEPALIVE_INTERVAL_S * p.KEEPALIVE_PROBES)
        finally:
            session.disconnect()


# Run under ``unshare -rn`` (a user and network namespace of its own, no privilege
# needed): the broker runs in a second network namespace behind a veth pair, answers
# the client's HELLO, reads one task and then its host "vanishes" (every packet it sends
# is dropped: no FIN, no RST, no ACK). The client waits on the task's result.
VANISHING_BROKER = r"""
import subprocess, sys
from hal.htc import protocol as p
from hal.htc.client_session import Session
from hal.htc.errors import SessionEnded
from hal.htc.rest import SessionTicket

p.KEEPALIVE_IDLE_S, p.KEEPALIVE_INTERVAL_S, p.KEEPALIVE_PROBES = 1, 1, 2
BROKER = '''
import socket, sys
from hal.htc import protocol as p
listener = socket.create_server(("0.0.0.0", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
stream = conn.makefile("rb")
p.read_frame(stream)
welcome = {"session": "s1", "state": "OPEN", "next_task_id": 1, "outstanding": 0}
conn.sendall(p.frame([p.WELCOME, welcome]))
print(p.read_frame(stream)[0], flush=True)
sys.stdin.read()
'''

def sh(*argv):
    subprocess.run(argv, check=True)

sh("ip", "link", "set", "lo", "up")
broker = subprocess.Popen(
    ["unshare", "-n", sys.executable, "-c", BROKER],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
port = int(broker.stdout.readline())  # listening: its namespace exists
ns = ["nsenter", "-t", str(broker.pid), "-n", "--preserve-credentials"]
sh("ip", "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", str(broker.pid))
sh("ip", "addr", "add", "10.77.0.1/24", "dev", "va")
sh("ip", "link", "set", "va", "up")
sh(*ns, "ip", "addr", "add", "10.77.0.2/24", "dev", "vb")
sh(*ns, "ip", "link", "set", "vb", "up")
session = Session(SessionTicket(session="s1", broker=f"10.77.0.2:{port}", key="k"))
future = session.submit(1)
assert int(broker.stdout.readline()) == p.SUBMIT
sh(*ns, "tc", "qdisc", "add", "dev", "vb", "root", "pfifo", "limit", "0")  # the host is gone
try:
    future.result()
except SessionEnded as err:
    print("ended:", err.state)
"""


def _namespaces_work() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "-rn", "sh", "-c", "ip link add va type veth peer name vb && tc -V"],
            capture_output=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(not _namespaces_work(), reason="needs unshare -rn, ip (veth) and tc")
def test_a_task_waiting_on_a_broker_whose_host_vanished_ends_the_session() -> None:
    """The broker's host vanishes (power cut, network partition: no FIN or RST ever
    comes) while a client waits in ``future.result()`` without a timeout. Keepalive
    probes go unanswered (or the task's frame is never acknowledged, when the broker's
    delayed ACK was lost with it), the connection fails, and the future raises
    ``SessionEnded`` (LOST) instead of waiting for ever. The 60 s limit only guards
    against that hang."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", VANISHING_BROKER],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ended: LOST"


def test_a_lost_connection_is_reattached_and_unrecorded_tasks_are_sent_again() -> None:
    """A journaled session's broker dies (a takeover) after it recorded tasks 1 and 2
    and answered task 1. The client asks for a new ticket, the new broker's
    WELCOME says it has tasks up to 2 (``next_task_id`` 3) and resends task 1's result
    (the dead broker's ACK was lost): the client sends 3 and 4 again, with their
    payloads, drops the second result of 1, and every future gets its own result."""
    first = socket.create_server(("127.0.0.1", 0))
    second = socket.create_server(("127.0.0.1", 0))
    seen: list[Any] = []

    def dying() -> None:
        conn, _ = first.accept()
        with conn, conn.makefile("rb") as stream:
            p.read_frame(stream)
            welcome = {"session": "s1", "state": "OPEN", "next_task_id": 1, "outstanding": 0}
            welcome["survives_client"] = True
            conn.sendall(p.frame([p.WELCOME, welcome]))
            for _ in range(2):  # the two SUBMIT frames: 1 and 2, then 3 and 4
                seen.append(p.read_frame(stream))
            conn.sendall(p.frame([p.RESULTS, 1, [1, p.OK, p.pack(10)]]))
            p.read_frame(stream)  # its ACK, then the broker dies

    def recovered() -> None:
        conn, _ = second.accept()
        with conn, conn.makefile("rb") as stream:
            p.read_frame(stream)
            welcome = {"session": "s1", "state": "OPEN", "next_task_id": 3, "outstanding": 2}
            welcome["survives_client"] = True
            conn.sendall(p.frame([p.WELCOME, welcome]))
            conn.sendall(p.frame([p.RESULTS, 1, [1, p.OK, p.pack(11), 2, p.OK, p.pack(20)]]))
            while (message := p.read_frame(stream)) is not None:
                seen.append(message)
                if message[0] == p.SUBMIT:
                    flat = message[1]
                    out = [x for i in flat[0::2] for x in (i, p.OK, p.pack(10 * i))]
                    conn.sendall(p.frame([p.RESULTS, 2, out]))

    brokers = [threading.Thread(target=f, daemon=True) for f in (dying, recovered)]
    for thread in brokers:
        thread.start()
    tickets = [
        SessionTicket(session="s1", broker=f"127.0.0.1:{s.getsockname()[1]}", key=k)
        for s, k in ((first, "k1"), (second, "k2"))
    ]
    session = Session(tickets[0], reattach=lambda: tickets[1], reattach_s=30)
    try:
        futures = [session.submit(1), session.submit(2)]
        futures += session.submit_many([(3,), (4,)])
        assert [f.result(30) for f in futures] == [10, 20, 30, 40]
        assert session.reattaches == 1
        assert session.ended is None
    finally:
        session.disconnect()
        for thread in brokers:
            thread.join(10)
        first.close()
        second.close()
    submits = [m for m in seen if m[0] == p.SUBMIT]
    # 1 and 2 to the first broker; 3 and 4 again to the second, which had not recorded them
    assert [m[1][0::2] for m in submits] == [[1], [2], [3, 4]]
    assert submits[-1][1][1::2] == [p.pack([3]), p.pack([4])]
