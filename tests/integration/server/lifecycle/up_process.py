"""What the `hal up` tests share: starting and stopping `hal up` in a subprocess and
finding its agents and their jobs."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil

from hal.client import HalClient
from hal.testing.live import stop_process, wait_until
from hal.wire.jobs import JobSubmit

ONE_AGENT = ("--agents", "1", "--cpus-per-agent", "1")


def agents_of(data: Path) -> list[psutil.Process]:
    """The running `hal agent` processes whose state directory is under ``data``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "agent" not in cmd:
            continue
        if any(arg.startswith(str(data)) for arg in cmd) and "hal.cli.main" in cmd:
            found.append(proc)
    return found


def start_up(
    data: Path,
    port: int,
    home: Path,
    host: str = "127.0.0.1",
    log: Path | None = None,
    agents: Sequence[str] = ONE_AGENT,
    out: Path | None = None,
) -> tuple[subprocess.Popen[bytes], HalClient]:
    """`hal up` with ``agents``' options (and any other), stderr to ``log`` and stdout
    (its banner) to ``out``; returned once node1 is up."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env.pop("HAL_TOKEN", None)
    args = ["--data-dir", str(data), "--port", str(port), *agents, "--host", host]
    up = subprocess.Popen(
        [sys.executable, "-m", "hal.cli.main", "up", *args],
        env=env,
        stdout=subprocess.DEVNULL if out is None else out.open("wb"),
        stderr=subprocess.DEVNULL if log is None else log.open("wb"),
    )
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    credentials = home / ".config" / "hal" / "credentials.json"

    def up_with_node() -> bool:
        assert up.poll() is None, "hal up stopped"
        try:
            token = json.loads(credentials.read_text())[url]["token"]
            with HalClient(url, token) as c:
                return any(n.name == "node1" and n.state == "UP" for n in c.nodes())
        except Exception:
            return False

    wait_until(up_with_node, 60, 0.2, message="hal up and its agent")
    return up, HalClient(url, json.loads(credentials.read_text())[url]["token"])


def stop_up(up: subprocess.Popen[bytes], client: HalClient, data: Path) -> None:
    """End what ``start_up`` started: the client, `hal up`, and any agent left."""
    client.close()
    stop_process(up)
    for agent in agents_of(data):
        agent.kill()


def wait_for_descendant(up: subprocess.Popen[bytes], text: str) -> list[psutil.Process]:
    """Every process below `hal up` (agents, their fork servers, the jobs' step
    supervisors and processes), once one whose command line holds ``text`` runs."""

    def below() -> list[psutil.Process]:
        return psutil.Process(up.pid).children(recursive=True)

    def found() -> bool:
        with contextlib.suppress(psutil.Error):
            return any(text in " ".join(p.cmdline()) for p in below())
        return False

    wait_until(found, 30, 0.1, message=f"a process running {text}")
    return below()


def job_submit(script: str, workdir: Path, **fields: object) -> JobSubmit:
    return JobSubmit(script=f"#!/bin/sh\n{script}\n", workdir=str(workdir), **fields)  # type: ignore[arg-type]


class AnswersEverything(http.server.BaseHTTPRequestHandler):
    """Another program on the port: it answers 200 to any GET, /healthz included."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass
