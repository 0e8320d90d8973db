"""The cache control plane inside the main server: `hal server --cache-control-plane`
serves the cache contract under /cache, cache nodes register there, and its state lives
in cache.db beside the server's SQLite state, surviving a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
from cachetree import START_TIMEOUT_S, Node, free_port, registered, wait_for

from hal.cache.app import CONTRACT


@contextmanager
def hal_server(data_dir: Path, port: int) -> Iterator[httpx.Client]:
    log = (data_dir / "server.log").open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hal.cli.main",
            "server",
            "--cache-control-plane",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "XDG_CONFIG_HOME": str(data_dir)},
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5.0)
    try:
        wait_for(
            lambda: http.get("/cache/v1/instances").status_code == 200,
            START_TIMEOUT_S,
            "the server's embedded cache control plane",
        )
        yield http
    finally:
        http.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def test_nodes_register_with_the_control_plane_inside_the_server(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/cache/v1"
    # what Node and registered() use of cachetree's ControlPlane: its URL and a client
    plane: Any = SimpleNamespace(url=base, http=httpx.Client(base_url=base, timeout=5.0))
    node = Node(tmp_path, plane, "leaf1", None, "leaf")
    with hal_server(tmp_path, port) as http:
        # HAL's own API keeps asking for a token; the cache contract has none
        assert http.get("/v1/jobs").status_code == 401
        assert http.get("/cache/openapi.yaml").content == CONTRACT.read_bytes()
        node.start()
        try:
            wait_for(lambda: registered(plane, ["leaf1"]), START_TIMEOUT_S, "leaf1 to register")
            assert node.client().set("ds:embedded", b"x" * 100)
            located = wait_for(
                lambda: http.get("/cache/v1/content/locate/ds:embedded").json()["instances"],
                10,
                "the write to reach the content map",
            )
            assert [i["instanceId"] for i in located] == ["leaf1"]
        finally:
            node.kill()  # gone without deregistering: the plane keeps its record
            plane.http.close()
    assert (tmp_path / "cache.db").exists()
    with hal_server(tmp_path, port) as http:  # restarted: the registry is durable
        assert http.get("/cache/v1/instances/leaf1").status_code == 200
        assert http.get("/cache/v1/instances/nosuch").status_code == 404
