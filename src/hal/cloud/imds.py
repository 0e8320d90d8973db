"""A stand-in for an EC2 instance's metadata service (IMDS), for the spot-notice paths
moto does not serve (its IMDS raises NotImplementedError for them).

Made from AWS's documentation (spot-instance-termination-notices, rebalance
recommendations, IMDSv2), for the agent's ``NoticePoller`` and the local provider's spot
groups (each of whose instances gets one); tests take it from ``hal.testing.imds``.
``docs/admin/cloud.md`` says what it proves and what it cannot. It serves:

- ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` (1 to 21600;
  400 without or outside): a session token, good that long;
- ``GET /latest/meta-data/...``: 401 without a token it gave that is still good (IMDSv2
  required, as ``HttpTokens=required`` makes it), else:
  - ``spot/instance-action``: 404 until an interruption is injected, then
    ``{"action": "terminate", "time": "2026-11-29T10:42:07Z"}`` (UTC, whole seconds);
  - ``spot/termination-time`` (the legacy path): 404, or the time alone, for a
    ``terminate`` action only;
  - ``events/recommendations/rebalance``: 404, or ``{"noticeTime": "..."}``;
  - ``instance-id`` and ``instance-life-cycle`` (``spot``); any other path 404.

A test injects notices with ``interrupt()`` and ``rebalance()``, or over HTTP (for a
stand-in in another process, such as a control plane's local provider):
``POST /hal/interrupt?action=terminate&in=120`` and ``POST /hal/rebalance``, each
answering ``{"time": UNIX_TIME}``. At an interruption's time the stand-in calls
``on_action(action)`` once (the local provider stops the instance then, as EC2 would).

Run alone: ``python -m hal.cloud.imds [--port N]`` prints its URL.
"""

from __future__ import annotations

import argparse
import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

NOTICE_AHEAD_S = 120.0  # EC2's two-minute warning
MAX_TTL_S = 21600
ACTIONS = ("terminate", "stop", "hibernate")


def ec2_time(unix: float) -> str:
    """EC2's format: UTC, whole seconds, ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


class ImdsStandIn:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        instance_id: str = "i-0123456789abcdef0",
        on_action: Callable[[str], None] | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.on_action = on_action
        self._lock = threading.Lock()
        self._tokens: dict[str, float] = {}  # token → when it expires
        self.action: tuple[str, float] | None = None  # (action, Unix time)
        self.rebalance_time: float | None = None
        self._timer: threading.Timer | None = None
        self.requests = 0  # metadata reads served (tests check the poll's cost)
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="imds-stand-in", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ImdsStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ImdsStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def interrupt(self, action: str = "terminate", in_seconds: float = NOTICE_AHEAD_S) -> float:
        """Mark the instance for ``action`` in ``in_seconds`` (EC2 gives about 120); the
        time, whole seconds as EC2 gives it."""
        if action not in ACTIONS:
            raise ValueError(f"action {action!r}: one of {', '.join(ACTIONS)}")
        when = float(int(time.time() + in_seconds))
        with self._lock:
            self.action = (action, when)
            if self._timer is not None:
                self._timer.cancel()
            if self.on_action is not None:
                self._timer = threading.Timer(max(0.0, when - time.time()), self._act, (action,))
                self._timer.daemon = True
                self._timer.start()
        return when

    def rebalance(self) -> float:
        """Give a rebalance recommendation now; its notice time."""
        with self._lock:
            self.rebalance_time = float(int(time.time()))
            return self.rebalance_time

    def clear(self) -> None:
        with self._lock:
            self.action = None
            self.rebalance_time = None
            if self._timer is not None:
                self._timer.cancel()

    def _act(self, action: str) -> None:
        if self.on_action is not None:
            self.on_action(action)

    def _token(self, ttl_header: str | None) -> tuple[int, str]:
        try:
            ttl = int(ttl_header or "")
        except ValueError:
            return 400, ""
        if not 1 <= ttl <= MAX_TTL_S:
            return 400, ""
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._tokens = {t: e for t, e in self._tokens.items() if e > now}
            self._tokens[token] = now + ttl
        return 200, token

    def _valid(self, token: str | None) -> bool:
        with self._lock:
            return token is not None and self._tokens.get(token, 0.0) > time.monotonic()

    def _document(self, path: str) -> tuple[int, str]:
        with self._lock:
            self.requests += 1
            action, rebalance = self.action, self.rebalance_time
        documents = {
            "instance-id": self.instance_id,
            "instance-life-cycle": "spot",
        }
        if action is not None:
            documents["spot/instance-action"] = json.dumps(
                {"action": action[0], "time": ec2_time(action[1])}
            )
            if action[0] == "terminate":
                documents["spot/termination-time"] = ec2_time(action[1])
        if rebalance is not None:
            documents["events/recommendations/rebalance"] = json.dumps(
                {"noticeTime": ec2_time(rebalance)}
            )
        text = documents.get(path.removeprefix("/latest/meta-data/"))
        return (404, "") if text is None else (200, text)


def _handler(imds: ImdsStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            if self.path != "/latest/api/token":
                return self._answer(404, "")
            self._answer(*imds._token(self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")))

        def do_GET(self) -> None:
            if not self.path.startswith("/latest/meta-data/"):
                return self._answer(404, "")
            if not imds._valid(self.headers.get("X-aws-ec2-metadata-token")):
                return self._answer(401, "")
            self._answer(*imds._document(self.path))

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            try:
                if url.path == "/hal/interrupt":
                    ahead = float(query.get("in", NOTICE_AHEAD_S))
                    when = imds.interrupt(query.get("action", "terminate"), ahead)
                elif url.path == "/hal/rebalance":
                    when = imds.rebalance()
                else:
                    return self._answer(404, "")
            except ValueError as err:
                return self._answer(400, json.dumps({"error": str(err)}))
            self._answer(200, json.dumps({"time": when}))

        def _answer(self, status: int, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")  # as IMDS answers, JSON too
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="an EC2 instance metadata stand-in")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    ns = parser.parse_args()
    imds = ImdsStandIn(ns.host, ns.port).start()
    print(imds.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        imds.stop()


if __name__ == "__main__":
    main()
