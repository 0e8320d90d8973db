"""Real cache processes for integration tests: a control plane and trees of cache nodes.

Everything listens on free ports of 127.0.0.1, every wait is bounded, and every process is
stopped by the fixture that started it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis

PYTHON = sys.executable
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        try:
            last = predicate()
            if last:
                return last
        except Exception as err:  # the thing we wait for may not be up yet
            last = err
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Proc:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "hal.cli.cache", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


class ControlPlane(Proc):
    def __init__(self, tmp: Path, db_url: str | None = None, *extra: str) -> None:
        self.port = free_port()
        self.db_url = db_url or f"sqlite:///{tmp / 'cp.db'}"
        self.url = f"http://127.0.0.1:{self.port}/v1"
        super().__init__(
            [
                "cache",
                "control-plane",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--db",
                self.db_url,
                "--heartbeat-interval-ms",
                "300",
                *extra,
            ],
            tmp / f"cp-{self.port}.log",
        )
        self.http = httpx.Client(base_url=self.url, timeout=5.0)

    def start(self) -> None:
        super().start()
        wait_for(
            lambda: self.http.get("/instances").status_code == 200,
            START_TIMEOUT_S,
            "the control plane to answer",
        )

    def holders(self, key: str, source: str | None = None) -> list[str]:
        from urllib.parse import quote

        params = {"sourceInstanceId": source} if source else {}
        body = self.http.get(f"/content/locate/{quote(key, safe='')}", params=params).json()
        return [i["instanceId"] for i in body["instances"]]


class Node(Proc):
    def __init__(
        self,
        tmp: Path,
        cp: ControlPlane,
        iid: str,
        parent: str | None = None,
        tier: str | None = None,
        *extra: str,
    ) -> None:
        self.iid = iid
        self.port = free_port()
        args = [
            "cache",
            "node",
            "--instance-id",
            iid,
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(self.port),
            "--control-plane-events-url",
            cp.url + "/events",
            "--state-dir",
            str(tmp / "state"),
            "--pull-timeout",
            "2",
            "--ack-wait",
            "1",
            *extra,
        ]
        if parent:
            args += ["--parent-id", parent]
        if tier:
            args += ["--tier", tier]
        super().__init__(args, tmp / f"node-{iid}.log")

    def start(self) -> None:
        super().start()
        wait_for(lambda: self.client().ping(), START_TIMEOUT_S, f"cache node {self.iid}")

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=10, socket_connect_timeout=5, **kwargs
        )

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), *args],
            capture_output=True,
            timeout=15,
            check=True,
        )
        return out.stdout.decode().strip()


def start_all(procs: list[Proc]) -> None:
    """Start in parallel (each Python start-up takes a while on a small machine)."""
    for p in procs:
        Proc.start(p)
    for p in procs:
        if isinstance(p, Node):
            wait_for(lambda p=p: p.client().ping(), START_TIMEOUT_S, f"cache node {p.iid}")
        elif isinstance(p, ControlPlane):
            wait_for(
                lambda p=p: p.http.get("/instances").status_code == 200,
                START_TIMEOUT_S,
                "the control plane",
            )


def tails(procs: list[Proc], lines: int = 15) -> str:
    """The last lines of each process's log, for a failure message."""
    out = []
    for p in procs:
        text = p.log.read_text(errors="replace") if p.log.exists() else "(no log)"
        out.append(f"--- {p.log.name} (exit {p.proc and p.proc.poll()}):")
        out.extend(text.splitlines()[-lines:])
    return "\n".join(out)


def registered(cp: ControlPlane, ids: list[str]) -> bool:
    found = {i["id"] for i in cp.http.get("/instances").json()["instances"]}
    return set(ids) <= found


def start_nodes(cp: ControlPlane, nodes: list[Node], timeout: float = START_TIMEOUT_S) -> None:
    """Start ``nodes`` (their control plane already up) and wait until every one is
    registered and knows its parent chain: a node that joined before its parent
    registered completes its chain on a heartbeat."""
    start_all(list(nodes))
    try:
        wait_for(lambda: registered(cp, [n.iid for n in nodes]), timeout, "every node registered")
        for node in nodes:
            wait_for(
                lambda node=node: node.client().info("server")["hal_chain_complete"] == 1,
                timeout,
                f"{node.iid} to know its parent chain",
            )
    except AssertionError as err:
        raise AssertionError(f"{err}\n{tails([cp, *nodes])}") from None


class Tree:
    """root ─┬─ b1 ─┬─ l1
    │      └─ l2
    └─ b2 ─── l3"""

    def __init__(self, tmp: Path, *cp_args: str, node_args: tuple[str, ...] = ()) -> None:
        self.cp = ControlPlane(tmp, None, *cp_args)
        self.nodes = {
            "root": Node(tmp, self.cp, "root", None, "root", *node_args),
            "b1": Node(tmp, self.cp, "b1", "root", "branch", *node_args),
            "b2": Node(tmp, self.cp, "b2", "root", "branch", *node_args),
            "l1": Node(tmp, self.cp, "l1", "b1", "leaf", *node_args),
            "l2": Node(tmp, self.cp, "l2", "b1", "leaf", *node_args),
            "l3": Node(tmp, self.cp, "l3", "b2", "leaf", *node_args),
        }

    def __getitem__(self, iid: str) -> Node:
        return self.nodes[iid]

    def start(self) -> None:
        self.cp.start()
        start_nodes(self.cp, list(self.nodes.values()))

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()
        self.cp.kill()
