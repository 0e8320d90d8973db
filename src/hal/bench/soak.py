"""``hal bench soak``: a cluster run for ``--minutes`` under chaos, then checked from its
database (docs/admin/failover.md, issue 56's soak).

Three `hal server` processes on one fresh PostgreSQL database (``hal bench failover``'s
servers), ``--nodes`` emulated nodes in ``--emulators`` ``hal emulate`` processes and one
real ``hal agent`` (``--no-agent``: none), every one of them given all three addresses.
A client thread submits ``--rate`` jobs a second in batches through ``HalClient`` with
all the addresses (each batch with its own ``Idempotency-Key``, resent with it across a
takeover) and keeps every id it was told was accepted. Each job sleeps 5-30 s (a timer
on an emulated node, ``sleep`` on the real one). The chaos, at fixed shares of the run:

- 10 %, 40 %, 75 %: an emulator process is killed (-9); its nodes time out and their
  jobs end as NODE_FAIL; it comes back 45 s later (or a twentieth of the run);
- 25 % and 65 %: the leader is killed (-9); the time until another server leads is
  ``takeover_s``; the killed server is started again on its address (as systemd's
  ``Restart=always`` does), and stands by;
- 50 %: PostgreSQL restarts (``--pg-restart CMD``, e.g. ``pg_ctlcluster 15 soak
  restart`` on a cluster of the bench's own), or, without it, every ``hal-server``
  session on the database is ended (``pg_terminate_backend``).

A server that exits on its own (fenced after the database went away) is started again
too, and said so in ``chaos``. Submissions stop at 85 %; the rest of the run lets the
queue drain (``drained``: when it did) and the idle cluster run on. Then everything
stops and ``hal.bench.soak_invariants`` reads the database.
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from hal.bench.failover import ServerProcess, takeover_phases
from hal.bench.replay_cost import cpu_model
from hal.bench.scale import PG_ADMIN, _database, make_tokens
from hal.bench.soak_invariants import check
from hal.testing.live import stop_process, wait_until

NODE_TIMEOUT_S = 20  # emulated nodes that stop answering are DOWN after this
RETURN_S = 45.0  # an emulator killed comes back after this (or a twentieth of the run)
DROPS = (0.10, 0.40, 0.75)  # shares of the run at which an emulator is killed
KILLS = (0.25, 0.65)  # ... the leader is killed
PG_RESTART = 0.50  # ... PostgreSQL restarts
STOP_SUBMITTING = 0.85


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "soak",
        help="3 servers, emulated nodes, steady submissions, chaos; the database checked",
    )
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--nodes", type=int, default=200, help="emulated nodes, in all")
    p.add_argument("--emulators", type=int, default=4, help="hal emulate processes")
    p.add_argument("--rate", type=float, default=5.0, help="jobs submitted per second")
    p.add_argument("--batch", type=int, default=10, help="jobs per submission")
    p.add_argument("--no-agent", action="store_true", help="no real hal agent")
    p.add_argument(
        "--pg-restart",
        metavar="CMD",
        help="a shell command that restarts the database's PostgreSQL (default: end the "
        "servers' sessions with pg_terminate_backend instead)",
    )
    p.add_argument("--db-admin", default=PG_ADMIN, help="a libpq DSN that may create databases")
    p.add_argument(
        "--keep",
        metavar="FILE",
        help="keep the database, and write the acknowledged ids to FILE (one a line), "
        "for python -m hal.bench.soak_invariants DB --acked FILE",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    from hal.bench import emit
    from hal.core.errors import InvalidRequest

    if ns.minutes < 1 or ns.emulators < 3 or ns.nodes < ns.emulators or ns.rate <= 0:
        raise InvalidRequest(
            "--minutes at least 1, --emulators at least 3 (three drop out in turn), "
            "--nodes at least --emulators, --rate above 0"
        )
    if ns.batch < 1:
        raise InvalidRequest("--batch: at least 1 job per submission")
    result = run_soak(
        minutes=ns.minutes,
        nodes=ns.nodes,
        emulators=ns.emulators,
        rate=ns.rate,
        batch=ns.batch,
        agent=not ns.no_agent,
        pg_restart=ns.pg_restart,
        db_admin=ns.db_admin,
        keep=ns.keep,
    )
    emit(result, ns.json)
    return 0 if result["invariants"]["ok"] else 1


def _say(line: str) -> None:
    print(f"hal bench soak: {line}", file=sys.stderr, flush=True)


class _Submitter:
    """Batches of sleeping jobs at a steady rate, through every address; the ids the
    client was given back, and the batches that failed (never resent under a new key:
    a job sent twice would be two jobs)."""

    def __init__(self, urls: list[str], token: str, rate: float, batch: int) -> None:
        from hal.client import HalClient

        self.client = HalClient(",".join(urls), token)
        self.every = batch / rate
        self.batch = batch
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.slowest_s = 0.0
        self.stop = threading.Event()
        self._rng = random.Random(56)

    def run(self) -> None:
        from hal.wire.submit import JobSubmit

        sent = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            jobs = []
            for _ in range(self.batch):
                seconds = self._rng.randint(5, 30)
                script = f"#!/bin/sh\n#HAL_EMULATE runtime={seconds}\nsleep {seconds}\n"
                jobs.append(
                    JobSubmit(
                        script=script, workdir="/tmp", name=f"soak-{sent}", time_limit_seconds=600
                    )
                )
                sent += 1
            t = time.monotonic()
            try:
                self.acked += [r.job_id for r in self.client.submit_many(jobs)]
            except Exception as err:  # counted; the run goes on
                self.failed.append(f"{type(err).__name__}: {err}"[:300])
            self.slowest_s = max(self.slowest_s, time.monotonic() - t)
            next_at += self.every
            self.stop.wait(max(0.0, next_at - time.monotonic()))


class _Cluster:
    """The processes, and bringing them back."""

    def __init__(self, db: str, work: Path, nodes: int, emulators: int) -> None:
        self.db, self.work = db, work
        self.admin, self.agent_token = make_tokens(db)
        self.config = work / "hal.toml"
        self.config.write_text(
            f"node_timeout_seconds = {NODE_TIMEOUT_S}\n"
            "heartbeat_interval_seconds = 5\n"
            "[[partitions]]\n"
            'name = "soak"\n'
            "default = true\n"
            f'nodes = "emu[1-{nodes}],real1"\n'
        )
        self.servers = [self._server(i) for i in range(3)]
        self.urls = [s.url for s in self.servers]
        share = nodes // emulators
        self.slices = [
            (1 + k * share, share if k < emulators - 1 else nodes - k * share)
            for k in range(emulators)
        ]
        self.emulators: list[subprocess.Popen[bytes] | None] = [None] * emulators
        self.agent: subprocess.Popen[bytes] | None = None

    def _server(self, i: int, port: int | None = None) -> ServerProcess:
        extra = ("--config", str(self.config))
        return ServerProcess(self.db, self.work / f"s{i}", *extra, port=port)

    def restart_server(self, i: int) -> None:
        self.servers[i] = self._server(i, self.servers[i].port)

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "HAL_TOKEN": self.agent_token}
        with open(self.work / log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "hal.cli.main", *args],
                env=env,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )

    def start_emulator(self, k: int) -> None:
        first, count = self.slices[k]
        servers = [a for url in self.urls for a in ("--server", url)]
        args = ["emulate", *servers, "--nodes", str(count), "--first", str(first)]
        args += ["--cpus", "16", "--memory", "32G", "--log-level", "warning"]
        self.emulators[k] = self._spawn(args, f"emulate-{k}.log")

    def start_agent(self) -> None:
        servers = [a for url in self.urls for a in ("--server", url)]
        args = ["agent", *servers, "--name", "real1", "--cpus", "2", "--memory", "2G"]
        args += ["--state-dir", str(self.work / "agent"), "--unknown-users-as-agent"]
        self.agent = self._spawn(args, "agent.log")

    def leader(self) -> int | None:
        for i, server in enumerate(self.servers):
            if server.proc.poll() is None and server.role() == "leader":
                return i
        return None

    def stop(self) -> None:
        for proc in [*self.emulators, self.agent]:
            if proc is not None:
                stop_process(proc)
        for server in self.servers:
            stop_process(server.proc)


def run_soak(
    *,
    minutes: float,
    nodes: int = 200,
    emulators: int = 4,
    rate: float = 5.0,
    batch: int = 10,
    agent: bool = True,
    pg_restart: str | None = None,
    db_admin: str = PG_ADMIN,
    keep: str | None = None,
) -> dict[str, Any]:
    duration = minutes * 60
    chaos: list[dict[str, Any]] = []
    takeovers: list[float] = []
    # the client's patience across a takeover and a database restart
    os.environ.setdefault("HAL_FAILOVER_TIMEOUT", "120")
    os.environ.setdefault("HAL_RETRY_SECONDS", "120")
    with (
        _database(db_admin, keep=keep is not None) as db,
        tempfile.TemporaryDirectory(prefix="hal-soak-") as d,
    ):
        os.environ.setdefault("XDG_CACHE_HOME", d)  # (the client's leader file)
        cluster = _Cluster(db, Path(d), nodes, emulators)
        submitter: _Submitter | None = None
        began = time.monotonic()

        def event(kind: str, **what: Any) -> None:
            chaos.append({"t_s": round(time.monotonic() - began, 1), "event": kind, **what})
            _say(f"{chaos[-1]}")

        try:
            wait_until(
                lambda: cluster.leader() is not None,
                timeout=180,
                interval=0.5,
                message="a server to lead",
            )
            for k in range(emulators):
                cluster.start_emulator(k)
            if agent:
                cluster.start_agent()
            submitter = _Submitter(cluster.urls, cluster.admin, rate, batch)
            wait_until(
                lambda: (
                    sum(n.state == "UP" for n in submitter.client.nodes())
                    >= nodes + (1 if agent else 0)
                ),
                timeout=300,
                interval=2,
                message="the nodes to register",
            )
            began = time.monotonic()
            event("start", nodes=nodes, agent=agent)
            feeder = threading.Thread(target=submitter.run, name="submit", daemon=True)
            feeder.start()
            back_after = max(RETURN_S, duration / 20)
            plan = sorted(
                [(s * duration, "drop", k) for k, s in enumerate(DROPS)]
                + [(s * duration, "kill", 0) for s in KILLS]
                + [(PG_RESTART * duration, "pg", 0), (STOP_SUBMITTING * duration, "end", 0)]
            )
            returns: list[tuple[float, int]] = []
            killed: set[int] = set()
            drained = False
            while time.monotonic() - began < duration:
                now = time.monotonic() - began
                for i, server in enumerate(cluster.servers):
                    code = server.proc.poll()
                    if code is not None and i not in killed:
                        event("server_exited", server=i, code=code, restarted=True)
                        cluster.restart_server(i)
                for at, k in [r for r in returns if r[0] <= now]:
                    cluster.start_emulator(k)
                    returns.remove((at, k))
                    event("nodes_back", emulator=k, nodes=cluster.slices[k][1])
                if plan and plan[0][0] <= now:
                    _, what, k = plan.pop(0)
                    if what == "drop":
                        proc = cluster.emulators[k]
                        assert proc is not None
                        proc.send_signal(signal.SIGKILL)
                        proc.wait(30)
                        returns.append((now + back_after, k))
                        event("nodes_dropped", emulator=k, nodes=cluster.slices[k][1])
                    elif what == "kill":
                        takeovers.append(_kill_leader(cluster, killed, event))
                    elif what == "pg":
                        _restart_database(cluster, pg_restart, db_admin, event)
                    else:
                        submitter.stop.set()
                        event("submissions_stopped", acknowledged=len(submitter.acked))
                if submitter.stop.is_set() and not drained and _active(db) == 0:
                    drained = True  # (the run goes on to its end: a soak lasts --minutes)
                    event("drained")
                time.sleep(0.5)
            submitter.stop.set()
            feeder.join(180)
            elapsed = time.monotonic() - began
            left_active = _active(db)
        finally:
            if submitter is not None:
                submitter.stop.set()
            cluster.stop()
        assert submitter is not None
        found = check(db, submitter.acked)
        if keep is not None:
            Path(keep).write_text("".join(f"{i}\n" for i in submitter.acked))
    return {
        "bench": "soak",
        "database": db if keep is not None else None,
        "cpu": cpu_model(),
        "duration_s": round(elapsed, 1),
        "nodes": nodes,
        "emulators": emulators,
        "real_agent": agent,
        "rate_per_s": rate,
        "acknowledged": len(submitter.acked),
        "failed_batches": len(submitter.failed),
        "failures": submitter.failed[:5],
        "slowest_submit_s": round(submitter.slowest_s, 2),
        "lost": found["lost"],
        "duplicated": found["duplicated"],
        "ran_twice": found["ran_twice"],
        "active_at_end": left_active,
        "takeover_s": [round(t, 2) for t in takeovers],
        "database_restart": "command" if pg_restart else "pg_terminate_backend",
        "chaos": chaos,
        "invariants": found,
    }


def _kill_leader(cluster: _Cluster, killed: set[int], event: Any) -> float:
    """Kill -9 the leader, time until another leads, start the killed one again."""
    leader = cluster.leader()
    if leader is None:
        wait_until(lambda: cluster.leader() is not None, timeout=120, interval=0.2)
        leader = cluster.leader()
    assert leader is not None
    killed.add(leader)
    gone = cluster.servers[leader]
    t, at = time.monotonic(), time.time()
    gone.proc.send_signal(signal.SIGKILL)
    gone.proc.wait(30)
    wait_until(
        lambda: cluster.leader() not in (None, leader),
        timeout=120,
        interval=0.05,
        message="a standby to lead",
    )
    took = time.monotonic() - t
    new = cluster.leader()
    answered = time.time()
    successor = cluster.servers[new] if new is not None else None
    if successor is not None:  # (its line comes just after it leads)
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: successor.steps() is not None, timeout=5)
    event(
        "leader_killed",
        server=leader,
        takeover_s=round(took, 2),
        new=new,
        steps=None if successor is None else successor.steps(),
        phases=None if successor is None else takeover_phases(successor, at, answered),
    )
    cluster.restart_server(leader)
    killed.discard(leader)
    return took


def _restart_database(cluster: _Cluster, command: str | None, admin: str, event: Any) -> None:
    """Restart PostgreSQL with ``command``, or end the servers' sessions; then time until
    a server leads again."""
    import psycopg

    t = time.monotonic()
    if command:
        done = subprocess.run(shlex.split(command), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"--pg-restart {command!r} failed: {done.stderr.strip()}")
        how = command
    else:
        name = cluster.db.rsplit("/", 1)[1]
        with psycopg.connect(admin, autocommit=True) as conn:
            ended = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND application_name LIKE 'hal-server%%'",
                (name,),
            ).fetchone()
        how = f"pg_terminate_backend of {ended[0] if ended else 0} hal-server sessions"
    wait_until(lambda: cluster.leader() is not None, timeout=180, interval=0.2)
    event("database_restarted", how=how, leader_again_s=round(time.monotonic() - t, 2))


def _active(db: str) -> int:
    """Jobs not finished yet, read from the database."""
    import psycopg

    from hal.bench.soak_invariants import ACTIVE

    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT count(*) FROM jobs WHERE state = ANY(%s)", (list(ACTIVE),)
        ).fetchone()
    return int(row[0]) if row else 0
