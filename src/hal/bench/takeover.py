"""``hal bench cold-takeover``: how long a restarted `hal server` takes to lead after the
leader is killed, when servers refuse to stand by (``--no-standby``) and a restart loop
brings them back, as deploy/systemd's unit did before standbys.

A leader and a standby on one fresh PostgreSQL database, each with its own data folder
and port. The standby is started again every ``--restart`` seconds while another server
holds the database (it exits at once, status 5), as ``Restart=always`` with
``RestartSec`` does. Each round the leader is killed with SIGKILL, and the time until the
standby answers ``/healthz`` is taken; the killed one then becomes the next standby.
This measures the cold takeover (a restart, state read afresh), against which the warm
standby of docs/admin/failover.md (``hal bench failover``) is compared.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hal.bench.replay_cost import cpu_model
from hal.bench.scale import PG_ADMIN, _database, _healthy
from hal.testing.live import free_port, stop_process, wait_until

CONFLICT_EXIT = 5  # another server holds the database (hal.cli's EXIT_CODES)


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "cold-takeover", help="a standby hal server's time to lead after the leader's kill -9"
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--restart", type=float, default=1.0, help="the standby's RestartSec")
    p.add_argument("--db-admin", default=PG_ADMIN, help="a libpq DSN that may create databases")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    from hal.bench import emit

    if ns.rounds < 1 or ns.restart <= 0:
        from hal.core.errors import InvalidRequest

        raise InvalidRequest("--rounds must be ≥ 1 and --restart > 0")
    return emit(run_cold_takeover(ns.rounds, ns.restart, ns.db_admin), ns.json)


class _Server:
    """One of the two: started again every ``restart`` s while another one leads."""

    def __init__(self, db: str, work: Path, restart: float) -> None:
        self.db, self.work, self.restart = db, work, restart
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.next_start = 0.0

    def tend(self) -> None:
        """Start it where it is not running and its restart delay has passed."""
        if self.proc is not None and self.proc.poll() is None:
            return
        if self.proc is not None and self.next_start == 0.0:
            self.next_start = time.monotonic() + self.restart  # (it exited: RestartSec)
        if time.monotonic() < self.next_start:
            return
        args = ["server", "--no-standby", "--db", self.db, "--data-dir", str(self.work)]
        args.append("--port")
        with open(self.work.with_suffix(".log"), "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hal.cli.main", *args, str(self.port)],
                stdout=log,
                stderr=log,
            )
        self.next_start = 0.0

    def kill(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGKILL)
        self.next_start = time.monotonic() + self.restart


def run_cold_takeover(rounds: int, restart: float, db_admin: str) -> dict[str, Any]:
    takeovers: list[float] = []
    with _database(db_admin) as db, tempfile.TemporaryDirectory(prefix="hal-takeover-") as d:
        servers = [_Server(db, Path(d) / name, restart) for name in ("a", "b")]
        try:
            leader, standby = servers
            leader.tend()
            wait_until(lambda: _healthy(leader.url), timeout=60, message="the first leader")
            for _ in range(rounds):
                # the standby refused at least once (it waits on the leader's lock)
                deadline = time.monotonic() + 60
                while standby.proc is None or standby.proc.returncode != CONFLICT_EXIT:
                    standby.tend()
                    if standby.proc is not None:
                        standby.proc.poll()
                    if time.monotonic() > deadline:
                        raise RuntimeError("the standby never met the leader's lock")
                    time.sleep(0.05)
                t0 = time.monotonic()
                leader.kill()
                while not _healthy(standby.url):
                    standby.tend()
                    time.sleep(0.02)
                takeovers.append(time.monotonic() - t0)
                leader, standby = standby, leader
        finally:
            for server in servers:
                if server.proc is not None:
                    stop_process(server.proc)
    return {
        "cpu": cpu_model(),
        "rounds": rounds,
        "restart_s": restart,
        "takeover_s": [round(t, 3) for t in takeovers],
        "takeover_median_s": round(statistics.median(takeovers), 3),
    }
