"""Fluent builders: ``make_job(1).cpus(2).mem_gib(4).gpus(1).build()``.

Defaults describe the most boring valid thing (a 1-CPU job in partition ``batch``; an
8-CPU, 32 GiB, UP node) so a test states only what matters to it. Every method returns
the builder; ``build()`` returns the frozen core object.
"""

from __future__ import annotations

from typing import Any

from hal.core.data import DataView
from hal.core.dissonance import DissonanceView
from hal.core.job import (
    Allocation,
    ArraySpec,
    Dependency,
    DependencyKind,
    DependencyTerm,
    HetSpec,
    Job,
    JobSpec,
    TopologyConstraint,
)
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, NodeState, PendingReason
from hal.core.traffic import TrafficView
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.wire.agent import Launch

DEFAULT_PARTITION = "batch"


def parse_dependency(text: str) -> Dependency:
    """``"afterok:1:2,singleton"`` or ``"afterany:3?afterok:4"`` → ``Dependency``."""
    any_of = "?" in text
    terms = []
    for part in text.split("?" if any_of else ","):
        kind, *ids = part.split(":")
        terms.append(DependencyTerm(DependencyKind(kind), tuple(int(i) for i in ids)))
    return Dependency(tuple(terms), any_of=any_of)


class JobBuilder:
    def __init__(self, job_id: int) -> None:
        self._spec: dict[str, Any] = {"user": "alice", "script": "#!/bin/sh\ntrue\n"}
        self._job: dict[str, Any] = {
            "id": job_id,
            "partition": DEFAULT_PARTITION,
            "submit_time": float(job_id),
        }
        self._running_on: tuple[str, ...] | None = None
        self._per_node: ResourceVector | None = None
        self._gpu_ids: tuple[tuple[int, ...], ...] = ()

    # -- what it asks for ---------------------------------------------------------------
    def cpus(self, n: int) -> JobBuilder:
        self._spec["cpus_per_task"] = n
        return self

    def tasks(self, n: int, per_node: int | None = None) -> JobBuilder:
        self._spec["ntasks"] = n
        self._spec["ntasks_per_node"] = per_node
        return self

    def mem(self, nbytes: int) -> JobBuilder:
        self._spec["memory_per_node_bytes"] = nbytes
        return self

    def mem_gib(self, gib: float) -> JobBuilder:
        return self.mem(int(gib * GiB))

    def whole_node_memory(self) -> JobBuilder:
        """``--mem=0``."""
        return self.mem(0)

    def gpus(self, per_node: int, gpu_type: str | None = None) -> JobBuilder:
        self._spec["gpus_per_node"] = per_node
        self._spec["gpu_type"] = gpu_type
        return self

    def nodes(self, n_min: int, n_max: int | None = None) -> JobBuilder:
        self._spec["nodes_min"] = n_min
        self._spec["nodes_max"] = n_max if n_max is not None else n_min
        return self

    def exclusive(self) -> JobBuilder:
        self._spec["exclusive"] = True
        return self

    def exclusive_user(self) -> JobBuilder:
        """``--exclusive=user``: its nodes are shared only with the same user's jobs."""
        self._spec["exclusive_user"] = True
        return self

    def constraint(self, *features: str) -> JobBuilder:
        self._spec["constraint"] = features
        return self

    def exclude(self, *names: str) -> JobBuilder:
        self._spec["exclude"] = names
        return self

    def nodelist(self, *names: str) -> JobBuilder:
        self._spec["nodelist"] = names
        return self

    def name(self, name: str) -> JobBuilder:
        self._spec["name"] = name
        return self

    def comment(self, text: str) -> JobBuilder:
        """``--comment`` (``harmonic=LABEL`` in it names the job's workload identity)."""
        self._spec["comment"] = text
        return self

    def user(self, user: str) -> JobBuilder:
        self._spec["user"] = user
        return self

    def account(self, account: str) -> JobBuilder:
        self._spec["account"] = account
        return self

    def qos(self, qos: str) -> JobBuilder:
        self._spec["qos"] = qos
        return self

    def depends(self, text: str, *, kill_on_invalid: bool = False) -> JobBuilder:
        self._spec["dependency"] = parse_dependency(text)
        self._spec["kill_on_invalid_dep"] = kill_on_invalid
        return self

    def hold(self) -> JobBuilder:
        self._spec["hold"] = True
        return self

    def admin_hold(self) -> JobBuilder:
        self._job["held_by_admin"] = True
        return self

    def begin(self, when: float) -> JobBuilder:
        self._spec["begin_time"] = when
        return self

    def switches(self, count: int, wait_s: int | None = None) -> JobBuilder:
        """``--switches=count[@wait]``."""
        self._spec["switches"] = count
        self._spec["switch_wait_s"] = wait_s
        return self

    def topology(self, level: str, *, required: bool = False) -> JobBuilder:
        """``--topology required=level`` or ``preferred=level``."""
        self._spec["topology"] = TopologyConstraint(level, required)
        return self

    def near(self, *rules: str) -> JobBuilder:
        """``--near=rule,...`` as a user writes them (``job:12@leaf``, ``preferred=name:db``)."""
        from hal.core.job_rules import parse_rules

        self._spec["near"] = parse_rules(rules, "near")
        return self

    def apart(self, *rules: str) -> JobBuilder:
        """``--apart=rule,...`` as a user writes them."""
        from hal.core.job_rules import parse_rules

        self._spec["apart"] = parse_rules(rules, "apart")
        return self

    def data(self, *keys: str) -> JobBuilder:
        """``--data key,...``: the job's input cache keys."""
        self._spec["data"] = keys
        return self

    def licenses(self, **counts: int) -> JobBuilder:
        """``-L name:count,...``: licenses the job holds while it runs."""
        self._spec["licenses"] = tuple(sorted(counts.items()))
        return self

    def het(self, het_job_id: int, offset: int, size: int) -> JobBuilder:
        """Component ``offset`` of the ``size``-component het job ``het_job_id``."""
        self._spec["het"] = HetSpec(het_job_id, offset, size)
        return self

    # -- queue facts --------------------------------------------------------------------
    def partition(self, name: str) -> JobBuilder:
        self._job["partition"] = name
        return self

    def partitions(self, *names: str) -> JobBuilder:
        """``-p a,b``: waits in the first (``job.partition``), may start in any."""
        self._spec["partitions"] = names
        return self.partition(names[0])

    def priority(self, p: int) -> JobBuilder:
        self._job["priority"] = p
        return self

    def submitted(self, when: float) -> JobBuilder:
        self._job["submit_time"] = when
        return self

    def limit(self, seconds: int) -> JobBuilder:
        """Resolved time limit; 0 = unlimited."""
        self._job["time_limit_s"] = seconds
        return self

    def asked_limit(self, seconds: int) -> JobBuilder:
        """A time limit the job asked for (``-t``; 0 = unlimited), resolved to the same."""
        self._spec["time_limit_s"] = seconds
        return self.limit(seconds)

    def time_min(self, seconds: int) -> JobBuilder:
        """``--time-min``: backfill may lower the limit to no less than this."""
        self._spec["time_min_s"] = seconds
        return self

    def extra(self, key: str, value: str) -> JobBuilder:
        """One ``job.extra`` entry (a profile's class, a mark such as latency-sensitive)."""
        self._job["extra"] = {**self._job.get("extra", {}), key: value}
        return self

    def reason(self, reason: PendingReason) -> JobBuilder:
        self._job["reason"] = reason
        return self

    def expected_start(self, when: float | None) -> JobBuilder:
        """The start time a backfill pass planned (what the store holds for it)."""
        self._job["expected_start"] = when
        return self

    def array(self, array_job_id: int, task_id: int, max_running: int = 0) -> JobBuilder:
        self._job["array_job_id"] = array_job_id
        self._job["array_task_id"] = task_id
        self._job["array_max_running"] = max_running
        if max_running:
            self._spec["array"] = ArraySpec(indices=(task_id,), max_running=max_running)
        return self

    # -- what became of it --------------------------------------------------------------
    def state(self, state: JobState, exit_code: int = 0) -> JobBuilder:
        self._job["state"] = state
        self._job["exit_code"] = exit_code
        return self

    def running_on(
        self,
        *names: str,
        start: float = 0.0,
        per_node: ResourceVector | None = None,
        gpu_ids: tuple[tuple[int, ...], ...] = (),
        state: JobState = JobState.RUNNING,
    ) -> JobBuilder:
        """Holding resources on ``names`` since ``start``. ``per_node`` defaults to the
        spec's request for that many nodes (pass it for --mem=0/--exclusive jobs)."""
        self._running_on = names
        self._per_node = per_node
        self._gpu_ids = gpu_ids
        self._job["state"] = state
        self._job["start_time"] = start
        return self

    def build(self) -> Job:
        spec = JobSpec(**self._spec)
        job = Job(spec=spec, **self._job)
        if self._running_on is not None:
            n = len(self._running_on)
            per = self._per_node or spec.request_per_node(n)
            job = job.evolve(allocation=Allocation(self._running_on, (per,) * n, self._gpu_ids))
        return job


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._cpus = 8
        self._mem = 32 * GiB
        self._gpus = 0
        self._fields: dict[str, Any] = {}

    def cpus(self, n: int) -> NodeBuilder:
        self._cpus = n
        return self

    def mem_gib(self, gib: float) -> NodeBuilder:
        self._mem = int(gib * GiB)
        return self

    def mem(self, nbytes: int) -> NodeBuilder:
        self._mem = nbytes
        return self

    def gpus(self, n: int, model: str = "") -> NodeBuilder:
        self._gpus = n
        self._fields["gpu_model"] = model
        return self

    def islands(self, *islands: tuple[int, ...]) -> NodeBuilder:
        """The node's NVLink islands, e.g. ``.islands((0, 1), (2, 3))``."""
        self._fields["gpu_islands"] = islands
        return self

    def features(self, *features: str) -> NodeBuilder:
        self._fields["features"] = features
        return self

    def partitions(self, *names: str) -> NodeBuilder:
        self._fields["partitions"] = names
        return self

    def topology(self, *path: str) -> NodeBuilder:
        """The switches from the root down to the node's leaf."""
        self._fields["topology"] = path
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        """Topology labels (``rack="r1", zone="z1"``); with no switch path given, they
        also make the node's path, as the server does (``core.topology_labels``)."""
        from hal.core.topology_labels import label_path

        self._fields["labels"] = dict(labels)
        self._fields.setdefault("topology", label_path(self._name, labels))
        return self

    def nvlink_domain(self, name: str) -> NodeBuilder:
        """The node's multi-node NVLink domain (``hal agent --nvlink-domain``)."""
        self._fields["nvlink_domain"] = name
        return self

    def down(self) -> NodeBuilder:
        self._fields["state"] = NodeState.DOWN
        return self

    def drain(self) -> NodeBuilder:
        self._fields["state"] = NodeState.DRAIN
        return self

    def build(self) -> Node:
        return Node(self._name, ResourceVector(self._cpus, self._mem, self._gpus), **self._fields)


def make_job(job_id: int) -> JobBuilder:
    return JobBuilder(job_id)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class ClusterBuilder:
    """Builds a ``ClusterSnapshot``. Without any ``partition`` call there is one
    partition, ``batch``, over every node."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self._now = now
        self._revision = 1
        self._nodes: list[Node] = []
        self._partitions: list[Partition] = []
        self._pending: list[Job] = []
        self._running: list[Job] = []
        self._related: dict[int, Job] = {}
        self._data: DataView | None = None
        self._traffic: TrafficView | None = None
        self._dissonance: DissonanceView | None = None

    @staticmethod
    def _job(j: Job | JobBuilder) -> Job:
        return j.build() if isinstance(j, JobBuilder) else j

    def at(self, now: float) -> ClusterBuilder:
        self._now = now
        return self

    def revision(self, revision: int) -> ClusterBuilder:
        self._revision = revision
        return self

    def nodes(self, *nodes: Node | NodeBuilder) -> ClusterBuilder:
        self._nodes.extend(n.build() if isinstance(n, NodeBuilder) else n for n in nodes)
        return self

    def uniform_nodes(
        self, count: int, cpus: int = 8, mem_gib: float = 32, gpus: int = 0, prefix: str = "n"
    ) -> ClusterBuilder:
        """``count`` identical nodes named ``n0001``, ``n0002``, ..."""
        for i in range(1, count + 1):
            self._nodes.append(
                make_node(f"{prefix}{i:04d}").cpus(cpus).mem_gib(mem_gib).gpus(gpus).build()
            )
        return self

    def partition(self, name: str, *nodes: str, **limits: Any) -> ClusterBuilder:
        self._partitions.append(Partition(name, nodes=nodes, **limits))
        return self

    def pending(self, *jobs: Job | JobBuilder) -> ClusterBuilder:
        self._pending.extend(self._job(j) for j in jobs)
        return self

    def running(self, *jobs: Job | JobBuilder) -> ClusterBuilder:
        self._running.extend(self._job(j) for j in jobs)
        return self

    def related(self, *jobs: Job | JobBuilder) -> ClusterBuilder:
        for j in jobs:
            job = self._job(j)
            self._related[job.id] = job
        return self

    def data(self, view: DataView) -> ClusterBuilder:
        """The cache's contents as the scheduler sees them (``hal.core.data``)."""
        self._data = view
        return self

    def traffic(self, view: TrafficView) -> ClusterBuilder:
        """Who talks to whom as the scheduler sees it (``hal.core.traffic``)."""
        self._traffic = view
        return self

    def dissonance(self, view: DissonanceView) -> ClusterBuilder:
        """Which classes of work clash, as the scheduler sees it (``hal.core.dissonance``)."""
        self._dissonance = view
        return self

    def build(self) -> ClusterSnapshot:
        partitions = self._partitions or [Partition(DEFAULT_PARTITION, default=True)]
        return ClusterSnapshot(
            revision=self._revision,
            now=self._now,
            nodes=tuple(self._nodes),
            partitions=tuple(partitions),
            pending=tuple(self._pending),
            running=tuple(self._running),
            related=dict(self._related),
            data=self._data,
            traffic=self._traffic,
            dissonance=self._dissonance,
        )


def cluster(now: float = 1_000_000.0) -> ClusterBuilder:
    return ClusterBuilder(now)


def make_launch(job_id: int = 1, **changes: Any) -> Launch:
    """The agent's launch of a 1-CPU job ``true`` on n1, with ``changes`` applied."""
    fields: dict[str, Any] = {
        "job_id": job_id,
        "attempt": 0,
        "name": "j",
        "user": "u",
        "script": "true",
        "workdir": "/tmp",
        "environment": {},
        "stdout": "",
        "stderr": None,
        "time_limit_seconds": 0,
        "memory_bytes": 0,
        "cpus": 1,
        "nodes": ["n1"],
        "node_index": 0,
    }
    fields.update(changes)
    return Launch(**fields)
