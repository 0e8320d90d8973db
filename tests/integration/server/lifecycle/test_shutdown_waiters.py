"""Requests that wait by design (an agent's sync and output polls, a followed event
stream) are answered when the server stops, instead of holding its graceful shutdown
until uvicorn's timeout cancels them (5 s per stop, and a traceback in the log)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from hal.testing import http
from hal.testing.live import LiveServer


def test_held_requests_are_answered_when_the_server_stops(tmp_path: Path) -> None:
    live = LiveServer(tmp_path)
    live.start()
    auth = {"Authorization": f"Bearer {live.token}"}
    node = {"node": "n1", "cpus": 1, "memory_bytes": 2**30}
    assert http.post(live.url + "/v1/agent/register", json=node, headers=auth).status_code == 200
    answers: dict[str, int | str] = {}

    def hold(name: str, method: str, path: str, body: dict[str, object] | None = None) -> None:
        try:
            if method == "STREAM":
                with http.stream("GET", live.url + path, headers=auth, timeout=60) as r:
                    for _ in r.iter_bytes():
                        pass
                    answers[name] = r.status_code
            else:
                answers[name] = http.post(
                    live.url + path, json=body, headers=auth, timeout=60
                ).status_code
        except httpx.HTTPError as err:
            answers[name] = type(err).__name__

    held = [
        threading.Thread(
            target=hold, args=("sync", "POST", "/v1/agent/n1/sync", {"wait_seconds": 60})
        ),
        threading.Thread(
            target=hold, args=("output", "POST", "/v1/agent/n1/output", {"wait_seconds": 30})
        ),
        threading.Thread(target=hold, args=("events", "STREAM", "/v1/events?follow=true")),
    ]
    for t in held:
        t.start()
    threading.Event().wait(1.0)  # the three are now held by the server
    assert answers == {}
    live.stop()
    for t in held:
        t.join(10)
    assert answers == {"sync": 200, "output": 200, "events": 200}
