"""``hal bench scale``: a real control plane on PostgreSQL driven by emulated nodes.

A fresh PostgreSQL database, ``hal server`` in its own process, ``--nodes`` emulated
nodes in ``hal emulate`` processes of at most ``--nodes-per-process`` each (partition
``bulk``), and two more in partition ``probe`` that only the latency probes use. Then:

1. the nodes register (``register_s``; the emulators' CPU per node in that time:
   ``emulator_register_cpu_ms``); with no job, the server's CPU over ``--idle``
   seconds is the cost of their heartbeats (``heartbeat_cpu_share``: of one core;
   ``heartbeat_cpu_ms``: per long poll, from the heartbeats due in the window), and the
   emulators' (``emulator_heartbeat_cpu_ms``, all their processes, per long poll);
2. ``--jobs`` jobs of a mix (``MIX``: 1 to a whole node's CPUs, run times spread around
   ``--runtime``, 1 % failing, 1 % running past their limit) go in through the batch REST
   endpoint (``submit_per_s``) while partition ``bulk`` is down; then it is opened;
3. for ``--measure`` seconds with the queue full: job starts per second (the server's
   ``hal_jobs_started``; the window ends early if the queue runs dry), submit-to-start
   latency of probe jobs on the idle ``probe`` nodes (p50/p99), the REST list of every
   queued job and ``hal squeue`` (p50/p99), the server's RSS (most seen) and its
   longest scheduling pass, forecast slice and cycle (``/v1/diag``'s max_pass_s,
   max_forecast_slice_s and max_cycle_s; what the longest pass was made of:
   ``max_pass_breakdown``, ``hal.server.observe.passes``), and how late its event loop answered
   (``event_loop_lag_max_s``, ``event_loop_lag_p99_s``), and the emulators' CPU
   (``emulator_cpu_share``: of one core; ``emulator_cpu_ms_per_start``: per job start),
   the server's per job start (``server_cpu_ms_per_start``) and the agents' syncs it
   answered (``agent_syncs_per_s``: long polls and flushes);
4. ``hal sacct`` of every job, and the database's size.

``--logs DIR`` keeps the server's and the emulators' logs (the slow-pass warnings among
them).

Everything runs on this machine: the emulators, the database and the bench's own client
share its cores with the server, so its figures are a floor for a dedicated controller.
"""

from __future__ import annotations

import math
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from hal.bench.replay_cost import cpu_model
from hal.testing import http
from hal.testing.live import free_port, stop_process, wait_until
from hal.wire.submit import JobSubmit

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
PROBE_NODES = 2
# (share, CPUs as a fraction of a node: 0 = one CPU) of the mix: mostly small jobs, some
# wide, a few whole nodes, as a mixed site's queue
MIX = ((0.50, 0.0), (0.20, 0.125), (0.15, 0.25), (0.10, 0.5), (0.05, 1.0))
SUBMIT_BATCH = 1000
REGISTRATIONS_IN_FLIGHT = 256  # of all the emulators together
PROBE_WAIT_S = 120.0
# issue 56's goals at 10,000 nodes and 100,000 jobs
PASS_HISTOGRAM = "hal_scheduling_pass_duration_seconds"
PASS_BOUND = "2.048"  # (its buckets double from 1 ms: 1.024, 2.048, 4.096 s ...)
TARGETS = {"starts_per_s": 500, "squeue_s": 1.0, "server_rss_mib": 4096, "max_pass_s": 2.0}


def add_commands(sub: Any) -> None:
    p = sub.add_parser("scale", help="a real server on PostgreSQL, N emulated nodes, M queued jobs")
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--cpus", type=int, default=16, help="CPUs per emulated node")
    p.add_argument("--runtime", type=float, default=20.0, help="mean job run time, seconds")
    p.add_argument("--nodes-per-process", type=int, default=2500)
    p.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat interval, seconds")
    p.add_argument("--idle", type=float, default=15.0, help="heartbeat-only window, seconds")
    p.add_argument("--measure", type=float, default=60.0, help="full-queue window, seconds")
    p.add_argument("--samples", type=int, default=10, help="squeue/REST list/probe runs")
    p.add_argument(
        "--db-admin", default=PG_ADMIN, help="libpq DSN of a role that may create databases"
    )
    p.add_argument(
        "--logs", type=Path, help="copy the server's and emulators' logs to this directory"
    )
    p.add_argument(
        "--pass-process",
        choices=("thread", "fork", "auto"),
        default="thread",
        help="the server's [scheduler] pass_process (ADR 0031)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    from hal.bench import emit

    if min(ns.nodes, ns.jobs, ns.cpus, ns.nodes_per_process, ns.samples) < 1:
        from hal.core.errors import InvalidRequest

        raise InvalidRequest("--nodes, --jobs, --cpus, --nodes-per-process, --samples: ≥ 1")
    result = run_scale_bench(
        nodes=ns.nodes,
        jobs=ns.jobs,
        cpus=ns.cpus,
        runtime=ns.runtime,
        per_process=ns.nodes_per_process,
        heartbeat=ns.heartbeat,
        idle=ns.idle,
        measure=ns.measure,
        samples=ns.samples,
        db_admin=ns.db_admin,
        logs=ns.logs,
        decide_in=ns.pass_process,
    )
    return emit(result, ns.json)


@contextmanager
def _database(admin_dsn: str, *, keep: bool = False) -> Iterator[str]:
    """A fresh database for a bench, dropped at the end unless ``keep``."""
    import psycopg

    name = "hal_scale_" + secrets.token_hex(4)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        info = conn.info
        url = f"postgresql://{info.user}@{info.host}:{info.port}/{name}"
    try:
        yield url
    finally:
        if not keep:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Site(NamedTuple):
    """What a bench's cluster runs in: a work directory, a fresh database, the admin's
    and the agents' tokens, the server's port and its configuration file."""

    work: Path
    db: str
    admin: str
    agents: str
    port: int
    config: Path


@contextmanager
def site(
    prefix: str,
    nodes: int,
    heartbeat: float,
    db_admin: str = PG_ADMIN,
    decide_in: str = "thread",
) -> Iterator[Site]:
    """A ``Site`` for ``nodes`` nodes with ``heartbeat``, removed (the database dropped)
    at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, _database(db_admin) as db:
        work = Path(tmp)
        admin, agents = make_tokens(db)
        config = work / "hal.toml"
        _config(config, nodes, heartbeat, decide_in)
        yield Site(work, db, admin, agents, free_port(), config)


QUIET = ["--log-level", "warning"]
Spawn = Callable[[list[str], str, str], "subprocess.Popen[bytes]"]  # (log, token)


def spawner(work: Path, url: str, procs: list[subprocess.Popen[bytes]]) -> Spawn:
    """``spawn(args, log, token)``: ``hal ARGS`` with its output in ``work/log``, speaking
    to ``url`` with ``token``; each process is added to ``procs`` (stopped by the caller)."""
    hal = [sys.executable, "-m", "hal.cli.main"]

    def spawn(args: list[str], log: str, token: str) -> subprocess.Popen[bytes]:
        out = open(work / log, "ab")  # noqa: SIM115 - owned by the process
        env = {**os.environ, "HAL_URL": url, "HAL_TOKEN": token}
        proc = subprocess.Popen([*hal, *args], env=env, stdout=out, stderr=out)
        procs.append(proc)
        return proc

    return spawn


def start_server(
    spawn: Spawn, work: Path, db: str, port: int, config: Path, admin: str, *, timeout: float
) -> subprocess.Popen[bytes]:
    """``hal server`` on ``db`` and ``port`` with ``config``, once it answers."""
    where = ["--data-dir", str(work / "srv"), "--port", str(port), "--config", str(config)]
    server = spawn(["server", "--db", db, *where, *QUIET], "server.log", admin)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _healthy(url), timeout=timeout, message="the server to answer")
    return server


def emulate_args(url: str, cpus: int, nodes: int, per_process: int) -> list[str]:
    """``hal emulate``'s arguments but the nodes': nodes of ``cpus`` CPUs and twice that
    in GiB. The server commits at most 256 registrations a transaction (when they
    committed one at a time, the emulators' 256 each in flight had the last of a
    thousand wait past their 15 s timeout): 256 in flight across the processes."""
    processes = math.ceil(nodes / per_process)
    emu = ["emulate", "--server", url, "--cpus", str(cpus), "--memory", f"{cpus * 2}G"]
    return [*emu, "--concurrency", str(max(8, REGISTRATIONS_IN_FLIGHT // processes))]


def start_emulators(
    spawn: Spawn, emu: list[str], nodes: int, per_process: int, token: str
) -> list[subprocess.Popen[bytes]]:
    """``nodes`` emulated nodes, at most ``per_process`` a ``hal emulate`` process."""
    started = []
    for first in range(1, nodes + 1, per_process):
        what = ["--nodes", str(min(per_process, nodes - first + 1)), "--first", str(first)]
        started.append(spawn([*emu, *what, *QUIET], f"emulate-{first}.log", token))
    return started


def _config(path: Path, nodes: int, heartbeat: float, decide_in: str) -> None:
    path.write_text(
        f"heartbeat_interval_seconds = {heartbeat}\n"
        f"node_timeout_seconds = {max(30.0, 6 * heartbeat)}\n"
        "max_batch_jobs = 100000\n"
        f'scheduler = {{ pass_process = "{decide_in}" }}\n'
        "[[partitions]]\n"
        'name = "bulk"\n'
        "default = true\n"
        "up = false\n"  # the jobs queue first; the bench opens it (a full queue)
        f'nodes = "emu[1-{nodes}]"\n'
        "[[partitions]]\n"
        'name = "probe"\n'
        f'nodes = "probe[1-{PROBE_NODES}]"\n'
    )


def _mix(count: int, cpus: int, runtime: float, seed: int = 7) -> list[JobSubmit]:
    rng = random.Random(seed)
    shares = [s for s, _ in MIX]
    widths = [max(1, round(f * cpus)) for _, f in MIX]
    jobs = []
    for i in range(count):
        width = rng.choices(widths, shares)[0]
        seconds = runtime * rng.uniform(0.5, 1.5)
        env = {"HAL_EMULATE_RUNTIME": f"{seconds:.2f}"}
        limit = 600
        roll = rng.random()
        if roll < 0.01:
            env["HAL_EMULATE_EXIT"] = "1"
        elif roll < 0.02:
            limit = max(1, int(seconds / 2))  # runs past its limit: TIMEOUT
        jobs.append(
            JobSubmit(
                script="#!/bin/sh\nexec ./simulate\n",
                workdir="/tmp",
                name=f"mix{i % 97}",
                cpus_per_task=width,
                memory_per_cpu_bytes=1 << 30,
                time_limit_seconds=limit,
                environment=env,
            )
        )
    return jobs


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return statistics.median(ordered), p99


def _bucket(text: str, name: str, le: str) -> float:
    """What histogram ``name`` counted at or under its bound ``le`` (as written)."""
    return _counter(text, f'{name}_bucket{{le="{le}"}}')


def _counter(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def run_scale_bench(
    *,
    nodes: int,
    jobs: int,
    cpus: int = 16,
    runtime: float = 20.0,
    per_process: int = 2500,
    heartbeat: float = 5.0,
    idle: float = 15.0,
    measure: float = 60.0,
    samples: int = 10,
    db_admin: str = PG_ADMIN,
    logs: Path | None = None,
    decide_in: str = "thread",
) -> dict[str, Any]:
    """``logs``: a directory the server's and emulators' logs are copied to at the end
    (the slow-pass log lines among them: ``hal.server.observe.passes``)."""
    import psutil

    from hal.client import HalClient

    procs: list[subprocess.Popen[bytes]] = []
    with site("hal-scale-", nodes, heartbeat, db_admin, decide_in) as (
        work,
        db,
        admin,
        agents,
        port,
        config,
    ):
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "HAL_URL": url, "HAL_TOKEN": admin}
        hal = [sys.executable, "-m", "hal.cli.main"]
        spawn = spawner(work, url, procs)
        try:
            server = start_server(spawn, work, db, port, config, admin, timeout=60)
            server_ps = psutil.Process(server.pid)
            t0 = time.monotonic()
            emu = emulate_args(url, cpus, nodes, per_process)
            emulators = start_emulators(spawn, emu, nodes, per_process, agents)
            what = ["--nodes", str(PROBE_NODES), "--prefix", "probe", "--runtime", "1"]
            emulators.append(spawn([*emu, *what, *QUIET], "emulate-probe.log", agents))
            emulators_ps = [psutil.Process(proc.pid) for proc in emulators]
            client = HalClient(url, admin)
            total = nodes + PROBE_NODES
            wait_until(
                lambda: sum(n.state == "UP" for n in client.nodes()) == total,
                timeout=max(300.0, nodes / 5),  # (a shared machine registers slowly)
                # a node list costs the server about 50 µs a node: asked every second at
                # 10,000 nodes it took half the server's CPU from the registrations
                interval=max(1.0, nodes / 1000),
                message=f"{total} emulated nodes to register",
            )
            register_s = time.monotonic() - t0
            register_emu_cpu = cpu_seconds(emulators_ps)  # (their start-up included)
            # heartbeats only: the server's CPU over the window
            cpu0, emu0 = cpu_seconds([server_ps]), cpu_seconds(emulators_ps)
            time.sleep(idle)
            hb_cpu = cpu_seconds([server_ps]) - cpu0
            hb_emu_cpu = cpu_seconds(emulators_ps) - emu0
            polls = total * idle / heartbeat
            _say(f"{total} nodes up in {register_s:.1f} s; heartbeats: {hb_cpu / idle:.0%} CPU")

            batch = _mix(jobs, cpus, runtime)
            t0 = time.monotonic()
            for start in range(0, jobs, SUBMIT_BATCH):
                client.submit_many(batch[start : start + SUBMIT_BATCH])
            submit_s = time.monotonic() - t0
            _say(f"{jobs} jobs submitted in {submit_s:.1f} s; opening partition bulk")
            session = httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=120
            )
            session.post("/v1/diag/reset").raise_for_status()
            metrics0 = session.get("/metrics").text
            started0 = _counter(metrics0, "hal_jobs_started_total")
            opened = time.time()
            _open_bulk([*hal, "scontrol"], env)
            t_window = time.monotonic()
            cpu_window, emu_window = cpu_seconds([server_ps]), cpu_seconds(emulators_ps)
            seen = _sample(session, client, [*hal, "squeue"], env, server_ps, measure, samples)
            window = time.monotonic() - t_window
            cpu_window = cpu_seconds([server_ps]) - cpu_window
            emu_window = cpu_seconds(emulators_ps) - emu_window
            pending = seen.pending
            if pending:  # (the last sample's may be a minute old on a loaded server)
                pending = len(client.jobs(states=["PENDING"], validate=False))
            metrics1 = session.get("/metrics").text
            started = _counter(metrics1, "hal_jobs_started_total") - started0
            lag_p99 = _quantile(metrics0, metrics1, "hal_event_loop_lag_seconds", 0.99)
            passes = _counter(metrics1, PASS_HISTOGRAM + "_count") - _counter(
                metrics0, PASS_HISTOGRAM + "_count"
            )
            within = _bucket(metrics1, PASS_HISTOGRAM, PASS_BOUND) - _bucket(
                metrics0, PASS_HISTOGRAM, PASS_BOUND
            )
            diag = session.get("/v1/diag").json()
            t = time.perf_counter()
            acct = subprocess.run(
                [*hal, "sacct", "-a", "-X", "-n", "-P", "-S", "2000-01-01"],
                # (a busy server's whole history can take longer than a request's 30 s)
                env={**env, "HAL_TIMEOUT_SECONDS": "600"},
                capture_output=True,
                check=False,
                timeout=600,
            )
            sacct_s: float | None = time.perf_counter() - t
            if acct.returncode != 0:  # (a loaded server's answer lost): the rest stands
                _say(f"sacct failed: {acct.stderr.decode(errors='replace').strip()[-300:]}")
                sacct_s = None
            db_bytes = _database_bytes(db)
            rss = max(seen.rss, server_ps.memory_info().rss)
        finally:
            for proc in reversed(procs):
                stop_process(proc)
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
                for log in work.glob("*.log"):
                    shutil.copy(log, logs / log.name)
    list_p50, list_p99 = _percentiles(seen.lists)
    sq_p50, sq_p99 = _percentiles(seen.squeues)
    lat_p50, lat_p99 = _percentiles(seen.probes)
    return {
        "bench": "scale",
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "nodes": nodes,
        "cpus_per_node": cpus,
        "queued_jobs": jobs,
        "pass_process": decide_in,
        "mean_runtime_s": runtime,
        "emulator_processes": len(emulators_ps),
        "register_s": round(register_s, 2),
        # the emulators' CPU per node from their start to every node up
        "emulator_register_cpu_ms": round(1000 * register_emu_cpu / (nodes + PROBE_NODES), 2),
        "heartbeat_interval_s": heartbeat,
        "heartbeat_cpu_share": round(hb_cpu / idle, 3),
        "heartbeat_cpu_ms": round(1000 * hb_cpu / polls, 3),
        # the emulators' CPU (all their processes) per long poll in the heartbeat window
        "emulator_heartbeat_cpu_ms": round(1000 * hb_emu_cpu / polls, 3),
        "submit_per_s": round(jobs / submit_s, 1),
        "window_s": round(window, 1),
        "starts_per_s": round(started / window, 1),
        "server_cpu_share": round(cpu_window / window, 3),  # of one core, in the window
        "emulator_cpu_share": round(emu_window / window, 3),  # all of them, in the window
        "server_cpu_ms_per_start": round(1000 * cpu_window / max(started, 1), 3),
        # the agents' syncs (long polls and flushes) the server answered in the window
        "agent_syncs_per_s": round(_agent_syncs(diag) / window, 1),
        "emulator_cpu_ms_per_start": round(1000 * emu_window / max(started, 1), 3),
        "pending_at_end": pending,
        "queue_full": pending > 0,
        "submit_to_start_p50_s": round(lat_p50, 3),
        "submit_to_start_p99_s": round(lat_p99, 3),
        "probes_not_started": seen.probes_not_started,
        "rest_list_jobs": seen.listed,
        "rest_list_p50_s": round(list_p50, 3),
        "rest_list_p99_s": round(list_p99, 3),
        "squeue_p50_s": round(sq_p50, 3),
        "squeue_p99_s": round(sq_p99, 3),
        "sacct_s": round(sacct_s, 2) if sacct_s is not None else None,
        "sacct_rows": len(acct.stdout.splitlines()) if sacct_s is not None else 0,
        "server_rss_mib": round(rss / 2**20, 1),
        "database_mib": round(db_bytes / 2**20, 1),
        # the longest pass (main loop and backfill stage), the longest forecast slice,
        # and the longest cycle (a pass and the slice after it), from /v1/diag
        "max_pass_s": _seconds(diag, "max_pass_s"),
        # the passes in the window, and those longer than the histogram's bound nearest
        # the 2 s target (hal_scheduling_pass_duration_seconds): whether the longest is
        # one of a kind
        "passes": int(passes),
        "passes_over_2s": int(passes - within),
        "max_forecast_slice_s": _seconds(diag, "max_forecast_slice_s"),
        "max_cycle_s": _seconds(diag, "max_cycle_s"),
        # what the longest pass was made of (/v1/diag, hal.server.observe.passes): its
        # wait for a worker thread, its CPU and the rest waited for the interpreter, its
        # stages, full collections in it, what it decided; ``opened_s``: how long after
        # the partition opened it ended
        "max_pass_breakdown": _longest(diag, opened),
        # passes that stopped at max_job_starts, those of them that backfilled (its turn),
        # and all the passes that backfilled, from /v1/diag
        "passes_capped": int(diag.get("passes_capped") or 0),
        "passes_capped_backfilled": int(diag.get("passes_capped_backfilled") or 0),
        "backfill_cycles": int(diag.get("backfill_cycles") or 0),
        # how late the server's event loop woke from its 0.1 s sleeps in the window: the
        # longest (/v1/diag) and the 99th percentile of hal_event_loop_lag_seconds
        "event_loop_lag_max_s": _seconds(diag, "max_event_loop_lag_s"),
        "event_loop_lag_p99_s": round(lag_p99, 3),
        "targets": TARGETS,
    }


def _agent_syncs(diag: Mapping[str, Any]) -> int:
    """The agents' syncs ``/v1/diag`` counted (its RPC statistics by route)."""
    rows = diag.get("rpc_by_type") or []
    return sum(int(r.get("count") or 0) for r in rows if str(r.get("name")).endswith("/sync"))


def cpu_seconds(processes: list[Any]) -> float:
    """The user and system CPU seconds of ``processes`` (psutil's) so far, with those of
    their children that ended (a server's forked passes: ``pass_process``); 0 for one
    that has exited (an emulator whose token was refused), which its log says why."""
    import psutil

    total = 0.0
    for process in processes:
        with suppress(psutil.Error):  # (gone, or not ours to read)
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def _longest(diag: Mapping[str, Any], opened: float) -> dict[str, Any] | None:
    """``/v1/diag``'s ``max_pass_breakdown`` with when it ended after ``opened`` (None
    from a server that gives none)."""
    found = diag.get("max_pass_breakdown")
    if not found:
        return None
    return {**found, "opened_s": round(float(found.get("at") or opened) - opened, 1)}


def _seconds(diag: Mapping[str, Any], key: str) -> float:
    """``diag``'s ``key`` rounded to the millisecond (0 when the server gave none)."""
    return round(float(diag.get(key) or 0.0), 3)


def _quantile(before: str, after: str, name: str, q: float) -> float:
    """The ``q`` quantile of histogram ``name`` over what it counted between two
    ``/metrics`` texts, interpolated within its bucket as PromQL's histogram_quantile
    does (0 when it counted nothing)."""

    def buckets(text: str) -> dict[float, float]:
        prefix = name + '_bucket{le="'
        return {
            float(line[len(prefix) :].split('"', 1)[0]): float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(prefix)
        }

    was, now = buckets(before), buckets(after)
    counts = sorted((le, now[le] - was.get(le, 0.0)) for le in now)
    if not counts or counts[-1][1] <= 0:
        return 0.0
    rank = q * counts[-1][1]
    lower, below = 0.0, 0.0
    for le, count in counts:
        if count >= rank:
            if math.isinf(le):
                return lower  # (past the last bound: the last bound, as PromQL)
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = le, count
    return lower


def make_tokens(
    db: str, admin_name: str = "admin", agents_name: str = "emulators"
) -> tuple[str, str]:
    """An administrator's token and an agent token, made in the database."""
    from hal.server.users import ensure_user
    from hal.state.store import SqlStateStore

    store = SqlStateStore(db)
    try:
        admin = ensure_user(store, admin_name, admin=True, now=time.time())
        agents = ensure_user(store, agents_name, admin=False, now=time.time(), agent=True)
    finally:
        store.close()
    assert admin and agents
    return admin, agents


@dataclass
class _Samples:
    lists: list[float] = field(default_factory=list)  # GET /v1/jobs, seconds
    squeues: list[float] = field(default_factory=list)  # hal squeue, seconds
    probes: list[float] = field(default_factory=list)  # probe submit to start, seconds
    probes_not_started: int = 0  # of them, not started within PROBE_WAIT_S (counted so)
    listed: int = 0  # the most jobs a list returned
    pending: int = 0  # at the last list
    rss: int = 0  # the server's most RSS seen


def _sample(
    session: httpx.Client,
    client: Any,
    squeue: list[str],
    env: dict[str, str],
    server: Any,
    measure: float,
    samples: int,
) -> _Samples:
    """``samples`` rounds over ``measure`` seconds (fewer when each takes longer, or when
    the queue runs dry): the REST list, ``hal squeue``, a probe job, the server's RSS."""
    seen = _Samples(rss=server.memory_info().rss)
    probe = JobSubmit(
        script="#!/bin/sh\n#HAL_EMULATE runtime=1\n",
        workdir="/tmp",
        name="probe",
        partition="probe",
    )
    begun = time.monotonic()
    while time.monotonic() - begun < measure:
        t = time.perf_counter()
        got = session.get("/v1/jobs")
        got.raise_for_status()
        seen.lists.append(time.perf_counter() - t)
        queued = got.json()["jobs"]
        seen.listed = max(seen.listed, len(queued))
        seen.pending = sum(j["state"] == "PENDING" for j in queued)
        t = time.perf_counter()
        subprocess.run(squeue, env=env, capture_output=True, check=True, timeout=300)
        seen.squeues.append(time.perf_counter() - t)
        waited, started = _probe(client, probe)
        seen.probes.append(waited)
        seen.probes_not_started += not started
        seen.rss = max(seen.rss, server.memory_info().rss)
        if not seen.pending:
            break  # the queue ran dry: what follows is no full queue's rate
        slot = begun + len(seen.lists) * measure / samples  # the next round's time
        time.sleep(max(0.0, slot - time.monotonic()))
    return seen


def _open_bulk(scontrol: list[str], env: dict[str, str]) -> None:
    opened = subprocess.run(
        [*scontrol, "update", "PartitionName=bulk", "State=UP"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if opened.returncode != 0:
        raise RuntimeError(f"cannot open partition bulk: {opened.stderr}")


def _say(line: str) -> None:
    """Progress on stderr: a run that fails part way still tells how far it got."""
    print(f"hal bench scale: {line}", file=sys.stderr, flush=True)


def _healthy(url: str) -> bool:
    try:
        return http.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _probe(client: Any, job: JobSubmit) -> tuple[float, bool]:
    """Seconds from submit to the server seeing the probe job's start on an idle node,
    and whether it started: one that has not after ``PROBE_WAIT_S`` counts that long (a
    lower bound) and the run goes on, so that a server too busy to place it still has
    its other figures taken."""
    t = time.monotonic()
    job_id = client.submit(job).job_id

    def begun() -> bool:
        info = client.jobs(ids=[str(job_id)], include_finished=True)
        return bool(info) and info[0].state in ("RUNNING", "COMPLETING", "COMPLETED")

    try:
        wait_until(begun, timeout=PROBE_WAIT_S, interval=0.02, message="the probe")
    except TimeoutError:
        _say(f"probe job {job_id} did not start within {PROBE_WAIT_S:.0f} s")
        return time.monotonic() - t, False
    return time.monotonic() - t, True


def _database_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0
