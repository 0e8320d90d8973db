"""srun's step records (``open_local_step``/``end_local_step``) wait at most
``RECORD_TIMEOUT_SECONDS`` for the server, once, on a fresh or a kept-alive connection;
the requests after one keep the client's own timeout. The server here is a real
listening socket that answers some paths at once, one after a delay longer than a
record's limit, and never answers a record."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from hal.client import HalClient
from hal.client import sync as client_sync
from hal.client.config import ClientConfig
from hal.core.errors import Unavailable

RECORD_S = 0.5  # the record's limit here (5 s in srun): short, so the test is
SLOW_S = 1.5  # past the record's limit, well within the client's


class Silent:
    """HTTP/1.1 over a raw socket, keep-alive. ``GET .../script``: answered at once;
    ``GET /v1/jobs/2/script``: answered after ``SLOW_S``; ``POST .../steps``: answered
    at once with ``{"step_id": 3}`` while ``answer_records``, else never."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.answer_records = True
        self.connections = 0
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            self.held.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        # (``close`` closes the connection under a waiting recv: the thread just ends)
        with contextlib.suppress(OSError), conn:
            self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next(
                int(v) for k, _, v in (h.partition(":") for h in lines[1:])
                if k.lower() == "content-length"
            )  # fmt: skip
            while len(buf) < length:
                buf += conn.recv(65536)
            buf = buf[length:]
            method, path, _ = lines[0].split(" ")
            if method == "POST" and not self.answer_records:
                threading.Event().wait()  # never answers
            if path == "/v1/jobs/2/script":
                time.sleep(SLOW_S)
            body = b'{"step_id": 3}' if method == "POST" else b"#!/bin/sh\n"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Silent]:
    monkeypatch.setattr(client_sync, "RECORD_TIMEOUT_SECONDS", RECORD_S)
    server = Silent()
    yield server
    server.close()


def _client(url: str) -> HalClient:
    return HalClient(config=ClientConfig(url=url, token="t", timeout_seconds=60))


def _open_step(c: HalClient) -> int:
    return c.open_local_step(1, node="n1", ntasks=1, name="x", argv=["x"])[0]


def test_a_record_on_a_kept_alive_connection_gives_up_at_its_limit(silent: Silent) -> None:
    silent.answer_records = False
    with _client(silent.url) as c:
        assert c.job_script(1) == "#!/bin/sh\n"  # the connection is open, kept alive
        started = time.monotonic()
        with pytest.raises(Unavailable):
            _open_step(c)
        waited = time.monotonic() - started
    assert silent.connections == 1  # the record went out on the kept-alive connection
    # the record's limit, not the client's 60 s (a generous bound: not a timing test)
    assert waited < 20, waited


def test_a_request_after_a_record_keeps_the_clients_timeout(silent: Silent) -> None:
    with _client(silent.url) as c:
        assert _open_step(c) == 3  # the connection opens inside the record
        assert c.job_script(2) == "#!/bin/sh\n"  # answered after more than the record's
    assert silent.connections == 1
