"""Communication in the simulator: services and their clients over a real trace, the
traffic of each pair, and what the switches between them cost.

``comm_workload`` lays a synthetic workload over a trace's jobs (which stay as they are:
the background load, its waits and its fragmentation). Each of ``groups`` users runs a
service (one CPU on one node: a database, a parameter server, an inference endpoint),
restarted every ``restart_s`` (each instance runs a quarter longer, so the next one is
up before the last one goes), and the clients that call it: one-node jobs of 1-2 CPUs
arriving in *campaigns* (a burst of clients of one workload identity, a minute or two
apart). Half the campaigns are a recurring workload of the group (one of three labels,
``harmonic=appK``); the other half are new (``harmonic=runK``), an identity the graph
has never seen. Each client talks to its service at its own rate (log-normal around its
group's) for a share of its run time (``share``: it is communication-bound for that
share, computing the rest).

``TrafficModel`` is what the simulator knows while it replays: where each job runs,
and, per ``mode``, the graph each pass sees (``hal.core.traffic.TrafficView``, the same
the server builds from what agents measure):

* ``off``: no graph (the plugin skips: placement as without it);
* ``learned``: what has been *seen*: a client counts once it has run ``seen_after_s``
  beside a running instance of its service (an agent's report); a pair's rate is the
  sum of its seen clients' rates while some run, decaying with ``half_life_s`` after;
* ``oracle``: every pair's expected rate from the start, new campaigns included.

When a client starts, its traffic path is fixed: to the nearest running instance of its
service (none running: across the core). It runs ``share × per_switch × switches``
longer for the switches on that path (0 on one node; 1 under one leaf switch; 3, 5...
each level up; 2 × levels + 1 through the core), and its bytes (rate × its run time
without penalty) count as ``cross_switch_bytes`` when the path leaves its leaf switch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hal.core.job import Job
from hal.core.node import Node
from hal.core.traffic import LABEL_PREFIX, TrafficView, identity
from hal.sim.swf import SwfRecord
from hal.sim.workload import TraceJob

MB = 1_000_000.0
MODES = ("off", "learned", "oracle")
FIRST_ID = 10_000_000  # synthetic job ids, above any trace's


@dataclass(frozen=True, slots=True)
class CommSpec:
    groups: int = 20  # services, one user each
    restart_s: float = 86_400.0  # a service instance's life (it runs 25 % longer)
    campaign_gap_s: float = 6 * 3600.0  # mean time between a group's campaigns
    campaign_clients: float = 12.0  # mean clients per campaign (geometric)
    client_gap_s: float = 90.0  # mean time between a campaign's clients
    client_run_s: float = 3_600.0  # mean client run time (exponential, 2 min .. 8 h)
    rate_bytes: float = 20 * MB  # median client rate (a group's median: log-normal)
    recurring: float = 0.5  # share of campaigns that are a recurring workload


@dataclass(frozen=True, slots=True)
class Flow:
    """A client's traffic: to ``service`` (an identity) at ``rate`` bytes per second,
    for ``share`` of its run time."""

    service: str
    rate: float
    share: float


@dataclass(frozen=True, slots=True)
class CommWorkload:
    jobs: tuple[TraceJob, ...]  # the trace's and the synthetic ones, in submit order
    labels: dict[int, str]  # synthetic job id → its --comment (harmonic=LABEL)
    flows: dict[int, Flow]  # client job id → its traffic
    services: dict[str, int]  # service identity → how many instances
    expected: dict[tuple[str, str], float]  # (client identity, service) → oracle's rate


def _record(job_id: int, submit: float, run: float, procs: int, user: int) -> SwfRecord:
    return SwfRecord(
        job=job_id, submit=submit, wait=-1, run=run, procs_alloc=procs, cpu_avg=-1,
        mem_used=-1, procs_req=procs, time_req=-1, mem_req=-1, status=1, user=user,
        group=-1, executable=-1, queue=-1, partition=-1, preceding_job=-1, think_time=-1,
    )  # fmt: skip


def comm_workload(
    trace: Sequence[TraceJob], seed: int = 1, spec: CommSpec | None = None
) -> CommWorkload:
    """``trace`` with services and clients laid over its span (see the module doc)."""
    spec = spec or CommSpec()
    rng = np.random.default_rng(seed)
    start = trace[0].submit if trace else 0.0
    end = trace[-1].submit if trace else spec.restart_s
    extra: list[TraceJob] = []
    labels: dict[int, str] = {}
    flows: dict[int, Flow] = {}
    services: dict[str, int] = {}
    expected: dict[tuple[str, str], float] = {}
    next_id = FIRST_ID
    fresh = 0

    def add(submit: float, run: float, procs: int, user: int, label: str) -> int:
        nonlocal next_id
        job_id = next_id
        next_id += 1
        requested = float(math.ceil(run * 2 + 600))  # room for the slowest path's penalty
        rec = _record(job_id, submit, run, procs, user)
        extra.append(TraceJob(job_id, submit, run, procs, requested, user, rec))
        labels[job_id] = f"{LABEL_PREFIX}{label}"
        return job_id

    for g in range(spec.groups):
        user = 90_000 + g
        service = identity(f"u{user}", "", f"{LABEL_PREFIX}svc")
        instances = 0
        t = start
        while t <= end:
            add(t, spec.restart_s * 1.25, 1, user, "svc")
            instances += 1
            t += spec.restart_s
        services[service] = instances
        group_rate = float(rng.lognormal(math.log(spec.rate_bytes), 0.7))
        t = start + float(rng.exponential(spec.campaign_gap_s))
        while t <= end:
            if rng.random() < spec.recurring:
                label = f"app{int(rng.integers(3))}"
            else:
                label = f"run{fresh}"
                fresh += 1
            client = identity(f"u{user}", "", f"{LABEL_PREFIX}{label}")
            count = int(rng.geometric(1.0 / spec.campaign_clients))
            at = t
            for _ in range(count):
                run = float(np.clip(rng.exponential(spec.client_run_s), 120.0, 8 * 3600.0))
                job_id = add(at, run, int(rng.integers(1, 3)), user, label)
                rate = float(rng.lognormal(math.log(group_rate), 0.5))
                flows[job_id] = Flow(service, rate, float(rng.uniform(0.2, 0.8)))
                key = (client, service)
                expected[key] = max(expected.get(key, 0.0), group_rate * 3)  # a few at once
                at += float(rng.exponential(spec.client_gap_s))
            t += float(rng.exponential(spec.campaign_gap_s))
    jobs = sorted((*trace, *extra), key=lambda j: (j.submit, j.id))
    return CommWorkload(tuple(jobs), labels, flows, services, expected)


@dataclass
class TrafficModel:
    workload: CommWorkload
    nodes: Sequence[Node]
    mode: str = "learned"
    per_switch: float = 0.1  # extra share of its communication time per switch crossed
    seen_after_s: float = 30.0
    half_life_s: float = 86_400.0
    # what the replay accumulates
    bytes_total: float = 0.0
    cross_switch_bytes: float = 0.0
    switches: dict[int, int] = field(default_factory=dict)  # client id → on its path
    # job id → (identity, first node, start) of every running job; identity → its ids
    _running: dict[int, tuple[str, str, float]] = field(default_factory=dict)
    _by_identity: dict[str, set[int]] = field(default_factory=dict)
    _learned: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    _paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _runs: dict[int, float] = field(default_factory=dict)  # client id → run time

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        self._paths = {n.name: n.topology for n in self.nodes}
        flows = self.workload.flows
        self._runs = {j.id: j.run for j in self.workload.jobs if j.id in flows}

    def comment(self, job_id: int) -> str:
        return self.workload.labels.get(job_id, "")

    # -- what the scheduler sees --------------------------------------------------------

    def view(self, now: float) -> TrafficView | None:
        if self.mode == "off":
            return None
        rates = self.workload.expected if self.mode == "oracle" else self._seen(now)
        between: dict[str, dict[str, float]] = {}
        for (a, b), rate in rates.items():
            if rate > 0:
                between.setdefault(a, {})[b] = between.setdefault(b, {})[a] = rate
        known = {job_id: ident for job_id, (ident, _, _) in self._running.items()}
        return TrafficView(known, between)

    def _seen(self, now: float) -> dict[tuple[str, str], float]:
        """Per pair, the rate the graph holds at ``now``: the seen clients' rates while
        some run, decayed since the last of them otherwise."""
        live: dict[tuple[str, str], float] = {}
        flows = self.workload.flows
        for job_id, (ident, _, start) in self._running.items():
            flow = flows.get(job_id)
            if flow is None or now - start < self.seen_after_s:
                continue
            if self._by_identity.get(flow.service):  # its service answers: measured
                key = (ident, flow.service)
                live[key] = live.get(key, 0.0) + flow.rate
        for key, rate in live.items():
            self._learned[key] = (rate, now)
        return {
            key: rate if key in live else rate * 0.5 ** ((now - at) / self.half_life_s)
            for key, (rate, at) in self._learned.items()
        }

    # -- the replay ---------------------------------------------------------------------

    def started(self, job: Job, nodes: tuple[str, ...], now: float) -> float:
        """Record ``job`` on ``nodes``; the seconds its traffic's path adds to its run."""
        spec = job.spec
        ident = identity(spec.user, spec.name, spec.comment)
        self._running[job.id] = (ident, nodes[0], now)
        self._by_identity.setdefault(ident, set()).add(job.id)
        flow = self.workload.flows.get(job.id)
        if flow is None:
            return 0.0
        path = self._path(nodes[0], flow.service)
        self.switches[job.id] = path
        run = self._runs[job.id]
        sent = flow.rate * run
        self.bytes_total += sent
        if path > 1:  # beyond its leaf switch
            self.cross_switch_bytes += sent
        return run * flow.share * self.per_switch * path

    def ended(self, job_id: int) -> None:
        found = self._running.pop(job_id, None)
        if found is not None:
            self._by_identity[found[0]].discard(job_id)

    def _path(self, node: str, service: str) -> int:
        """Switches between ``node`` and the nearest running instance of ``service``
        (none running: through the core)."""
        there = [self._running[i][1] for i in self._by_identity.get(service, ())]
        if not there:
            depth = max((len(p) for p in self._paths.values()), default=0)
            return 2 * depth + 1
        return min(switches_between(self._paths, node, other) for other in there)


def switches_between(paths: Mapping[str, tuple[str, ...]], a: str, b: str) -> int:
    """Switches a packet crosses from node ``a`` to node ``b``: 0 on one node, 1 under
    one leaf switch, 3 under one switch a level up, and so on; through the core (no
    common switch), 2 × the deeper path + 1."""
    if a == b:
        return 0
    pa, pb = paths.get(a, ()), paths.get(b, ())
    common = 0
    for x, y in zip(pa, pb, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return 2 * max(len(pa), len(pb)) + 1
    up = len(pa) - common  # levels from a's leaf up to the lowest common switch
    return 2 * up + 1
