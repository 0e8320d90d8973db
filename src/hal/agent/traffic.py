"""``TrafficSampler``: which running job on this node talks TCP with whom, and how much,
for the long poll (``AgentSync.traffic``); the control plane builds its graph of who
talks to whom from it (harmonic placement).

Every ``traffic_interval_seconds`` (default 10; 0 = off), before a long poll, a worker
thread reads, in order:

1. each job's processes: its batch script's tree below the step supervisor (checked by
   start time, as the usage sample does: no recycled pid) and its step tasks' trees
   (``job_processes``), and the socket inodes each holds (``procfs.socket_inodes``:
   ``/proc/<pid>/fd``, for the jobs' own pids only, never a scan of all of ``/proc``);
2. the host's TCP sockets with those inodes from the kernel (``sockdiag.tcp_sockets``:
   sock_diag with ``tcp_info``, IPv4 and IPv6, loopback included);

and reports per job the addresses it listens on and each connection's bytes since the
previous read: ``tcpi_bytes_acked`` as sent, ``tcpi_bytes_received`` as received, both
differenced per socket (by its cookie). A socket first seen counts from 0: all it
carried before that read is in its first report. The agent's first read only records
where the counters stand, so an agent that starts beside long-lived connections does not
report their whole past as one interval's traffic.

What is lost, by design: a connection opened and closed between two reads (its counters
die with it), the last bytes of one that closed since the previous read, and an
interval whose sync failed. A socket shared by processes of two jobs counts for the
first job that holds it. A job connected to itself reports both ends.

Bounded: at most ``max_flows`` connections per job (1,024, the wire's bound), the ones
that carried the most bytes; 256 listening addresses per job; 4,096 jobs. The counters
kept between reads are one pair per socket of a running job. Connections that carried
nothing since the previous read are left out.

sock_diag unreadable (not Linux, pyroute2 missing, a sandbox that refuses the netlink
family) is logged once, at the first failed read, and the agent sends no traffic until
a read works again: it never stops the agent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping

from hal.agent.procfs import descendants, socket_inodes
from hal.agent.sockdiag import SockDiagUnavailable, TcpSocket, tcp_sockets
from hal.agent.steps import TaskRef
from hal.agent.usage import Supervised
from hal.host.process import start_ticks
from hal.wire.agent import Endpoint, JobFlow, JobTraffic

log = logging.getLogger("hal.agent")

TRAFFIC_INTERVAL_S = 10.0  # AgentConfig.traffic_interval_seconds' default
MAX_FLOWS = 1024  # JobTraffic.flows' bound
MAX_LISTENING = 256  # JobTraffic.listening's bound
MAX_JOBS = 4096  # AgentSync.traffic's bound
MAX_INTERVAL_S = 86_400.0  # JobTraffic.interval_seconds' bound
JobKey = tuple[int, int]  # (job id, attempt)


def job_processes(
    watched: Iterable[Supervised], tasks: Iterable[TaskRef]
) -> dict[JobKey, list[int]]:
    """The live processes of each running job here: those below its step supervisor
    (whose start time still matches: not a recycled pid) and its step tasks with the
    processes below them."""
    found: dict[JobKey, list[int]] = {}
    for job_id, attempt, pid, ticks in watched:
        if start_ticks(pid) == ticks:
            found.setdefault((job_id, attempt), []).extend(descendants(pid))
    for job_id, attempt, _step, _rank, root in tasks:
        found.setdefault((job_id, attempt), []).extend([root, *descendants(root)])
    return found


class TrafficSampler:
    def __init__(
        self, interval_seconds: float = TRAFFIC_INTERVAL_S, *, max_flows: int = MAX_FLOWS
    ) -> None:
        self.interval_seconds = interval_seconds  # 0: never read
        self.max_flows = max_flows
        self._counters: dict[int, tuple[int, int]] = {}  # cookie → (acked, received)
        self._read_at: float | None = None  # monotonic time of the last read that worked
        self._failing = False  # the last read failed (logged once, until one works)
        # bytes a second each job's connections carried at the last read that reported
        # (all of them, before the wire's bounds); None: none yet, or reads failing
        self._rates: dict[JobKey, float] | None = None

    async def sample(self, watched: list[Supervised], tasks: list[TaskRef]) -> list[JobTraffic]:
        """The running jobs' traffic (``watched``: batch jobs' supervisors; ``tasks``:
        step tasks) since the previous read, read off the event loop; nothing when that
        read is under ``interval_seconds`` old, on the first read, or when sock_diag
        cannot be read."""
        if self.interval_seconds <= 0:
            return []
        if self._read_at is not None and time.monotonic() - self._read_at < self.interval_seconds:
            return []
        return await asyncio.to_thread(lambda: self.read(job_processes(watched, tasks)))

    def read(self, processes: Mapping[JobKey, Iterable[int]]) -> list[JobTraffic]:
        """One read now, whatever the interval: each job's (``processes``: its pids)
        listening addresses and connections with the bytes they carried since the
        previous read."""
        owner: dict[int, JobKey] = {}
        for key, pids in processes.items():
            for pid in pids:
                for inode in socket_inodes(pid):
                    owner.setdefault(inode, key)  # shared with another job: the first's
        now = time.monotonic()
        try:
            sockets = tcp_sockets(owner) if owner else []
        except SockDiagUnavailable as err:
            if not self._failing:
                log.warning("no TCP traffic telemetry (tried again each interval): %s", err)
            self._failing = True
            self._rates = None
            return []
        if self._failing:
            log.info("TCP traffic telemetry readable again")
            self._failing = False
        first, since = self._read_at is None, now - (self._read_at or now)
        self._read_at = now
        listening, flows = self._difference(sockets, owner)
        if first:
            return []  # where the counters stand: the next read reports from here
        interval = min(max(since, 1e-3), MAX_INTERVAL_S)
        self._rates = {
            key: sum(f.bytes_sent + f.bytes_received for f in carried) / interval
            for key, carried in flows.items()
        }
        return self._reports(listening, flows, interval)

    def job_rates(self) -> dict[JobKey, float] | None:
        """TCP bytes a second (sent + received) of each job that carried any at the last
        read that reported (a job not in it: none); None while no read has reported
        (off, the first read, sock_diag unreadable). The jobs' profiles take it
        (``UsageSampler.net_rates``)."""
        return self._rates if self.interval_seconds > 0 else None

    def _difference(
        self, sockets: list[TcpSocket], owner: Mapping[int, JobKey]
    ) -> tuple[dict[JobKey, set[tuple[str, int]]], dict[JobKey, list[JobFlow]]]:
        """Each job's listening addresses and its connections' bytes since the counters
        kept, which this read's replace (the sockets gone since are forgotten)."""
        listening: dict[JobKey, set[tuple[str, int]]] = {}
        flows: dict[JobKey, list[JobFlow]] = {}
        kept, counters = self._counters, {}
        for sock in sockets:
            key = owner[sock.inode]
            if sock.listening:
                listening.setdefault(key, set()).add(sock.local)
                continue
            acked, received = kept.get(sock.cookie, (0, 0))  # new: from 0
            counters[sock.cookie] = (sock.bytes_acked, sock.bytes_received)
            sent, got = max(0, sock.bytes_acked - acked), max(0, sock.bytes_received - received)
            if sent or got:
                flows.setdefault(key, []).append(
                    JobFlow(
                        local=Endpoint(address=sock.local[0], port=sock.local[1]),
                        remote=Endpoint(address=sock.remote[0], port=sock.remote[1]),
                        bytes_sent=sent,
                        bytes_received=got,
                    )
                )
        self._counters = counters
        return listening, flows

    def _reports(
        self,
        listening: Mapping[JobKey, set[tuple[str, int]]],
        flows: Mapping[JobKey, list[JobFlow]],
        interval: float,
    ) -> list[JobTraffic]:
        """One ``JobTraffic`` per job with something to say, within the wire's bounds:
        the jobs and the connections that carried the most are kept."""
        reports: list[tuple[int, JobTraffic]] = []
        for key in sorted(listening.keys() | flows.keys()):
            mine = sorted(
                flows.get(key, []), key=lambda f: f.bytes_sent + f.bytes_received, reverse=True
            )[: self.max_flows]
            ends = sorted(listening.get(key, set()), key=lambda e: (e[1], e[0]))[:MAX_LISTENING]
            report = JobTraffic(
                job_id=key[0],
                attempt=key[1],
                interval_seconds=interval,
                listening=[Endpoint(address=a, port=p) for a, p in ends],
                flows=mine,
            )
            reports.append((sum(f.bytes_sent + f.bytes_received for f in mine), report))
        if len(reports) > MAX_JOBS:
            reports = sorted(reports, key=lambda r: r[0], reverse=True)[:MAX_JOBS]
            reports.sort(key=lambda r: (r[1].job_id, r[1].attempt))
        return [report for _, report in reports]
