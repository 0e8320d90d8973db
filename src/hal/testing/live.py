"""A real HAL control plane and real agents for integration tests and benchmarks.

    with LiveServer(tmp_path) as server:          # uvicorn on a free port, fresh SQLite
        with server.agents(2, cpus=4):            # `hal agent` processes
            client = server.client()
            ...

Nothing is mocked: HTTP goes over loopback, jobs run as real processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from hal.client import HalClient
from hal.compat.time_limits import EXACT_SECONDS_VARIABLE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    predicate: Callable[[], bool],
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition",
) -> None:
    """Poll ``predicate`` until true; fail after ``timeout`` (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {message}")


class LiveServer:
    """``HalServer`` in a background thread (its own event loop) on 127.0.0.1."""

    def __init__(
        self,
        data_dir: Path,
        *,
        db_url: str | None = None,
        config_overrides: dict[str, object] | None = None,
        port: int | None = None,
        config_file: Path | None = None,
    ) -> None:
        from hal.server.control_plane import sqlite_url

        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url or sqlite_url(self.data_dir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_overrides = config_overrides or {}
        # a hal.toml the server starts from (and re-reads on ``scontrol reconfigure``), as
        # `hal server --config FILE`; the overrides apply over it at start only
        self.config_file = config_file
        self.token = ""
        # the agents' token (``start_agent``): an agent token, as a real node holds; ""
        # when this server was given the token of another on the same database (a
        # restart), whose agents keep theirs; new agents then use the admin's
        self.agent_token = ""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._agents: list[subprocess.Popen[bytes]] = []
        self.server: object | None = None

    def __enter__(self) -> LiveServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        from hal.api.server import HalServer
        from hal.config.model import HalConfig, load_config
        from hal.server.users import ensure_user
        from hal.state.store import SqlStateStore

        base = HalConfig() if self.config_file is None else load_config(self.config_file)
        fields = {f: getattr(base, f) for f in base.__slots__}
        fields.update(self.config_overrides)
        config = HalConfig(**fields)
        if not self.token:
            store = SqlStateStore(self.db_url)
            try:
                token = ensure_user(store, "admin", admin=True, now=time.time())
                agents = ensure_user(store, "live-agents", admin=False, now=time.time(), agent=True)
            finally:
                store.close()
            assert token is not None and agents is not None
            self.token, self.agent_token = token, agents
        ready = threading.Event()

        def run() -> None:
            loop: asyncio.AbstractEventLoop
            try:
                import uvloop

                loop = uvloop.new_event_loop()
            except ImportError:
                loop = asyncio.new_event_loop()
            self._loop = loop
            self._stop = asyncio.Event()
            server = HalServer(
                config, self.db_url, data_dir=self.data_dir, config_path=self.config_file
            )
            self.server = server
            ready.set()
            try:
                loop.run_until_complete(server.serve("127.0.0.1", self.port, self._stop))
            except BaseException as err:  # surfaced by wait_ready
                self._error = err
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="hal-live-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        self.wait_ready()

    def wait_ready(self, timeout: float = 20.0) -> None:
        import httpx

        from hal.testing import http

        def healthy() -> bool:
            if self._error is not None:
                raise RuntimeError("server failed to start") from self._error
            try:
                return http.get(self.url + "/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout, message="the control plane to answer /healthz")

    def stop(self) -> None:
        self.stop_agents()
        self.end_fork_servers()
        loop = self._loop
        if loop is not None and self._stop is not None:
            try:
                loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                # a server that stopped by itself (fenced, failed) has closed its loop
                if not loop.is_closed():
                    raise
        if self._thread is not None:
            self._thread.join(20)
        self._thread = self._loop = None  # stopped: a second stop does nothing

    def client(self, token: str | None = None) -> HalClient:
        return HalClient(self.url, token or self.token)

    def env(self) -> dict[str, str]:
        """The commands' environment. ``HAL_EXACT_TIME_LIMITS=1``: ``-t 0:03`` is 3 s, not
        Slurm's whole minute (``hal.compat.time_limits``), so a test waits out a limit in
        seconds; a test of the rounding drops it."""
        return {
            **os.environ,
            "HAL_URL": self.url,
            "HAL_TOKEN": self.token,
            EXACT_SECONDS_VARIABLE: "1",
        }

    def cli(
        self,
        *args: str,
        token: str | None = None,
        input_text: str | None = None,
        cwd: Path | None = None,
        timeout: float = 120.0,
        umask: int = -1,
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``hal ARGS`` as a user would, against this server (its admin token unless
        ``token`` is given; with ``umask`` unless -1); never raises on a non-zero exit."""
        env = self.env() if token is None else {**self.env(), "HAL_TOKEN": token}
        return subprocess.run(
            [sys.executable, "-m", "hal.cli.main", *args],
            env=env,
            text=True,
            capture_output=True,
            input=input_text,
            cwd=cwd,
            timeout=timeout,
            check=False,
            umask=umask,
        )

    def start_agent(
        self,
        name: str,
        *,
        cpus: int = 2,
        memory: str = "2G",
        extra: list[str] | None = None,
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """``hal agent`` for node ``name`` with ``token`` (default: ``agent_token``), and
        ``env`` added to its environment."""
        state_dir = self.data_dir / "agents" / name
        cmd = [
            sys.executable,
            "-m",
            "hal.cli.main",
            "agent",
            "--server",
            self.url,
            "--name",
            name,
            "--cpus",
            str(cpus),
            "--memory",
            memory,
            "--state-dir",
            str(state_dir),
            # the tests' users (admin, alice, ...) are no Unix users; as root, the
            # agent refuses their jobs without this
            "--unknown-users-as-agent",
            *(extra or []),
        ]
        log = open(self.data_dir / f"agent-{name}.log", "ab")  # noqa: SIM115 - owned by proc
        environ = {
            **self.env(),
            **(env or {}),
            "HAL_TOKEN": token or self.agent_token or self.token,
        }
        proc = subprocess.Popen(
            cmd, env=environ, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._agents.append(proc)
        return proc

    @contextmanager
    def agents(
        self,
        count: int,
        *,
        cpus: int = 2,
        memory: str = "2G",
        prefix: str = "node",
        extra: list[str] | None = None,
    ) -> Iterator[list[subprocess.Popen[bytes]]]:
        procs = [
            self.start_agent(f"{prefix}{i}", cpus=cpus, memory=memory, extra=extra)
            for i in range(1, count + 1)
        ]
        names = {f"{prefix}{i}" for i in range(1, count + 1)}
        with self.client() as c:
            wait_until(
                lambda: names <= {n.name for n in c.nodes() if n.state == "UP"},
                message=f"agents {sorted(names)} to register",
            )
        try:
            yield procs
        finally:
            for p in procs:
                stop_process(p)

    def job_started(self, node: str, job_id: int, attempt: int = 0) -> tuple[int, float] | None:
        """The pid of the job's batch shell and its start time once the job has started on
        ``node``'s agent (its step supervisor's ``started`` file), else ``None``. The server
        says RUNNING when it sends a job to its node, before the agent starts it: a test
        that signals the job's processes, or counts from its start, waits for this."""
        from hal.agent.supervisor import read_started

        return read_started(str(self.data_dir / "agents" / node / "jobs" / f"{job_id}.{attempt}"))

    def wait_job_started(self, node: str, job_id: int, attempt: int = 0) -> tuple[int, float]:
        """``job_started`` once it is there. Even a job seen writing its output may not
        have it yet: its supervisor writes the file after the exec, when it next runs."""
        wait_until(
            lambda: self.job_started(node, job_id, attempt) is not None,
            message=f"job {job_id} to start on {node}",
        )
        started = self.job_started(node, job_id, attempt)
        assert started is not None
        return started

    def add_users(self, *names: str) -> dict[str, str]:
        """Create users (not administrators); their tokens by name."""
        with self.client() as admin:
            return {name: admin.add_user(name).token for name in names}

    def stop_agents(self) -> None:
        for p in self._agents:
            stop_process(p)
        self._agents = []

    def end_fork_servers(self) -> None:
        """Kill the fork servers of this server's agents and the jobs under them. An agent
        that stops leaves them running by design (a restarted agent re-adopts its jobs);
        a test's cluster takes them down with it instead of leaving them on the machine.
        They are known by the ``HAL_URL`` they inherited from the agent (``env``); one whose
        agent still runs (a test keeps it across a server restart) is left alone."""
        import psutil

        for proc in psutil.process_iter(["cmdline"]):
            try:
                if "hal.agent.forkserver" not in (proc.info["cmdline"] or ()):
                    continue
                if proc.environ().get("HAL_URL") != self.url:
                    continue
                parent = proc.parent()
                above = parent.cmdline() if parent is not None else []
                if "hal.cli.main" in above or "hal.agent.forkserver" in above:
                    continue  # its agent runs; or a fork server's own child, ended with it
                for member in [*proc.children(recursive=True), proc]:
                    member.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue


def tree_stopped(pid: int) -> bool:
    """Whether ``pid`` and every process below it are stopped (SIGSTOP, state ``T`` in
    ``/proc``; an exited child not yet reaped counts too, and ``pid`` waiting in state
    ``D`` on a stopped vfork child): none of them can make progress. False while one of
    them runs, or once ``pid`` is gone."""
    from hal.agent.procfs import descendants

    def state(p: int) -> str:
        try:
            return Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "gone"

    below = descendants(pid)
    # a child that has exited (a zombie, or reaped meanwhile) runs no more either
    if not all(state(p) in ("T", "t", "Z", "gone") for p in below):
        return False
    # a shell that vforked a child which was stopped before its exec waits in state D
    # (uninterruptible) until the child goes on: stopped too, its SIGSTOP pending
    return state(pid) in ("T", "t") or (state(pid) == "D" and bool(below))


def stop_process(
    proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 15
) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    except ProcessLookupError:
        pass
