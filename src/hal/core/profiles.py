"""Job profiles: how a running job behaves on its node, and the class HAL puts it in.

An agent samples each job's resource behaviour (cgroup v1/v2 counters, ``/proc``, and
pressure-stall figures where the kernel has them) and sends it with its usage reports;
the server keeps the latest ``JobProfile`` per job and its class in ``job.extra`` under
``PROFILE_CLASS``. The interference model (``hal harmonic dissonance``) learns how much
each class slows each other class down when they share a node, and the ``dissonance``
score plugin keeps the pairs that clash apart.

Classes are coarse on purpose: the model learns one number per ordered pair of classes,
so a handful of classes learn fast from few observations (Paragon's insight).
"""

from __future__ import annotations

from dataclasses import dataclass

# job.extra key: the class the job's last profile put it in (one of CLASSES)
PROFILE_CLASS = "profile_class"
# job.extra key ("1"): the job asked to be protected from noisy neighbours first
LATENCY_SENSITIVE = "latency_sensitive"

# what dominates a job's behaviour
CPU = "cpu"  # compute-bound: busy CPUs, little memory traffic or I/O
MEMORY = "memory"  # memory-bound: large resident set, memory pressure stalls
IO = "io"  # disk-bound: read/write bytes, I/O pressure stalls
NETWORK = "network"  # network-bound: bytes sent and received
LIGHT = "light"  # little of anything (services between requests, sleepers)
CLASSES = (CPU, MEMORY, IO, NETWORK, LIGHT)


@dataclass(frozen=True, slots=True)
class JobProfile:
    """One job's behaviour on one node over the last sampling window (rates per second)."""

    cpu_util: float  # CPUs busy (1.0 = one CPU all the time)
    rss_bytes: int  # resident memory now
    read_bytes_per_s: float
    write_bytes_per_s: float
    net_bytes_per_s: float  # sent + received (where the agent can attribute it)
    # pressure-stall "some" share of the window (0..1) of the job's cgroup; None where the
    # kernel reports none (cgroup v1, or PSI off)
    cpu_pressure: float | None = None
    memory_pressure: float | None = None
    io_pressure: float | None = None
