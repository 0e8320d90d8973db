"""A server whose database is away answers 503 ``database_unavailable`` (its transaction
rolled back): the client sends the request again, a submit included, for up to
``HAL_RETRY_SECONDS``, as Slurm's clients wait for a controller; any other error, and
the end of that time, reach the caller at once. Submissions carry an ``Idempotency-Key``
(a new one each): one whose outcome is unknown (503 ``commit_outcome_unknown``, or its
answer lost with the connection) is sent again with the same key, which the server
answers with the jobs of the first; other requests are not."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hal.client import HalClient
from hal.client.config import ClientConfig, load_client_config
from hal.core.errors import InvalidRequest, Unavailable
from hal.wire.submit import JobSubmit

AWAY = {
    "status": 503,
    "code": "database_unavailable",
    "detail": "the database is unavailable: PostgreSQL cannot be reached; retry in a few seconds",
}


class Server:
    """Answers each request with the next of ``answers`` (the last one repeats)."""

    def __init__(self, answers: list[tuple[int, dict[str, object]] | None]) -> None:
        self.answers = answers  # None: read the request, close without answering
        self.seen: list[bytes] = []
        self.keys: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.seen.append(self.rfile.read(int(self.headers["Content-Length"])))
                outer.keys.append(self.headers.get("Idempotency-Key"))
                answer = outer.answers[min(len(outer.seen), len(outer.answers)) - 1]
                if answer is None:
                    self.close_connection = True
                    return
                status, body = answer
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server([(503, AWAY), (503, AWAY), (201, {"job_id": 7})])
    yield s
    s.httpd.shutdown()


JOB = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp")


def test_a_submit_is_sent_again_until_the_database_is_back(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with HalClient(config=ClientConfig(url=server.url, token="t", retry_seconds=30)) as c:
        assert c.submit(JOB).job_id == 7
    assert len(server.seen) == 3 and len(set(server.seen)) == 1  # the same request
    assert "retrying for up to" in caplog.text and "PostgreSQL cannot be reached" in caplog.text


def test_without_retry_time_the_503_reaches_the_caller(server: Server) -> None:
    with (
        HalClient(config=ClientConfig(url=server.url, token="t", retry_seconds=0)) as c,
        pytest.raises(Unavailable, match="PostgreSQL cannot be reached"),
    ):
        c.submit(JOB)
    assert len(server.seen) == 1


def test_other_errors_are_not_retried() -> None:
    s = Server([(400, {"status": 400, "code": "invalid_request", "detail": "no"})])
    try:
        with (
            HalClient(config=ClientConfig(url=s.url, token="t", retry_seconds=30)) as c,
            pytest.raises(InvalidRequest),
        ):
            c.submit(JOB)
        assert len(s.seen) == 1
    finally:
        s.httpd.shutdown()


def test_hal_retry_seconds_sets_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAL_RETRY_SECONDS", "2.5")
    assert load_client_config("http://h:1", "t").retry_seconds == 2.5
    monkeypatch.setenv("HAL_RETRY_SECONDS", "soon")
    with pytest.raises(InvalidRequest, match="HAL_RETRY_SECONDS='soon'"):
        load_client_config("http://h:1", "t")


UNKNOWN = {
    "status": 503,
    "code": "commit_outcome_unknown",
    "detail": "the database was lost while committing; the change may or may not have been applied",
}


@pytest.mark.parametrize("lost", [(503, UNKNOWN), None], ids=["commit-unknown", "no-answer"])
def test_a_submission_of_unknown_outcome_is_sent_again_with_its_key(
    lost: tuple[int, dict[str, object]] | None,
) -> None:
    s = Server([lost, (201, {"job_id": 7}), (201, {"job_id": 8})])
    try:
        with HalClient(config=ClientConfig(url=s.url, token="t", retry_seconds=30)) as c:
            assert c.submit(JOB).job_id == 7
            assert c.submit(JOB).job_id == 8
        assert len(set(s.seen)) == 1  # the same body each time
        first, again, other = s.keys
        assert first is not None and len(first) == 32
        assert again == first and other != first  # the resend's key; a new one for a new job
    finally:
        s.httpd.shutdown()


@pytest.mark.parametrize("lost", [(503, UNKNOWN), None], ids=["commit-unknown", "no-answer"])
def test_other_requests_of_unknown_outcome_are_not_sent_again(
    lost: tuple[int, dict[str, object]] | None,
) -> None:
    s = Server([lost, (200, {})])
    try:
        with (
            HalClient(config=ClientConfig(url=s.url, token="t", retry_seconds=30)) as c,
            pytest.raises(Unavailable),
        ):
            c.test_only(JOB)
        assert len(s.seen) == 1 and s.keys == [None]
    finally:
        s.httpd.shutdown()


def _serve_once_then_die(listener: socket.socket) -> None:
    """Answer one request on a kept-alive connection; read the next, then go away: the
    connection closed without an answer and the port no longer listening."""
    conn, _ = listener.accept()
    with conn, conn.makefile("rb") as r:
        for answered in (True, False):
            length = 0
            while (line := r.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            r.read(length)
            if answered:
                body = b'{"job_id": 7}'
                head = f"HTTP/1.1 201 Created\r\nContent-Length: {len(body)}\r\n\r\n"
                conn.sendall(head.encode() + body)
        listener.close()


def test_a_submission_lost_with_a_kept_alive_connection_stays_in_doubt() -> None:
    """The answer lost on a kept-alive connection, and the server gone: the transport's
    own retry is refused, yet the submission was sent, so the client keeps trying for
    its retry time and then says it may have been accepted (not "is it running?")."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    threading.Thread(target=_serve_once_then_die, args=(listener,), daemon=True).start()
    with (
        HalClient(config=ClientConfig(url=url, token="t", retry_seconds=1.5)) as c,
        pytest.raises(Unavailable, match="which it may have accepted: check `hal squeue"),
    ):
        assert c.submit(JOB).job_id == 7
        c.submit(JOB)


class DroppingServer:
    """A keep-alive HTTP server on a plain socket that answers each request with
    ``{"job_ids": [1]}``, except that it reads request number ``drop`` and then closes
    the connection without answering (a server that died after reading it), and closes
    the connection, idle, after answering request number ``idle_close``."""

    def __init__(self, drop: int = 0, idle_close: int = 0) -> None:
        self.drop, self.idle_close = drop, idle_close
        self.seen: list[str] = []  # request lines, in order
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # the listener closed: the test is over
                return
            with conn, conn.makefile("rb") as r:
                while request := r.readline().decode().strip():
                    length = 0
                    while (line := r.readline()) not in (b"\r\n", b""):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    r.read(length)
                    self.seen.append(request)
                    if len(self.seen) == self.drop:
                        break
                    body = b'{"job_ids": [1]}'
                    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n"
                    conn.sendall(head.encode() + body)
                    if len(self.seen) == self.idle_close:
                        conn.shutdown(socket.SHUT_WR)
                        self.closed.set()
                        break


@pytest.mark.parametrize(
    "action",
    [
        lambda c: c.hold(5),
        lambda c: c.cancel(5, signal=10),
        lambda c: c.requeue(5),
    ],
    ids=["POST-hold", "DELETE-signal", "POST-requeue"],
)
def test_an_action_whose_answer_is_lost_is_not_sent_again(
    action: Callable[[HalClient], object],
) -> None:
    """The server reads ``scancel --signal=USR1 5`` (or a hold) on a kept-alive connection
    and dies before answering: it may have acted, so the client must not send it again (a
    second signal, a second requeue); it says the request may have been carried out."""
    s = DroppingServer(drop=2)
    try:
        with HalClient(config=ClientConfig(url=s.url, token="t", retry_seconds=30)) as c:
            assert c.job_script(5)  # opens the kept-alive connection
            with pytest.raises(Unavailable, match="may have carried it out"):
                action(c)
        assert len(s.seen) == 2, s.seen  # the action once, never resent
    finally:
        s.listener.close()


@pytest.mark.parametrize(
    ("call", "line"),
    [
        (lambda c: c.job_script(5), "GET /v1/jobs/5/script HTTP/1.1"),
        (lambda c: c.cancel(5), "DELETE /v1/jobs/5 HTTP/1.1"),
    ],
    ids=["GET", "plain-DELETE"],
)
def test_an_idempotent_request_whose_answer_is_lost_is_sent_again(
    call: Callable[[HalClient], object], line: str
) -> None:
    """A read, or a plain cancel (RFC 9110: DELETE is idempotent; a second cancel of a
    cancelled job changes nothing), lost with a kept-alive connection is sent once more."""
    s = DroppingServer(drop=2)
    try:
        with HalClient(config=ClientConfig(url=s.url, token="t", retry_seconds=30)) as c:
            assert c.job_script(5)
            assert call(c)
        assert s.seen[1:] == [line, line]
    finally:
        s.listener.close()


def test_a_kept_alive_connection_the_server_closed_is_not_used() -> None:
    """The server closed the idle kept-alive connection (its keep-alive timeout): the
    next request, a hold, goes out on a new connection, once, and succeeds."""
    s = DroppingServer(idle_close=1)
    try:
        with HalClient(config=ClientConfig(url=s.url, token="t", retry_seconds=30)) as c:
            assert c.job_script(5)
            assert s.closed.wait(5)
            assert c.hold(5) == [1]
        assert [r.split()[0] for r in s.seen] == ["GET", "POST"]
    finally:
        s.listener.close()


def test_a_kept_alive_connection_is_checked_past_1024_descriptors() -> None:
    """``select`` refuses a descriptor of 1,024 or more: the stale check polls instead."""
    from hal.client.transport import _readable

    a, b = socket.socketpair()
    high = [os.dup(a.fileno()) for _ in range(1030 - a.fileno())]
    try:
        sock = socket.socket(fileno=os.dup(high[-1]))
        assert sock.fileno() >= 1024
        assert not _readable(sock)  # nothing sent: an idle, healthy connection
        b.close()
        assert _readable(sock)  # the peer closed it
        sock.close()
    finally:
        for fd in high:
            os.close(fd)
        a.close()


def test_hal_timeout_seconds_sets_how_long_an_answer_is_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy server's answer of a whole history can take longer than the default 30 s:
    HAL_TIMEOUT_SECONDS sets the wait; a value that is no number of seconds, or 0, is
    refused saying what it is for."""

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            threading.Event().wait(0.6)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    monkeypatch.setenv("HAL_RETRY_SECONDS", "0")
    try:
        monkeypatch.setenv("HAL_TIMEOUT_SECONDS", "0.2")
        config = load_client_config(url, "t")
        assert config.timeout_seconds == 0.2
        with HalClient(config=config) as c, pytest.raises(Unavailable, match="timed out"):
            c.cluster_config(validate=False)
        monkeypatch.setenv("HAL_TIMEOUT_SECONDS", "5")
        with HalClient(config=load_client_config(url, "t")) as c:
            assert vars(c.cluster_config(validate=False)) == {}
    finally:
        httpd.shutdown()
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv("HAL_TIMEOUT_SECONDS", bad)
        with pytest.raises(InvalidRequest, match="HAL_TIMEOUT_SECONDS="):
            load_client_config(url, "t")
    monkeypatch.setenv("HAL_TIMEOUT_SECONDS", "")
    assert load_client_config(url, "t").timeout_seconds == 30.0
