"""A running job's profile: how it behaves on this node over a sampling window
(``JobProfileSample``), for the long poll with its usage (``UsageSampler``); the server
classes it (``hal.core.profiles.classify``).

With each usage sample (at most every ``USAGE_MIN_INTERVAL_S``), per job, one read of
its cumulative counters (``read_counters``), differenced against the previous one into
rates over the window (``ProfileSampler.profile``). A job's first sample has no window:
it gets its profile from its second on. Where each figure comes from:

===============  =====================================================================
CPU              cgroup2 ``cpu.stat`` ``usage_usec`` of the job's cgroup (its steps'
                 included); else the CPU seconds of its processes from ``/proc`` (the
                 usage sample's, the processes already reaped included)
memory           the processes' resident memory summed (the usage sample's), and the job
                 cgroup's charge: ``memory.current`` (cgroup2) or
                 ``memory.usage_in_bytes`` (cgroup1)
I/O              cgroup2 ``io.stat`` ``rbytes``/``wbytes`` where the job's cgroup has the
                 io controller; else ``read_bytes``/``write_bytes`` of ``/proc/PID/io``
                 summed over the job's processes (the bytes that reached or came from
                 storage; a process's reaped children's fold into it)
network          TCP bytes sent and received by the job's sockets at the traffic
                 telemetry's last read (``TrafficSampler.job_rates``); None while it
                 reads nothing (off, first read, sock_diag unreadable)
pressure         the "some" ``total`` (µs stalled) of the job cgroup's ``cpu.pressure``,
                 ``memory.pressure`` and ``io.pressure``, cgroup2 only (on a hybrid host,
                 the accounting cgroup: ``Isolation.accounting``); None elsewhere
===============  =====================================================================

Pressure is the share of the window in which some task of the job waited (the
``total`` counters differenced, not the kernel's 10-second ``avg10``, so that the share
is over the same window as the rates).

Cost per job and sample: a handful of small cgroup files, plus one ``/proc/PID/io`` per
process where I/O comes from ``/proc`` (docs/harmonic.md, Profiles, has the figure).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from hal.wire.jobs import MAX_CPUS_BUSY, MAX_RATE, JobProfileSample, ProfileSource

JobKey = tuple[int, int]  # (job id, attempt)
PRESSURES = ("cpu", "memory", "io")
MAX_WINDOW_S = 86_400.0  # JobProfileSample.interval_seconds' bound


@dataclass(frozen=True, slots=True)
class Counters:
    """A job's cumulative counters at one read (``read_counters``)."""

    at: float  # monotonic seconds
    source: ProfileSource  # (JobProfileSample.source)
    cpu_seconds: float
    read_bytes: int
    write_bytes: int
    rss_bytes: int
    memory_bytes: int | None  # the cgroup's charge now; None: no memory cgroup
    # seconds some task stalled on the CPU, memory, I/O, so far; None: no pressure file
    stalls: tuple[float | None, float | None, float | None] = (None, None, None)


def read_counters(
    at: float,
    *,
    proc_cpu_seconds: float,
    rss_bytes: int,
    pids: Iterable[int],
    cgroup2: str = "",
    cgroup1_memory: str = "",
) -> Counters:
    """The job's counters now: from its cgroup2 cgroup ``cgroup2`` (the job's own, or
    its accounting cgroup on a hybrid host; "": none) where it exists, its cgroup1
    memory cgroup ``cgroup1_memory`` for the memory charge, and its processes ``pids``
    for I/O where the cgroup has no ``io.stat``. ``proc_cpu_seconds`` and ``rss_bytes``:
    the usage sample's figures for the same processes."""
    cpu = proc_cpu_seconds
    io: tuple[int, int] | None = None
    memory: int | None = None
    stalls: tuple[float | None, float | None, float | None] = (None, None, None)
    source: ProfileSource = "proc"
    if cgroup2 and os.path.isdir(cgroup2):
        source = "cgroup2"
        usage = _keyed(cgroup2, "cpu.stat").get("usage_usec")
        if usage is not None:
            cpu = usage / 1e6
        io = _io_stat(cgroup2)
        memory = _first_int(cgroup2, "memory.current")
        stalls = (
            _stalled(cgroup2, "cpu.pressure"),
            _stalled(cgroup2, "memory.pressure"),
            _stalled(cgroup2, "io.pressure"),
        )
    if cgroup1_memory:
        memory = _first_int(cgroup1_memory, "memory.usage_in_bytes")
        if source == "proc":
            source = "cgroup1"
    if io is None:
        io = proc_io(pids)
    return Counters(at, source, cpu, io[0], io[1], rss_bytes, memory, stalls)


def proc_io(pids: Iterable[int]) -> tuple[int, int]:
    """Bytes read from and written to storage by ``pids`` so far (``read_bytes`` and
    ``write_bytes`` of ``/proc/PID/io``), summed; a process gone, or not ours to read
    (another user's, for an agent that is not root), counts nothing."""
    read = written = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io", "rb") as f:
                data = f.read()
        except OSError:
            continue
        for line in data.splitlines():
            if line.startswith(b"read_bytes:"):
                read += int(line[11:])
            elif line.startswith(b"write_bytes:"):
                written += int(line[12:])
    return read, written


class ProfileSampler:
    """Each running job's last counters, and its profile over the window since them."""

    def __init__(self) -> None:
        self._last: dict[JobKey, Counters] = {}

    def profile(
        self, key: JobKey, now: Counters, net_bytes_per_s: float | None
    ) -> JobProfileSample | None:
        """The job ``key``'s profile from its previous counters to ``now`` (which it
        keeps for the next); None for its first read, or when the two reads came from
        different sources (a cgroup that appeared or went). ``net_bytes_per_s``: the
        traffic telemetry's figure for it (None: not attributed)."""
        before = self._last.get(key)
        self._last[key] = now
        if before is None or before.source != now.source:
            return None
        window = now.at - before.at
        if window <= 0:
            return None

        def rate(after: float, earlier: float, bound: float) -> float:
            # a counter that went back (a process that left the tree took its counts
            # along): nothing in this window
            return min(max(after - earlier, 0) / window, bound)

        shares = [
            None if b is None or a is None else min(max(a - b, 0.0) / window, 1.0)
            for a, b in zip(now.stalls, before.stalls, strict=True)
        ]
        return JobProfileSample(
            interval_seconds=min(window, MAX_WINDOW_S),
            source=now.source,
            cpu_util=rate(now.cpu_seconds, before.cpu_seconds, MAX_CPUS_BUSY),
            rss_bytes=now.rss_bytes,
            memory_bytes=now.memory_bytes,
            read_bytes_per_s=rate(now.read_bytes, before.read_bytes, MAX_RATE),
            write_bytes_per_s=rate(now.write_bytes, before.write_bytes, MAX_RATE),
            net_bytes_per_s=None if net_bytes_per_s is None else min(net_bytes_per_s, MAX_RATE),
            cpu_pressure=shares[0],
            memory_pressure=shares[1],
            io_pressure=shares[2],
        )

    def keep(self, running: Iterable[JobKey]) -> None:
        """Forget the counters of the jobs not in ``running`` (ended)."""
        wanted = set(running)
        for key in self._last.keys() - wanted:
            del self._last[key]


def _read(directory: str, name: str) -> str | None:
    try:
        with open(os.path.join(directory, name)) as f:
            return f.read()
    except OSError:
        return None


def _keyed(directory: str, name: str) -> dict[str, int]:
    """A flat keyed file (``cpu.stat``): each line's key and integer value."""
    out: dict[str, int] = {}
    for line in (_read(directory, name) or "").splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


def _first_int(directory: str, name: str) -> int | None:
    text = _read(directory, name)
    try:
        return int(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def _io_stat(directory: str) -> tuple[int, int] | None:
    """``rbytes`` and ``wbytes`` of cgroup2 ``io.stat`` summed over the devices; None
    where the cgroup has no io controller (no such file)."""
    text = _read(directory, "io.stat")
    if text is None:
        return None
    read = written = 0
    for line in text.splitlines():
        for field in line.split()[1:]:
            name, _, value = field.partition("=")
            if name in ("rbytes", "wbytes") and value.isdigit():
                if name == "rbytes":
                    read += int(value)
                else:
                    written += int(value)
    return read, written


def _stalled(directory: str, name: str) -> float | None:
    """Seconds some task of the cgroup stalled so far: the ``total`` (µs) of the
    ``some`` line of a pressure file; None where there is none (PSI off)."""
    text = _read(directory, name)
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            for field in line.split()[1:]:
                if field.startswith("total="):
                    return int(field[6:]) / 1e6
    return None
