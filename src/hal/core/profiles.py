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


# ``classify``'s thresholds (see its docstring for why each is where it is)
CPU_BUSY = 0.5  # CPUs busy per CPU allocated
MEMORY_STALL = 0.05  # share of the window some task stalled on memory
MEMORY_FULL = 0.75  # resident memory / memory allocated
MEMORY_FLOOR = 256 * 1024 * 1024  # ... counted only from this many resident bytes
IO_BYTES_PER_S = 20e6  # read + written
IO_STALL = 0.10  # share of the window some task stalled on I/O
NET_BYTES_PER_S = 12.5e6  # sent + received: a tenth of a 1 Gb/s link


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
    # what the job was given on that node (0: not known): the yardsticks of CPU and memory
    cpus: int = 0
    memory_bytes: int = 0


def classify(profile: JobProfile) -> str:
    """The class (one of ``CLASSES``) of the resource that dominates ``profile``.

    Each dimension is scored as its measure over its threshold; the class is the
    dimension with the highest score of at least 1, and ``LIGHT`` when none reaches 1.
    A job that is busy on several fronts so goes to the one it presses hardest, and a
    CPU-bound job is one that is busy computing and does little else.

    - ``CPU``: CPUs wanted per CPU allocated ≥ ``CPU_BUSY`` (0.5). Half of what it was
      given is where a job starts to compete for cores and caches with its neighbours;
      below it, the job mostly waits. CPUs wanted are the CPUs busy plus the CPU
      "some" pressure share: while some task of the job was runnable and not running,
      at least one more CPU was wanted, so a spinner on a crowded node that gets 0.4 of
      a CPU and waits the rest still counts as CPU-bound. The score tops out near 2 (a
      job fenced to its CPUs cannot be busier than them), so a job that also moves bytes
      well past the I/O or network threshold is classed by those.
    - ``MEMORY``: memory "some" pressure ≥ ``MEMORY_STALL`` (5 % of the window some task
      waited for reclaim or swap-in, which a job whose memory fits never shows: it
      is losing real time to memory), or resident memory ≥ ``MEMORY_FULL``
      (75 %) of the memory allocated, counted from ``MEMORY_FLOOR`` (256 MiB) up: a job
      that fills most of a large allocation is the one whose neighbours' page cache and
      reclaim it competes with. Memory bandwidth itself needs hardware counters that
      neither cgroups nor /proc give; a bandwidth hog shows as CPU.
    - ``IO``: read + written ≥ ``IO_BYTES_PER_S`` (20 MB/s: a tenth of a SATA SSD's
      sequential bandwidth and above what services' logging and checkpoints average),
      or I/O "some" pressure ≥ ``IO_STALL`` (10 %: a job syncing small writes moves few
      bytes but waits on the disk, and so makes its neighbours wait).
    - ``NETWORK``: sent + received ≥ ``NET_BYTES_PER_S`` (12.5 MB/s, a tenth of a 1 Gb/s
      link, where a neighbour's traffic starts to show in another job's latency).

    ``cpus`` or ``memory_bytes`` of 0 (not known): CPU busy counts per CPU used as is,
    and the resident-memory rule is off."""
    wanted = profile.cpu_util + (profile.cpu_pressure or 0.0)
    per_cpu = wanted / profile.cpus if profile.cpus > 0 else wanted
    memory = (profile.memory_pressure or 0.0) / MEMORY_STALL
    if profile.memory_bytes > 0 and profile.rss_bytes >= MEMORY_FLOOR:
        memory = max(memory, profile.rss_bytes / profile.memory_bytes / MEMORY_FULL)
    io_bytes = profile.read_bytes_per_s + profile.write_bytes_per_s
    scores = {
        CPU: per_cpu / CPU_BUSY,
        MEMORY: memory,
        IO: max(io_bytes / IO_BYTES_PER_S, (profile.io_pressure or 0.0) / IO_STALL),
        NETWORK: profile.net_bytes_per_s / NET_BYTES_PER_S,
    }
    best = max(scores, key=lambda name: scores[name])  # (ties: CLASSES' order)
    return best if scores[best] >= 1.0 else LIGHT
