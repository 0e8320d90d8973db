"""``hal bench failover``: warm standby servers under a submission burst, the leader
killed in the middle of it, then its successor (docs/admin/failover.md).

Two or three `hal server` processes on one fresh PostgreSQL database, each with its own
data folder and port. A client thread submits ``--jobs`` held jobs in batches through
``POST /v1/jobs/batch``, each batch with its own ``Idempotency-Key``; when its leader
stops answering, or answers as a standby, it finds the leader through ``GET /v1/ha`` on
every address and sends the same batch again with the same key. Meanwhile the leader is
killed with SIGKILL each time another share of the burst is acknowledged (``--kills``),
and the time until another server answers ``/v1/ha`` as the leader is taken, with the
new leader's own account of its takeover's steps (``takeover_steps``, from its log).
``--nodes N``: one ``hal emulate`` process presents N nodes (16 CPUs each) to every
address; every tenth job is not held but runs there for an hour (a timer), and as
many run a second and end, so the servers carry running jobs (their agents re-attach
at each takeover) and a history (the predictor's and the fair share's). At the end
the database is read: every acknowledged job must be there, once.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from hal.bench.replay_cost import cpu_model
from hal.bench.scale import PG_ADMIN, _database, make_tokens
from hal.testing import http
from hal.testing.live import free_port, stop_process, wait_until

FIND_LEADER_S = 60.0  # how long the client looks for a leader before it gives up
# the counts of the takeover line the bench reports beside its steps
STEP_COUNTS = ("jobs", "jobs_read_ahead", "runs", "runs_read_ahead")
SCRIPT = "#!/bin/sh\ntrue\n"  # ``--history``'s runs' script


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "failover",
        help="standby servers: a submission burst, the leader killed mid-burst, twice",
    )
    p.add_argument("--servers", type=int, default=3, help="hal server processes (2 or 3)")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=100, help="jobs per batch submission")
    p.add_argument("--kills", type=int, default=2, help="leaders killed during the burst")
    p.add_argument(
        "--nodes",
        type=int,
        default=0,
        help="emulated nodes (one hal emulate process); every tenth job runs on them",
    )
    p.add_argument(
        "--history",
        type=int,
        default=0,
        help="finished runs written to the database before the servers start (the fair "
        "share's history, which each takeover charges)",
    )
    p.add_argument("--db-admin", default=PG_ADMIN, help="a libpq DSN that may create databases")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    from hal.bench import emit
    from hal.core.errors import InvalidRequest

    if ns.servers not in (2, 3) or ns.jobs < 1 or ns.batch < 1:
        raise InvalidRequest("--servers takes 2 or 3; --jobs and --batch at least 1")
    if not 1 <= ns.kills < ns.servers:
        raise InvalidRequest(
            "--kills: at least 1, and fewer than --servers (each kill needs a standby left)"
        )
    result = run_failover(
        ns.servers, ns.jobs, ns.batch, ns.kills, ns.db_admin, ns.nodes, history=ns.history
    )
    return emit(result, ns.json)


class ServerProcess:
    """One `hal server` process; ``port`` given: a restart of a server on its address
    (``hal bench soak`` brings a killed server back, as systemd's ``Restart=always``)."""

    def __init__(self, db: str, work: Path, *extra: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work.with_suffix(".log")
        args = ["server", "--db", db, "--data-dir", str(work), "--port", str(self.port), *extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hal.cli.main", *args], stdout=log, stderr=log
            )

    def start_s(self) -> float | None:
        """From its log: how long its last takeover took from the lock to leading (the
        state's load), as ``hal.server.standby.stand_by`` logs it."""
        found = re.findall(r"serving as the leader ([0-9.]+) s after", self.log.read_text())
        return float(found[-1]) if found else None

    def steps(self) -> dict[str, float] | None:
        """From its log: the seconds of each step of its last takeover (the control
        plane's "the takeover's steps" line, its ``takeover_steps``), with the jobs it
        loaded (``jobs``) and of those the ones it had read ahead (``jobs_read_ahead``),
        and the finished runs the fair share charged (``runs``) and of those the ones it
        had read ahead (``runs_read_ahead``)."""
        last = None
        for line in self.log.read_text().splitlines():
            if "takeover_steps" in line:
                with contextlib.suppress(ValueError, TypeError):
                    said = json.loads(line)
                    last = {**said["takeover_steps"]}
                    last.update({k: said[k] for k in STEP_COUNTS if k in said})
        return last

    def logged_at(self, says: str) -> float | None:
        """From its log: when (Unix seconds) it last logged a line saying ``says``."""
        from datetime import datetime

        found = None
        for line in self.log.read_text().splitlines():
            if says in line:
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    found = datetime.fromisoformat(json.loads(line)["timestamp"]).timestamp()
        return found

    def role(self) -> str | None:
        try:
            return str(http.get(self.url + "/v1/ha", timeout=1).json()["role"])
        except (httpx.HTTPError, ValueError, KeyError):
            return None


def leader_then_standby(
    first: Callable[[], ServerProcess], second: Callable[[], ServerProcess]
) -> list[ServerProcess]:
    """Two servers started in turn, the first leading before the second starts, the
    second standing by; both stopped if either does not come to its role in 60 s."""
    servers = [first()]
    try:
        wait_until(lambda: servers[0].role() == "leader", 60, message="the first server to lead")
        servers.append(second())
        wait_until(lambda: servers[1].role() == "standby", 60, message="the second to stand by")
    except BaseException:
        for server in servers:
            stop_process(server.proc)
        raise
    return servers


@contextlib.contextmanager
def leader_and_standby(
    first: Callable[[], ServerProcess], second: Callable[[], ServerProcess]
) -> Iterator[list[ServerProcess]]:
    """``leader_then_standby``'s two servers, stopped when the block ends."""
    servers = leader_then_standby(first, second)
    try:
        yield servers
    finally:
        for server in servers:
            stop_process(server.proc)


class _Burst:
    """The client: batches sent to whichever server leads, each retried with its key."""

    def __init__(
        self, servers: list[ServerProcess], token: str, jobs: int, batch: int, running: bool
    ) -> None:
        self.servers = servers
        self.running = running  # every fifth job runs on emulated nodes (a second, an hour)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.jobs, self.batch = jobs, batch
        self.acked: list[int] = []
        self.retries = 0
        self.error: BaseException | None = None
        self.leader = self._find()

    def _find(self) -> str:
        deadline = time.monotonic() + FIND_LEADER_S
        while time.monotonic() < deadline:
            for server in self.servers:
                if server.role() == "leader":
                    return server.url
            time.sleep(0.05)
        raise RuntimeError(f"no server led within {FIND_LEADER_S:.0f} s")

    def run(self) -> None:
        try:
            with httpx.Client(timeout=60) as session:
                for first in range(0, self.jobs, self.batch):
                    names = range(first, min(first + self.batch, self.jobs))
                    body = {"jobs": [self._job(i) for i in names]}
                    self.acked += self._send(session, body)
        except BaseException as err:  # reported by the caller
            self.error = err

    def _job(self, i: int) -> dict[str, Any]:
        if self.running and i % 5 == 0:
            seconds = 3600 if i % 10 == 0 else 1
            script = f"#!/bin/sh\n#HAL_EMULATE runtime={seconds}\nsleep {seconds}\n"
            return {"script": script, "name": f"j{i}", "workdir": "/tmp"}
        return {"script": "#!/bin/sh\ntrue\n", "name": f"j{i}", "hold": True}

    def _send(self, session: httpx.Client, body: dict[str, Any]) -> list[int]:
        headers = {**self.headers, "Idempotency-Key": str(uuid.uuid4())}
        while True:
            try:
                done = session.post(self.leader + "/v1/jobs/batch", json=body, headers=headers)
                if done.status_code == 201:
                    return [int(r["job_id"]) for r in done.json()["results"]]
                if done.status_code not in (307, 503):
                    raise RuntimeError(f"submission refused: {done.status_code} {done.text}")
            except httpx.TransportError:
                pass
            self.retries += 1
            self.leader = self._find()


def run_failover(
    servers: int,
    jobs: int,
    batch: int,
    kills: int,
    db_admin: str,
    nodes: int = 0,
    *,
    history: int = 0,
) -> dict[str, Any]:
    takeovers: list[float] = []
    loads: list[float | None] = []  # of each takeover: from the lock to leading
    steps: list[dict[str, float] | None] = []  # ... and its steps, as the server saw them
    phases: list[dict[str, float | None]] = []  # ... and its parts: to the lock, after leading
    with _database(db_admin) as db, tempfile.TemporaryDirectory(prefix="hal-failover-") as d:
        token, agent_token = make_tokens(db)
        if history:
            _write_history(db, history)
        extra: tuple[str, ...] = ()
        if nodes:
            config = Path(d) / "hal.toml"
            config.write_text(
                "max_batch_jobs = 100000\n[[partitions]]\n"
                f'name = "bench"\ndefault = true\nnodes = "emu[1-{nodes}]"\n'
            )
            extra = ("--config", str(config))
        procs = [ServerProcess(db, Path(d) / f"s{i}", *extra) for i in range(servers)]
        emulator: subprocess.Popen[bytes] | None = None
        try:
            wait_until(
                lambda: (
                    sorted(str(s.role()) for s in procs) == ["leader"] + ["standby"] * (servers - 1)
                ),
                timeout=120,
                message="one leader and its standbys",
            )
            if nodes:
                emulator = _emulate(procs, agent_token, nodes, Path(d) / "emulate.log")
                wait_until(
                    lambda: _up(procs, token) >= nodes,
                    timeout=300,
                    interval=1,
                    message="the emulated nodes to register",
                )
            burst = _Burst(procs, token, jobs, batch, running=nodes > 0)
            client = threading.Thread(target=burst.run, name="burst")
            started = time.monotonic()
            client.start()
            for k in range(1, kills + 1):
                share = jobs * k // (kills + 1)
                while len(burst.acked) < share and client.is_alive():
                    time.sleep(0.01)
                # (a leader busy with the burst may miss one ask's one-second timeout)
                leader = _next_leader([s for s in procs if s.proc.poll() is None])
                killed, killed_at = time.monotonic(), time.time()
                leader.proc.send_signal(signal.SIGKILL)
                leader.proc.wait(10)
                left = [s for s in procs if s.proc.poll() is None]
                successor = _next_leader(left)
                takeovers.append(time.monotonic() - killed)
                answered_at = time.time()
                with contextlib.suppress(TimeoutError):  # (logged just after it leads)
                    wait_until(lambda: successor.start_s() is not None, timeout=5)  # noqa: B023
                loads.append(successor.start_s())
                steps.append(successor.steps())
                phases.append(takeover_phases(successor, killed_at, answered_at))
            client.join()
            elapsed = time.monotonic() - started
            if burst.error is not None:
                raise RuntimeError(f"the burst failed: {burst.error}") from burst.error
            running = _running(db)
        finally:
            if emulator is not None:
                stop_process(emulator)
            for server in procs:
                stop_process(server.proc)
        lost, duplicated = _count(db, burst.acked)
    return {
        "cpu": cpu_model(),
        "servers": servers,
        "jobs": jobs,
        "batch": batch,
        "kills": kills,
        "nodes": nodes,
        "history": history,
        "running_at_end": running,
        "takeover_s": [round(t, 3) for t in takeovers],
        "lock_to_lead_s": [None if t is None else round(t, 3) for t in loads],
        "takeover_steps": steps,
        "takeover_phases": phases,
        "acknowledged": len(burst.acked),
        "lost": lost,
        "duplicated": duplicated,
        "retries": burst.retries,
        "burst_s": round(elapsed, 2),
    }


def _write_history(db: str, runs: int) -> None:
    """``runs`` jobs that ran and ended within the last day (four users, 1–16 CPUs on one
    of the emulated nodes): the finished runs fair share charges at each start."""
    from hal.core.job import Allocation, Job, JobSpec
    from hal.core.resources import GiB, ResourceVector
    from hal.core.states import JobState
    from hal.state.store import SqlStateStore

    rng = random.Random(runs)
    now = time.time()
    store = SqlStateStore(db)
    try:
        store.migrate()
        with store.transaction() as tx:
            first = tx.reserve_job_ids(runs)
            tx.insert_scripts([(first, SCRIPT)])
            made = []
            for i in range(runs):
                end = now - rng.uniform(60, 86_400)
                start = end - rng.uniform(1, 3_600)
                cpus = rng.choice((1, 2, 4, 8, 16))
                made.append(
                    Job(
                        id=first + i,
                        spec=JobSpec(user=f"user{i % 4}", script=SCRIPT, name=f"history-{i}"),
                        state=JobState.COMPLETED,
                        submit_time=start - 10,
                        start_time=start,
                        end_time=end,
                        allocation=Allocation((f"emu{i % 100 + 1}",), (ResourceVector(cpus, GiB),)),
                    )
                )
            tx.insert_jobs(made, [first] * runs)
    finally:
        store.close()


def takeover_phases(
    server: ServerProcess, killed: float, answered: float
) -> dict[str, float | None]:
    """A takeover's parts, from ``server``'s log (its clock is this machine's): from the
    kill to its lock (taken, the epoch recorded and the others fenced), and from leading
    (its state loaded) to answering ``/v1/ha`` as the leader within the ask's 1 s."""
    locked = server.logged_at("leading the database")
    led = server.logged_at("took the lead")
    return {
        "kill_to_lock_s": None if locked is None else round(locked - killed, 3),
        "lead_to_answer_s": None if led is None else round(answered - led, 3),
    }


def _count(db: str, acked: list[int]) -> tuple[int, int]:
    """(acknowledged jobs not in the database, jobs in it more than once by name)."""
    import psycopg

    with psycopg.connect(db) as conn:
        ids = {int(r[0]) for r in conn.execute("SELECT id FROM jobs")}
        extra = conn.execute(
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM jobs GROUP BY name) c"
        ).fetchone()
    return len(set(acked) - ids), int(extra[0]) if extra else 0


def _next_leader(left: list[ServerProcess]) -> ServerProcess:
    """The first of ``left`` seen answering as the leader (kept as it is seen: a server
    that is busy after its takeover may miss the next ask's one-second timeout)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for server in left:
            if server.role() == "leader":
                return server
        time.sleep(0.02)
    raise TimeoutError("no standby led within 60 s of the leader's kill")


def _emulate(
    servers: list[ServerProcess], token: str, nodes: int, log: Path
) -> subprocess.Popen[bytes]:
    """One ``hal emulate`` process with ``nodes`` nodes, given every address."""
    args = [a for s in servers for a in ("--server", s.url)]
    args += ["--nodes", str(nodes), "--cpus", "16", "--memory", "32G", "--log-level", "warning"]
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hal.cli.main", "emulate", *args],
            env={**os.environ, "HAL_TOKEN": token},
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def _up(servers: list[ServerProcess], token: str) -> int:
    """Nodes UP, as the leader lists them."""
    for server in servers:
        if server.role() == "leader":
            with contextlib.suppress(httpx.HTTPError, ValueError):
                got = http.get(
                    server.url + "/v1/nodes",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=10,
                ).json()
                listed = got["nodes"] if isinstance(got, dict) else got
                return sum(1 for n in listed if n.get("state") == "UP")
    return 0


def _running(db: str) -> int:
    """Jobs RUNNING in the database."""
    import psycopg

    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT count(*) FROM jobs WHERE state = 'RUNNING'").fetchone()
    return int(row[0]) if row else 0
