"""``hal bench agent-traffic``: what the agent's TCP traffic telemetry costs
(``hal.agent.traffic``): one read of ``jobs`` running jobs holding ``sockets`` connected
TCP sockets in all over loopback, as the agent does every ``--traffic-interval``.

The jobs are real process trees, as the agent finds them: a shell (standing for the
step supervisor) with a Python child holding the sockets. Half are services, each
listening on 127.0.0.1 and accepting; half are clients, each holding an equal share of
the connections, spread over the services; so each connection has both ends in jobs
and ``sockets`` counts both. Before each read every client sends ``chunk`` bytes on
each of its connections, so every connection has bytes to report.

A read is the agent's whole round (``TrafficSampler.read`` of ``job_processes``): the
jobs' process trees, their ``/proc/<pid>/fd`` links, one sock_diag dump per address
family through pyroute2 (every TCP socket of the host is decoded, the jobs' and the
others': ``host_tcp_sockets`` says how many there were), the differences and the wire
models. Its CPU time (this process's, the read runs on one thread) and wall time are
the median of ``rounds`` reads after a first that only primes the counters. RSS is
this process's, which runs the agent's code: before the first read (pyroute2 is not
imported yet, as in an agent that never read), after it, and after the last.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from hal.agent.procfs import descendants, socket_inodes
from hal.agent.sockdiag import tcp_sockets
from hal.agent.traffic import TRAFFIC_INTERVAL_S, TrafficSampler, job_processes
from hal.bench import emit
from hal.bench.replay_cost import cpu_model
from hal.host.process import start_ticks

# one program for both kinds of job: "serve" listens and drains what comes; "call PORTS"
# connects once to each port, then on each stdin line sends that many bytes on each
JOB = """
import selectors, socket, sys
if sys.argv[1] == "serve":
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    print(listener.getsockname()[1], flush=True)
    watch = selectors.DefaultSelector()
    watch.register(listener, selectors.EVENT_READ)
    while True:
        for key, _ in watch.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                watch.register(conn, selectors.EVENT_READ)
            elif not key.fileobj.recv(1 << 16):
                watch.unregister(key.fileobj)
                key.fileobj.close()
else:
    conns = [socket.create_connection(("127.0.0.1", int(p))) for p in sys.argv[2:]]
    print("ready", flush=True)
    for line in sys.stdin:
        data = b"x" * int(line)
        for conn in conns:
            conn.sendall(data)
        print("sent", flush=True)
"""


class _Job:
    """A job's process tree: a shell with the Python program below it."""

    def __init__(self, *args: str) -> None:
        # "; :" keeps the shell from exec'ing Python: two processes, as a supervised job
        command = f'{sys.executable} -c "$0" "$@"; :'
        self.process = subprocess.Popen(
            ["/bin/sh", "-c", command, JOB, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def line(self) -> str:
        assert self.process.stdout is not None
        text = self.process.stdout.readline().strip()
        if not text:
            raise RuntimeError("a benchmark job ended before it was ready")
        return text

    def tell(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def end(self) -> None:
        below = descendants(self.process.pid)
        self.process.kill()  # the shell first: it would print "Killed" for its child
        self.process.wait()
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run_agent_traffic_bench(
    jobs: int = 100, sockets: int = 1000, rounds: int = 9, chunk: int = 4096
) -> dict[str, Any]:
    if jobs < 2 or sockets < jobs:
        raise ValueError("at least 2 jobs, and at least one socket per job")
    services, callers = jobs // 2, jobs - jobs // 2
    connections = sockets // 2
    started: list[_Job] = []
    try:
        rss_before = _rss_kib()
        for _ in range(services):
            started.append(_Job("serve"))
        ports = [int(job.line()) for job in started]
        for i in range(callers):  # caller i: services i, i+1, ... one connection each
            count = len(range(i, connections, callers))
            started.append(_Job("call", *(str(ports[(i + k) % services]) for k in range(count))))
        clients = started[services:]
        for job in clients:
            assert job.line() == "ready"
        _send(clients, chunk)  # every service has accepted all its connections by then
        watched = []
        for job_id, job in enumerate(started, start=1):
            ticks = start_ticks(job.process.pid)
            assert ticks is not None
            watched.append((job_id, 0, job.process.pid, ticks))
        sampler = TrafficSampler()
        sampler.read(job_processes(watched, []))  # primes the counters; imports pyroute2
        rss_first = _rss_kib()
        cpu: list[float] = []
        wall: list[float] = []
        fds: list[float] = []
        diag: list[float] = []
        reported = flows = moved = 0
        for _ in range(rounds):
            _send(clients, chunk)
            c0, w0 = time.process_time(), time.perf_counter()
            reports = sampler.read(job_processes(watched, []))
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            # its two reads apart (no differences taken), after the same pause (a read
            # after a pause costs more than one right after another): where time goes
            _send(clients, chunk)
            c1 = time.process_time()
            processes = job_processes(watched, [])
            inodes = {i for pids in processes.values() for pid in pids for i in socket_inodes(pid)}
            c2 = time.process_time()
            tcp_sockets(inodes)
            fds.append(c2 - c1)
            diag.append(time.process_time() - c2)
            reported = len(reports)
            flows = sum(len(r.flows) for r in reports)
            moved = sum(f.bytes_sent for r in reports for f in r.flows)
        rss_after = _rss_kib()
        host_sockets = _host_tcp_sockets()
    finally:
        for job in started:
            job.end()
    cpu_ms = statistics.median(cpu) * 1000
    return {
        "benchmark": "agent-traffic",
        "cpu_model": cpu_model(),
        "jobs": jobs,
        "sockets": 2 * connections,
        "host_tcp_sockets": host_sockets,
        "rounds": rounds,
        "read_cpu_ms": round(cpu_ms, 2),
        "read_wall_ms": round(statistics.median(wall) * 1000, 2),
        "read_cpu_ms_min_max": [round(min(cpu) * 1000, 2), round(max(cpu) * 1000, 2)],
        "cpu_us_per_socket": round(cpu_ms * 1000 / max(1, 2 * connections), 1),
        # the read's parts, timed apart: the jobs' trees and fd links; the sock_diag dump
        "processes_and_fds_cpu_ms": round(statistics.median(fds) * 1000, 2),
        "sock_diag_cpu_ms": round(statistics.median(diag) * 1000, 2),
        # the share of one CPU at the default interval (a read every 10 s)
        "cpu_share_at_default_interval_pct": round(cpu_ms / 1000 / TRAFFIC_INTERVAL_S * 100, 3),
        "jobs_reported": reported,
        "flows_reported": flows,
        "bytes_sent_last_read": moved,
        "rss_mib_before": round(rss_before / 1024, 1),
        "rss_mib_after_first_read": round(rss_first / 1024, 1),
        "rss_mib_after": round(rss_after / 1024, 1),
        "rss_growth_mib": round((rss_after - rss_before) / 1024, 1),
        "rss_growth_after_first_read_mib": round((rss_after - rss_first) / 1024, 1),
    }


def _send(clients: list[_Job], chunk: int) -> None:
    """Each client sends ``chunk`` bytes on each of its connections."""
    for job in clients:
        job.tell(str(chunk))
    for job in clients:
        assert job.line() == "sent"
    time.sleep(0.2)  # the services drain them, the last acknowledgements come back


def _rss_kib() -> int:
    """This process's resident memory now (``VmRSS``), in KiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _host_tcp_sockets() -> int:
    """The TCP sockets of this network namespace (``/proc/net/tcp`` and ``tcp6``)."""
    count = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(name, encoding="ascii") as f:
            count += sum(1 for _ in f) - 1
    return count


def add_commands(bsub: Any) -> None:
    """Registers ``agent-traffic`` on the ``hal bench`` subparsers (``cli/bench.py``)."""
    p = bsub.add_parser(
        "agent-traffic", help="the agent's TCP traffic telemetry: one read's CPU and memory"
    )
    p.add_argument("--jobs", type=int, default=100, help="running jobs (half serve, half call)")
    p.add_argument("--sockets", type=int, default=1000, help="connected sockets in all (both ends)")
    p.add_argument("--rounds", type=int, default=9, help="timed reads (the median is shown)")
    p.add_argument("--chunk", type=int, default=4096, help="bytes per connection per round")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd)


def _cmd(ns: Any) -> int:
    result = run_agent_traffic_bench(ns.jobs, ns.sockets, ns.rounds, ns.chunk)
    return emit(result, ns.json)
