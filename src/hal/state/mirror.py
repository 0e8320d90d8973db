"""``Mirror``: the control plane's in-memory view of the cluster — the active jobs (and
those that ended within MinJobAge), nodes and their usage, partitions, reservations and
the latest events — and what is read from it: job look-ups, node display states, and the
scheduler's snapshot. No I/O and no lock: the writer (``hal.state.cluster.Cluster``, whose
base class this is) changes it only after the store has committed, through its one change
handle, so a reader on the event loop always sees committed state."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, deque
from collections.abc import Iterable, Mapping

from hal.config.model import HalConfig
from hal.core.clock import Clock
from hal.core.errors import InvalidRequest, NotFound
from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.preemption import GRACE_END, holds_no_cpus, suspended_by_preemption
from hal.core.reservation import Reservation
from hal.core.states import JobState, NodeState
from hal.core.topology_labels import label_path
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.state.node_table import NodeTable
from hal.state.node_usage import NodeUsage, hold, release
from hal.state.store import PartitionOverride, StoredEvent

RECENT_EVENTS = 100_000
NOT_MADE = "cloud: not made yet"  # the reason of a [cloud] node that does not exist yet


class Mirror:
    def __init__(self, config: HalConfig, clock: Clock) -> None:
        self.clock = clock
        self.jobs: dict[int, Job] = {}
        # the pending and running subset of ``jobs``: what a scheduling pass looks at, so
        # its cost does not grow with the finished jobs kept for MinJobAge
        self.unfinished: dict[int, Job] = {}
        # ids of the jobs suspended by preemption (``hal.state.preempt.resume_freed``
        # runs after every batch of finished jobs: it must not scan the whole queue)
        self.preempt_suspended: set[int] = set()
        # ids of the pending and of the active (running, suspended, completing) jobs, and
        # of the unfinished ones with a preemption grace time running (``GRACE_END``):
        # what the housekeeping, the observability sample and the traffic graph read
        # every second or five, kept per change so that none walks the whole queue
        self.pending_ids: set[int] = set()
        self.active_ids: set[int] = set()
        self.graced: set[int] = set()
        self._nodes = NodeTable()
        # a snapshot's nodes, sorted by name, as of ``nodes.version``: sorting 10,000 of
        # them on every pass cost more than the pass's other bookkeeping
        self._sorted_nodes: tuple[int, tuple[Node, ...]] = (-1, ())
        self.usage: dict[str, NodeUsage] = {}
        self.arrays: dict[int, list[int]] = {}  # array job id → element ids (in the mirror)
        # the stored rows ``fill_related`` read for dependency targets that have left the
        # mirror, by target id (an array's: all its elements). Kept while pending jobs name
        # the target; an array's are dropped when more of its elements are pruned.
        self.stored_related: dict[int, list[Job]] = {}
        self.reservations: dict[str, Reservation] = {}  # see hal.state.reservations
        # the latest committed events, for event streams (older ones are read from the store)
        self.recent_events: deque[StoredEvent] = deque(maxlen=RECENT_EVENTS)
        self.revision = 0
        # (name, user) of the running and suspended jobs, for what a singleton dependency
        # shows (``busy_names``); None: counted again at the next ask (any job changed)
        self._busy_names: Counter[tuple[str, str]] | None = None
        self.configure(config)

    def configure(self, config: HalConfig) -> None:
        """Take ``config``: at start, and again at ``scontrol reconfigure``
        (``hal.server.reconfigure``), which has checked that no pending or running job is
        in a partition ``config`` drops. Everything else reads ``self.config`` when it
        needs it, so the next submit and the next pass see the new values."""
        self.config = config
        self.partitions: dict[str, Partition] = {p.name: p for p in config.partition_objects()}
        # scontrol update's changes over them (``hal.state.partitions``): the file's
        # partitions again here, and in the store (``take_config``)
        self.partition_overrides: dict[str, PartitionOverride] = {}
        # the nodes [cloud] groups may create, as each will be once joined: a job that
        # fits one of them is taken at submit while it fits no joined node
        self.cloud_templates: dict[str, Node] = {
            name: group.template(name).evolve(state=NodeState.DOWN, reason=NOT_MADE)
            for group in config.cloud.groups
            for name in group.nodes
        }
        # node → what an hour of it costs (its group's price: the configured one until the
        # autoscaler reads a published one, ``set_cloud_price``); a job starting on such
        # nodes keeps their sum as its rate (``hal.core.cloud_costs.RATE``)
        self.cloud_prices: dict[str, float] = {
            name: group.price_per_hour
            for group in config.cloud.groups
            if group.price_per_hour > 0
            for name in group.nodes
        }

    def set_cloud_price(self, nodes: Iterable[str], price: float) -> None:
        """A group's price (``nodes``: its names) as its provider now publishes it: the
        jobs that start from now on are charged it."""
        for name in nodes:
            if price > 0:
                self.cloud_prices[name] = price
            else:
                self.cloud_prices.pop(name, None)

    def busy_names(self) -> Counter[tuple[str, str]]:
        """(name, user) of the jobs running or suspended: what a ``singleton`` dependency
        waits on. Counted once until a job changes, so a listing of many singleton jobs
        does not scan the queue for each."""
        if self._busy_names is None:
            self._busy_names = Counter(
                (j.spec.name, j.spec.user)
                for j in self.unfinished.values()
                if j.state in (JobState.RUNNING, JobState.SUSPENDED)
            )
        return self._busy_names

    def put(self, job: Job) -> None:
        """Mirror ``job`` as committed: the queue's subsets, node usage and arrays follow.
        Only the cluster's change handle calls it (``hal.state.cluster.Change``), after
        the store has committed the job."""
        self._busy_names = None
        old = self.jobs.get(job.id)
        was = old is not None and old.state.is_active
        # a job suspended or resumed for preemption gives back or takes again its CPUs
        moved = (
            old is not None
            and was
            and job.state.is_active
            and holds_no_cpus(old) != holds_no_cpus(job)
        )
        if old is not None and was and (moved or not job.state.is_active):
            release(self.usage, old, job.end_time or 0.0)  # (old: still running)
        if job.state.is_active and (not was or moved):
            hold(self.usage, job)
        self.jobs[job.id] = job
        if suspended_by_preemption(job):
            self.preempt_suspended.add(job.id)
        else:
            self.preempt_suspended.discard(job.id)
        state, jid = job.state, job.id
        pending, active = state is JobState.PENDING, state.is_active
        if pending or active:
            self.unfinished[jid] = job
        else:
            self.unfinished.pop(jid, None)
        _keep(self.pending_ids, jid, pending)
        _keep(self.active_ids, jid, active)
        _keep(self.graced, jid, (pending or active) and GRACE_END in job.extra)
        if job.array_job_id is not None and old is None:
            self.arrays.setdefault(job.array_job_id, []).append(job.id)

    def events_since(self, after: int, limit: int) -> list[StoredEvent] | None:
        """Committed events after id ``after`` from memory, or ``None`` when they are older
        than what memory holds (the caller then reads the store)."""
        recent = self.recent_events
        if not recent or after < recent[0].id - 1:
            return None if self.revision > after else []
        start = bisect.bisect_right(recent, after, key=lambda e: e.id)
        return list(itertools.islice(recent, start, start + limit))

    def element_id(self, array: int, index: int) -> int:
        """The job id of element ``index`` of array ``array`` (a dependency on ``123_4``);
        ``InvalidRequest`` when there is none, as Slurm's "Job dependency problem"."""
        for job_id in self.arrays.get(array, ()):
            job = self.jobs.get(job_id)
            if job is not None and job.array_task_id == index:
                return job_id
        raise InvalidRequest(
            f"Job dependency problem: array job {array} has no element {index} "
            f"(squeue -r -j {array} lists its elements)",
            field="dependency",
        )

    def resolve(self, ident: str | int) -> list[Job]:
        """``123`` (a job or a whole array), ``100_7`` or ``100_[1-3]`` → jobs in the mirror."""
        text = str(ident).strip()
        try:
            if "_" in text:
                base_text, idx_text = text.split("_", 1)
                base = int(base_text)
                wanted = array_indices(idx_text)
                found = [
                    job
                    for job in (self.jobs[i] for i in self.arrays.get(base, ()))
                    if job.array_task_id is not None and any(job.array_task_id in r for r in wanted)
                ]
            elif "+" in text:
                base_text, offset_text = text.split("+", 1)
                base, offset = int(base_text), int(offset_text)
                found = [
                    j
                    for j in self.het_components(base)
                    if j.spec.het is not None and j.spec.het.offset == offset
                ]
            else:
                jid = int(text)
                job = self.jobs.get(jid)
                if job is not None and job.spec.het is not None and job.spec.het.offset == 0:
                    found = self.het_components(jid)  # ``123``: the whole het job
                elif jid in self.arrays:
                    found = [self.jobs[i] for i in self.arrays[jid]]
                elif jid in self.jobs:
                    found = [self.jobs[jid]]
                else:
                    found = []
        except ValueError as err:
            raise InvalidRequest(
                f"invalid job id {text!r}; use 123, 123_4, 123_[1-3] or 123+1", field="job_id"
            ) from err
        if not found:
            raise NotFound(f"Invalid job id specified: {text}")
        return sorted(found, key=lambda j: j.id)

    def het_components(self, het_job_id: int) -> list[Job]:
        """The components of het job ``het_job_id`` still in the mirror, by offset."""
        first = self.jobs.get(het_job_id)
        if first is None or first.spec.het is None:
            return []
        size = first.spec.het.size
        found = []
        for jid in range(het_job_id, het_job_id + size):
            job = self.jobs.get(jid)
            if job is not None and job.spec.het is not None and job.spec.het.job_id == het_job_id:
                found.append(job)
        return found

    def with_het_components(self, jobs: list[Job]) -> list[Job]:
        """``jobs`` plus every other component of the het jobs among them, by id."""
        het_ids = {j.spec.het.job_id for j in jobs if j.spec.het is not None}
        if not het_ids:
            return jobs
        found = {j.id: j for j in jobs}
        for het_id in het_ids:
            found.update((j.id, j) for j in self.het_components(het_id))
        return sorted(found.values(), key=lambda j: j.id)

    def topology_path(self, node: str, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The node's placement path: its switch path from the config's ``[topology]``
        when that has switches or blocks (configuration, applied, not stored), else the
        path its topology labels make (``core.topology_labels``; ``()`` without)."""
        topo = self.config.topology
        if topo is not None and topo.has_tree:
            return topo.path_of(node)
        return label_path(node, labels)

    def node_labels(self, node: str, agent: Mapping[str, str]) -> dict[str, str]:
        """The node's topology labels: the agent's, overridden by ``[[topology.labels]]``."""
        topo = self.config.topology
        return {**agent, **(topo.labels_of(node) if topo is not None else {})}

    def default_partition(self) -> str:
        """hal.toml's default, or the one ``scontrol update Default=YES`` made so."""
        for p in self.partitions.values():
            if p.default:
                return p.name
        return self.config.default_partition

    def node_display_state(self, node: Node) -> str:
        used = self.usage.get(node.name)
        busy = bool(used and used.jobs)
        if node.state is NodeState.DOWN:
            return "down"
        if node.state is NodeState.DRAIN:
            return "drng" if busy else "drain"
        if not busy or used is None:
            return "idle"
        full = used.exclusive or not (used.allocated.cpus < node.resources.cpus)
        return "alloc" if full else "mix"

    @property
    def nodes(self) -> NodeTable:
        return self._nodes

    @nodes.setter
    def nodes(self, nodes: Mapping[str, Node]) -> None:
        """Nodes given whole (tests do): a table whose version goes on from the last."""
        table = NodeTable(nodes)
        table.version = self._nodes.version + 1
        self._nodes = table

    def _nodes_by_name(self, unmade: list[Node]) -> tuple[Node, ...]:
        if unmade:  # [cloud] templates among them: few, and rare
            return tuple(sorted([*self.nodes.values(), *unmade], key=lambda n: n.name))
        version, nodes = self._sorted_nodes
        if version != self.nodes.version:
            nodes = tuple(sorted(self.nodes.values(), key=lambda n: n.name))
            self._sorted_nodes = (self.nodes.version, nodes)
        return nodes

    def has_pending(self) -> bool:
        """Whether a job is pending and not held (``snapshot``'s ``pending``)."""
        unfinished = self.unfinished
        return any(not unfinished[i].held for i in self.pending_ids)

    def snapshot(self, *, made: bool = False) -> ClusterSnapshot:
        """The scheduler's view. ``made``: [cloud] nodes not made yet as if they were
        (idle), for ``--test-only``, as Slurm's answers count powered-down cloud nodes."""
        pending: list[Job] = []
        running: list[Job] = []
        for job in self.unfinished.values():
            if job.state is JobState.PENDING:
                # A held job can neither start nor hold anything back, and its reason was
                # set when it was held: leave it out of scheduling passes until released
                # (a queue of 20,000 held jobs then costs the scheduler nothing).
                if not job.held:
                    pending.append(job)
            elif job.state.is_active:
                running.append(job)
        related: dict[int, Job] = {}
        for job in pending:
            dep = job.spec.dependency
            if dep is None:
                continue
            for term in dep.terms:
                for jid in term.job_ids:
                    target = self.jobs.get(jid)
                    elements = self.arrays.get(jid, ())
                    array = target.spec.array if target is not None else None
                    if array is not None and len(elements) < len(array.indices):
                        continue  # elements have left the mirror: ``fill_related`` reads all
                    if target is not None:
                        related[jid] = target
                    for element in elements:
                        related[element] = self.jobs[element]
        now = self.clock.now()
        # [cloud] nodes not made yet, as nodes that are down: a job only they could hold
        # waits for Resources (the autoscaler makes them), not BadConstraints
        unmade = [t for name, t in self.cloud_templates.items() if name not in self.nodes]
        if made:
            unmade = [t.evolve(state=NodeState.UP, reason="") for t in unmade]
        return ClusterSnapshot(
            revision=self.revision,
            now=now,
            nodes=self._nodes_by_name(unmade),
            partitions=tuple(self.partitions.values()),
            pending=tuple(pending),
            running=tuple(running),
            related=related,
            reservations=tuple(r for r in self.reservations.values() if not r.ended(now)),
        )

    def prune(self) -> int:
        """Forget jobs that ended more than MinJobAge ago (they stay in the store)."""
        horizon = self.clock.now() - self.config.min_job_age_seconds
        old = [
            j.id
            for j in self.jobs.values()
            if j.state.is_terminal and j.end_time is not None and j.end_time < horizon
        ]
        for jid in old:
            job = self.jobs.pop(jid)
            if job.array_job_id is not None:
                self.stored_related.pop(job.array_job_id, None)  # its rows are stale now
                ids = self.arrays.get(job.array_job_id)
                if ids is not None:
                    ids.remove(jid)
                    if not ids:
                        del self.arrays[job.array_job_id]
        return len(old)


def array_indices(text: str) -> list[range]:
    """The array indices ``7``, ``[1-3]``, ``[0-15:4,20]`` name, as ranges: a range is
    tested for an index without listing it, so ``1_[0-999999999999]`` costs no more
    than ``1_[0-3]`` (expanded, it held the server's event loop and filled its memory)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]
    out: list[range] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            step = 1
            if ":" in hi:
                hi, step_text = hi.split(":", 1)
                step = int(step_text)
            out.append(range(int(lo), int(hi) + 1, step))
        elif part:
            out.append(range(int(part), int(part) + 1))
    return out


def _keep(ids: set[int], job_id: int, member: bool) -> None:
    if member:
        ids.add(job_id)
    else:
        ids.discard(job_id)
