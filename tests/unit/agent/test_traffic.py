"""Which job on a node talks TCP with whom (``TrafficSampler``, harmonic placement):
real process trees (a shell with a Python child, as a supervisor with its job below)
holding real sockets over loopback, read from the kernel through sock_diag."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.agent.procfs import descendants
from hal.agent.sockdiag import plain_address
from hal.agent.traffic import TrafficSampler, job_processes
from hal.host.process import start_ticks
from hal.wire.agent import AgentSync, Endpoint, JobTraffic

MiB = 1 << 20
HEADER = 8  # each message's length, sent before it
# a service: listens, answers each message (length, then its bytes) with one byte
SERVER = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
listener = socket.socket(family)
listener.bind((sys.argv[1], 0))
listener.listen(64)
print(listener.getsockname()[1], flush=True)
peers = []
def exactly(conn, n):
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(min(n - len(data), 1 << 16))
        if not chunk:
            return None
        data += chunk
    return data
import threading
def serve(conn):
    while (head := exactly(conn, 8)) is not None:
        if exactly(conn, int.from_bytes(head, "big")) is None:
            return
        conn.sendall(b"k")
while True:
    conn, _ = listener.accept()
    peers.append(conn)
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
# a client: opens argv[3] connections to argv[1]:argv[2]; each stdin line "I N" sends
# N bytes on connection I and prints "sent" once the answer came back (so the kernel
# has the peer's acknowledgement of every byte by then)
CLIENT = """
import socket, sys
conns = [socket.create_connection((sys.argv[1], int(sys.argv[2]))) for _ in range(int(sys.argv[3]))]
print(" ".join(str(c.getsockname()[1]) for c in conns), flush=True)
for line in sys.stdin:
    i, n = map(int, line.split())
    conns[i].sendall(n.to_bytes(8, "big") + b"x" * n)
    assert conns[i].recv(1) == b"k"
    print("sent", flush=True)
"""


class Job:
    """A job's processes: a shell (its supervisor, for the sampler) running Python."""

    def __init__(self, tmp_path: Path, name: str, program: str, *args: str) -> None:
        path = tmp_path / f"{name}.py"
        path.write_text(program)
        # "; :" keeps the shell from exec'ing Python: the tree has two processes
        command = f'{sys.executable} {path} "$@"; :'
        self.process = subprocess.Popen(
            ["/bin/sh", "-c", command, "sh", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.first_line = self.process.stdout.readline().strip()
        assert self.first_line, f"{name} did not start"

    def send(self, connection: int, size: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{connection} {size}\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "sent"

    def end(self) -> None:
        below = descendants(self.process.pid)
        self.process.kill()  # the shell first: it would print "Killed" for its child
        self.process.wait()
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.end()


def start(jobs: list[Job], tmp_path: Path, name: str, program: str, *args: str) -> Job:
    job = Job(tmp_path, name, program, *args)
    jobs.append(job)
    return job


def batch(job_id: int, attempt: int, job: Job) -> tuple[int, int, int, int]:
    """The job as the agent follows a batch job: its supervisor's pid and start time."""
    ticks = start_ticks(job.process.pid)
    assert ticks is not None
    return job_id, attempt, job.process.pid, ticks


def by_job(reports: list[JobTraffic]) -> dict[int, JobTraffic]:
    found = {r.job_id: r for r in reports}
    assert len(found) == len(reports), reports
    return found


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_each_connection_counts_for_the_job_that_holds_it(
    tmp_path: Path, jobs: list[Job], address: str
) -> None:
    """A service (job 1, a batch script) and a client (job 2's step task) on one node:
    each job's connection end is its own, the service's listening address is known, the
    bytes are the kernel's, and a second read brings only the bytes moved since."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        outsider = socket.create_server((address, 0), family=family)  # the test's own
    except OSError:
        pytest.skip(f"no {address} on this host")
    server = start(jobs, tmp_path, "server", SERVER, address)
    port = int(server.first_line)
    sampler = TrafficSampler()

    def read() -> list[JobTraffic]:
        task = (2, 3, 0, 0, client.process.pid)  # (job, run, step, rank, pid)
        return sampler.read(job_processes([batch(1, 0, server)], [task]))

    client = start(jobs, tmp_path, "client", CLIENT, address, str(port), "1")
    assert read() == []  # the first read only learns where the counters stand
    client.send(0, MiB)
    first = by_job(read())
    assert sorted(first) == [1, 2]
    service, caller = first[1], first[2]
    assert (service.attempt, caller.attempt) == (0, 3)
    assert service.listening == [Endpoint(address=address, port=port)]
    assert caller.listening == []
    (flow,) = caller.flows
    client_port = int(client.first_line)
    assert flow.local == Endpoint(address=address, port=client_port)
    assert flow.remote == Endpoint(address=address, port=port)
    assert MiB + HEADER <= flow.bytes_sent < MiB + 64 * 1024
    assert flow.bytes_received == 1  # the answer
    (back,) = service.flows
    assert (back.local, back.remote) == (flow.remote, flow.local)
    assert MiB + HEADER <= back.bytes_received < MiB + 64 * 1024
    # the answer counts as sent once the client acknowledged it, which its kernel may
    # delay (delayed ACK): in this read or a later one
    assert back.bytes_sent <= 1
    assert outsider.getsockname()[1] not in {e.port for r in first.values() for e in r.listening}
    assert service.interval_seconds > 0

    client.send(0, 256 * 1024)
    second = by_job(read())
    (flow,) = second[2].flows
    assert 256 * 1024 + HEADER <= flow.bytes_sent < 256 * 1024 + 64 * 1024
    assert flow.bytes_received == 1
    assert second[1].flows[0].bytes_received == flow.bytes_sent

    idle = by_job(read())  # nothing moved: the service only says where it listens
    assert idle[1].listening == service.listening
    assert all(f.bytes_sent <= 1 and f.bytes_received == 0 for f in idle[1].flows)  # an ACK
    assert 2 not in idle
    AgentSync(traffic=[*first.values(), *second.values()])  # within the wire's bounds
    outsider.close()


def test_a_connection_opened_after_the_first_read_counts_from_zero(
    tmp_path: Path, jobs: list[Job]
) -> None:
    """Counters are kept from the agent's first read: a long-lived connection's past is
    not one interval's traffic, but a connection the next reads find new counts whole."""
    server = start(jobs, tmp_path, "server", SERVER, "127.0.0.1")
    old = start(jobs, tmp_path, "old", CLIENT, "127.0.0.1", server.first_line, "1")
    old.send(0, MiB)  # before the agent looked
    sampler = TrafficSampler()

    def read() -> dict[int, JobTraffic]:
        return by_job(sampler.read(job_processes([batch(1, 0, server), batch(2, 0, old)], [])))

    assert read() == {}
    new = start(jobs, tmp_path, "new", CLIENT, "127.0.0.1", server.first_line, "1")
    new.send(0, 100_000)
    reports = by_job(
        sampler.read(job_processes([batch(1, 0, server), batch(2, 0, old), batch(3, 0, new)], []))
    )
    assert sorted(reports) == [1, 3]  # the old connection moved nothing since
    (flow,) = reports[3].flows
    assert 100_000 + HEADER <= flow.bytes_sent < 100_000 + 64 * 1024


def test_a_job_keeps_its_busiest_connections_within_the_bound(
    tmp_path: Path, jobs: list[Job]
) -> None:
    """At most ``max_flows`` connections a job (the wire takes 1,024): those that
    carried the most since the last read."""
    server = start(jobs, tmp_path, "server", SERVER, "127.0.0.1")
    client = start(jobs, tmp_path, "client", CLIENT, "127.0.0.1", server.first_line, "6")
    ports = [int(p) for p in client.first_line.split()]
    sampler = TrafficSampler(max_flows=3)
    owners = [batch(1, 0, server), batch(2, 0, client)]
    sampler.read(job_processes(owners, []))
    for i in range(6):
        client.send(i, (i + 1) * 20_000)  # connection 5 the most, 0 the least
    reports = by_job(sampler.read(job_processes(owners, [])))
    kept = [f.local.port for f in reports[2].flows]
    assert kept == [ports[5], ports[4], ports[3]]  # busiest first
    assert sorted(f.remote.port for f in reports[1].flows) == sorted(kept)


def test_only_the_jobs_own_processes_are_read(tmp_path: Path, jobs: list[Job]) -> None:
    """A supervisor whose pid now names another process (its start time differs) is
    not read, nor is anything outside the jobs' trees."""
    server = start(jobs, tmp_path, "server", SERVER, "127.0.0.1")
    _, _, pid, ticks = batch(1, 0, server)
    assert job_processes([(1, 0, pid, ticks + 1)], []) == {}
    (below,) = job_processes([(1, 0, pid, ticks)], [])[(1, 0)]
    assert below != pid  # its job, not the supervisor itself
    sampler = TrafficSampler()
    sampler.read({})
    assert sampler.read({}) == []  # no job holds a socket: no dump at all


def test_an_off_sampler_reads_nothing() -> None:
    import asyncio

    assert asyncio.run(TrafficSampler(0).sample([], [])) == []


def test_ipv4_mapped_addresses_are_written_as_ipv4() -> None:
    assert plain_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert plain_address("::ffff:a01:203") == "::ffff:a01:203"  # not dotted: as it is
    assert plain_address("fe80::1") == "fe80::1"
