"""The rows the state store reads and writes, as plain frozen data, and the codecs of
node, reservation, event and fair-share rows that both store implementations share
(``SqlStateStore`` and ``MemoryStateStore``: one encoding, so a value read back from
either is the same). Jobs' rows are ``hal.state.codec``'s. No I/O here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hal.core.job import Allocation
from hal.core.node import Node
from hal.core.reservation import Reservation, flag_words, stored_flags
from hal.core.resources import ResourceVector
from hal.core.states import NodeState
from hal.state.codec import allocation_from_json

# the ``jobs.state`` values of a job not ended yet: the mirror loads all of them at start
ACTIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
# the ``jobs`` columns (``codec.job_to_row``) that ``update_jobs`` writes; the user, array
# ids, submit time, script and usage (``record_usage``) are written once
UPDATED_COLUMNS = (
    "state",
    "reason",
    "partition",
    "priority",
    "eligible_time",
    "start_time",
    "end_time",
    "time_limit",
    "exit_code",
    "exit_signal",
    "restarts",
    "array_max_running",  # ArrayTaskThrottle
    "held_by_admin",
    "priority_fixed",
    "cancelled_by",
    "allocation",
    "name",
    "spec",
    "launched",
    "marks",
)
# of those, what only the job's spec gives (``update_jobs``'s ``same_spec``: not written
# again for a job whose spec is the one stored, as at its start, launch and end)
SPEC_COLUMNS = ("name", "spec")
KEPT_SPEC_COLUMNS = tuple(c for c in UPDATED_COLUMNS if c not in SPEC_COLUMNS)
# a DOWN node that keeps Slurm's DRAIN flag (``Node.drain``), as its state column holds it
DOWN_DRAIN = "DOWN+DRAIN"


def stored_node_state(node: Node) -> str:
    """The ``state`` column of ``node``: its state, ``DOWN+DRAIN`` with the drain flag (a
    server older than this one reads no such value: it is written only for a drained
    node an operator set DOWN)."""
    return DOWN_DRAIN if node.drain and node.state is NodeState.DOWN else node.state.value


@dataclass(frozen=True, slots=True)
class EventRow:
    time: float
    kind: str
    job_id: int | None = None
    node: str | None = None
    state: str | None = None
    data: dict[str, Any] | None = None


# what a finished job's batch script used: (job id, max RSS, CPU seconds, and their user
# and system parts, None where its agent did not say them)
JobUse = tuple[int, int, float, float | None, float | None]


@dataclass(frozen=True, slots=True)
class StepRow:
    """An ended job step, as accounting keeps it (``schema.job_steps``)."""

    job_id: int
    step_id: int
    name: str
    nodelist: str
    ntasks: int
    state: str
    exit_code: int
    start_time: float
    end_time: float
    exit_signal: int = 0  # the signal that ended its worst task (0: it exited)
    # what its tasks used (``hal.state.step_usage``; 0 and "": not measured)
    max_rss_bytes: int = 0  # the most of one task
    max_rss_node: str = ""  # ... its node
    max_rss_task: int = 0  # ... its rank
    ave_rss_bytes: int = 0  # the tasks' mean of their most
    total_cpu_seconds: float = 0.0  # user and system, all its tasks
    # its tasks' GPU use (``step_usage.gpu_summary``; None: not read for GPUs): the most
    # of one task and the tasks' mean, of memory and of utilisation
    gpu_max_mem_bytes: int | None = None
    gpu_ave_mem_bytes: int | None = None
    gpu_max_util: int | None = None
    gpu_ave_util: float | None = None
    cpus: int = 0  # the job's CPUs it was given (0: not recorded)
    memory_bytes: int = 0  # ... and memory
    cancelled_by: str | None = None  # who scancel'd it alone (sacct's "CANCELLED by UID")
    with_job: bool = False  # its job's end ended it (not in the job's DerivedExitCode)
    # total_cpu_seconds' user and system parts (``step_usage.cpu_times``; None: not
    # known, a task's end without them, or a step from before)
    user_cpu_seconds: float | None = None
    system_cpu_seconds: float | None = None
    attempt: int = 0  # the job's run it started in (its restarts then; 0: the first)


@dataclass(frozen=True, slots=True)
class RunRow:
    """An earlier run of a requeued job (``schema.job_runs``), as sacct -D shows it."""

    job_id: int
    attempt: int
    state: str
    exit_code: int
    exit_signal: int
    partition: str
    submit_time: float
    eligible_time: float | None
    start_time: float | None
    end_time: float
    allocation: str | None  # JSON (``codec.allocation_to_json``)
    max_rss: int
    cpu_seconds: float
    interrupted_at: float | None = None  # a provider's interruption notice ended it then
    lost_work: float | None = None  # seconds of work lost with it (PREEMPTED, NODE_FAIL)
    cost: float = 0.0  # what its cloud nodes cost (``hal.core.cloud_costs``; 0: none)


@dataclass(frozen=True, slots=True)
class RunningStepRow:
    """A running job step, kept for a server restart (``schema.running_steps``)."""

    job_id: int
    step_id: int
    attempt: int
    name: str
    nodes: str  # comma-separated
    tasks: str  # comma-separated counts, or each node's ranks (``step_restore``)
    start_time: float
    # JSON: {node: [exit code, signal, oom, {rank: [rss, cpu]}, {rank: [GPU memory, most
    # util, mean util]}]} (``step_restore``)
    ended: str = "{}"
    local: bool = False  # srun runs it on the batch node (``StepTable.open_local``)
    gpu_ids: str = "{}"  # JSON: {node: [GPU ids]} it holds (``step_restore``)
    cpus: str = "{}"  # JSON: {node: [the job's CPUs it holds there]} (``step_restore``)
    srun: str = ""  # a local step's srun process, "PID:START" (``StepCreate.srun``)
    memory: str = "{}"  # JSON: {node: bytes of the job's memory it holds} (``step_restore``)
    cancelled_at: float | None = None  # scancel ended it then (``StepTable.cancel``)
    cancelled_by: str | None = None  # ... at the request of (a user name)
    relay: str = ""  # JSON: {node: [ranks reading srun's stdin]}; "": none (``step_restore``)


@dataclass(frozen=True, slots=True)
class PartitionOverride:
    """What ``scontrol update PartitionName=P`` set (``schema.partition_overrides``):
    None where hal.toml's value holds (``hal.state.partitions``)."""

    name: str
    updated_by: str
    updated_at: float
    state: str | None = None
    max_time_s: int | None = None
    default_time_s: int | None = None
    max_nodes: int | None = None
    priority_job_factor: int | None = None
    priority_tier: int | None = None
    is_default: bool | None = None


@dataclass(frozen=True, slots=True)
class TrafficEdgeRow:
    """An edge of the traffic graph between two workload identities
    (``schema.traffic_edges``, ``hal.server.traffic``): ``a`` < ``b`` (or equal: jobs of
    one workload talking to each other), the decayed bytes between them as of ``at``,
    and when their first bytes were measured."""

    a: str
    b: str
    decayed_bytes: float
    at: float
    since: float


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    time: float
    kind: str
    job_id: int | None
    node: str | None
    state: str | None
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredUser:
    """A row of ``users``: an administrator, a user, or an agent (``agent``: its token is
    accepted by /v1/agent only, for the nodes of the host list ``agent_nodes``, "" for
    any node)."""

    name: str
    admin: bool
    agent: bool = False
    agent_nodes: str = ""


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """What fair share charges of a run that ended (``finished_usage``)."""

    id: int
    user: str
    account: str | None  # as asked at submit (None: the user's default)
    start: float
    end: float
    allocation: Allocation | None
    marks: dict[str, str]  # ``job.extra``'s marks: its suspensions


@dataclass(frozen=True, slots=True)
class SubmitKey:
    """A submission's ``Idempotency-Key`` (a user's own: keys of different users never
    meet) and the sha256 of its request body, which a resend must repeat."""

    user: str
    key: str
    digest: str


def node_to_row(node: Node) -> dict[str, Any]:
    """The ``nodes`` row of ``node``."""
    return {
        "name": node.name,
        "cpus": node.resources.cpus,
        "memory_bytes": node.resources.memory_bytes,
        "gpus": node.resources.gpus,
        "gpu_model": node.gpu_model,
        "features": json.dumps(list(node.features)),
        "state": stored_node_state(node),
        "reason": node.reason,
        "reason_user": node.reason_user,
        "reason_time": node.reason_time,
        "address": node.address,
        "last_heartbeat": node.last_heartbeat,
        "topology_labels": json.dumps(node.labels, sort_keys=True),
        "nvlink_domain": node.nvlink_domain,
        "gpu_islands": json.dumps([list(i) for i in node.gpu_islands]),
    }


def node_from_row(r: Any) -> Node:
    """The node of a ``nodes`` row (columns as attributes)."""
    return Node(
        name=r.name,
        resources=ResourceVector(r.cpus, r.memory_bytes, r.gpus),
        state=NodeState(r.state.partition("+")[0]),
        drain=r.state == DOWN_DRAIN,
        reason=r.reason,
        reason_user=r.reason_user,
        reason_time=r.reason_time,
        features=tuple(json.loads(r.features)),
        gpu_model=r.gpu_model,
        address=r.address,
        last_heartbeat=r.last_heartbeat,
        labels=dict(json.loads(r.topology_labels)),
        nvlink_domain=r.nvlink_domain,
        gpu_islands=tuple(tuple(i) for i in json.loads(r.gpu_islands)),
    )


def reservation_to_row(r: Reservation) -> dict[str, Any]:
    """The ``reservations`` row of ``r`` (its lists as JSON)."""
    return {
        "name": r.name,
        "start_time": r.start,
        "end_time": r.end,
        "nodes": json.dumps(list(r.nodes)),
        "users": json.dumps(list(r.users)),
        "accounts": json.dumps(list(r.accounts)),
        "flags": json.dumps(flag_words(r)),
        "partition": r.partition,
    }


def reservation_from_row(r: Any) -> Reservation:
    """The reservation of a ``reservations`` row (columns as attributes)."""
    flags, purge = stored_flags(json.loads(r.flags))  # (PURGE_COMP=s)
    return Reservation(
        name=r.name,
        start=r.start_time,
        end=r.end_time,
        nodes=tuple(json.loads(r.nodes)),
        users=tuple(json.loads(r.users)),
        accounts=tuple(json.loads(r.accounts)),
        flags=flags,
        partition=r.partition,
        purge_after=purge,
    )


def event_to_row(r: EventRow) -> dict[str, Any]:
    """The ``events`` row of ``r``, less its id (the store gives it): ``data`` as JSON,
    None when empty. What a reader gets back is the JSON's reading (lists for tuples)."""
    return {
        "time": r.time,
        "kind": r.kind,
        "job_id": r.job_id,
        "node": r.node,
        "state": r.state,
        "data": json.dumps(r.data, separators=(",", ":")) if r.data else None,
    }


def event_from_row(r: Any) -> StoredEvent:
    """The stored event of an ``events`` row (columns as attributes)."""
    data = json.loads(r.data) if r.data else {}
    return StoredEvent(int(r.id), r.time, r.kind, r.job_id, r.node, r.state, data)


def finished_run_from_row(r: Any) -> FinishedRun:
    """What fair share charges of a ``jobs`` row of a run that ended."""
    return FinishedRun(
        id=int(r.id),
        user=r.user_name,
        account=json.loads(r.spec).get("account"),
        start=float(r.start_time),
        end=float(r.end_time),
        allocation=allocation_from_json(r.allocation),
        marks=json.loads(r.marks) if r.marks and r.marks != "{}" else {},
    )
