"""``FailoverPeer``: a small HTTP server that answers as a HAL server of a failover set
does (docs/admin/failover.md): as the leader, or as a standby that redirects to the leader
(307 + ``X-HAL-Leader``) or knows none yet (503, ``X-HAL-Role: standby``). It stands in
for the other servers in the unit tests of the clients' leader-finding
(``hal.client.servers``); the integration tests run real ``hal server`` processes."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class FailoverPeer:
    """A HAL server as the failover contract has it answer: ``role`` is ``leader``,
    ``standby`` (redirecting to ``leader_url``, or 503 when that is empty) or ``lost``
    (it reads a request and closes without answering, as a leader killed mid-request).
    A leader registers agents, answers the GETs of ``gets``, accepts submissions (one job id per
    ``Idempotency-Key``), says who the caller is, and streams ``events`` from ``after``;
    ``stream_cut`` events into a stream it hands leadership to ``successor`` and drops
    the connection. With ``tls`` (a server context) it serves HTTPS."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.role = "leader"
        self.leader_url = ""
        self.servers = ""  # the X-HAL-Servers every answer carries ("": none, as SQLite)
        self.posts: list[tuple[str, bytes, str | None]] = []  # path, body, key (all seen)
        self.accepted: dict[str, int] = {}  # Idempotency-Key -> job id
        self.stream_afters: list[str] = []
        self.registered: list[str] = []  # the nodes agents registered here
        self.gets: dict[str, Any] = {}  # path -> what a leader answers a GET of it
        self.events: list[dict[str, Any]] = [
            {"id": i, "time": 1.0, "kind": "job.submitted", "job_id": i} for i in range(1, 5)
        ]
        self.stream_cut = 0
        self.successor: FailoverPeer | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status: int, body: object, extra: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-HAL-Role", "leader" if status < 300 else "standby")
                if outer.servers:
                    self.send_header("X-HAL-Servers", outer.servers)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _standby(self) -> bool:
                if outer.role == "lost":
                    self.close_connection = True
                    return True
                if outer.role != "standby":
                    return False
                if outer.leader_url:
                    detail = f"this HAL server is a standby; the leader is at {outer.leader_url}"
                    self._answer(
                        307,
                        {"error": "standby", "detail": detail},
                        {
                            "Location": outer.leader_url + self.path,
                            "X-HAL-Leader": outer.leader_url,
                        },
                    )
                else:
                    detail = "this HAL server is a standby and no leader is answering yet"
                    self._answer(503, {"error": "standby", "detail": detail}, {"Retry-After": "1"})
                return True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                key = self.headers.get("Idempotency-Key")
                outer.posts.append((self.path, body, key))
                if self._standby():
                    return
                if self.path == "/v1/agent/register":
                    outer.registered.append(json.loads(body)["node"])
                    self._answer(200, _registered(outer.registered[-1]), {})
                    return
                job_id = outer.accepted.setdefault(
                    key or str(len(outer.posts)), 100 + len(outer.accepted)
                )
                self._answer(201, {"job_id": job_id, "task_ids": []}, {})

            def do_GET(self) -> None:
                if self._standby():
                    return
                parts = urlsplit(self.path)
                if parts.path == "/v1/users/me":
                    self._answer(200, {"name": "alice", "admin": False}, {})
                elif parts.path in outer.gets:
                    self._answer(200, outer.gets[parts.path], {})
                elif parts.path == "/v1/events":
                    self._stream(int(parse_qs(parts.query)["after"][0]))
                else:
                    self._answer(404, {"code": "not_found", "detail": "no such path"}, {})

            def _stream(self, after: int) -> None:
                outer.stream_afters.append(str(after))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("X-HAL-Role", "leader")
                self.end_headers()  # (no length: the stream ends when the connection does)
                sent = 0
                for event in outer.events:
                    if event["id"] <= after:
                        continue
                    if outer.stream_cut and sent == outer.stream_cut:
                        break
                    line = (
                        f"id: {event['id']}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n"
                    )
                    self.wfile.write(line.encode())
                    self.wfile.flush()
                    sent += 1
                if outer.successor is not None:  # a takeover: this one stands by now
                    outer.role, outer.leader_url = "standby", outer.successor.url
                    outer.successor.role = "leader"
                self.close_connection = True

            def log_message(self, *_: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:  # (a failed handshake fails that accept; the server goes on)
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "http" if tls is None else "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def standby(self, leader: FailoverPeer | None = None) -> FailoverPeer:
        self.role, self.leader_url = "standby", leader.url if leader else ""
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _registered(node: str) -> dict[str, Any]:
    """``AgentRegistered``'s fields for ``node``."""
    return {
        "node": node,
        "heartbeat_interval_seconds": 5,
        "node_timeout_seconds": 30,
        "kill_wait_seconds": 7,
        "kill": [],
        "server_time": 1.0,
    }
