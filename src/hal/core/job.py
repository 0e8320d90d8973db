"""Jobs: what a user asked for (``JobSpec``) and what became of it (``Job``).

A ``JobSpec`` is complete and validated: units are resolved (bytes, seconds), Slurm's
defaults applied. It is built by the REST edge (``hal.wire``) from requests that the Slurm
layer (``hal.compat``) or the SDK produced.
"""

from __future__ import annotations

import signal as _signal
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from hal.core.artifacts import ArtifactRef
from hal.core.container import Container
from hal.core.job_rules import JobRule
from hal.core.malleable import MalleableRange
from hal.core.pyenv import PythonEnv
from hal.core.resources import ResourceVector
from hal.core.states import JobState, PendingReason

NO_VAL_ARRAY_INDEX = 4294967294  # what Slurm substitutes for %a outside an array


class DependencyKind(StrEnum):
    AFTER = "after"  # the other job started (or was cancelled)
    AFTERANY = "afterany"  # the other job ended in any way
    AFTEROK = "afterok"  # the other job completed with exit code 0
    AFTERNOTOK = "afternotok"  # the other job ended in any non-success state
    AFTERCORR = "aftercorr"  # the array element with the same index completed ok
    SINGLETON = "singleton"  # no other job with the same name and user is running


@dataclass(frozen=True, slots=True)
class DependencyTerm:
    kind: DependencyKind
    job_ids: tuple[int, ...] = ()  # empty for singleton
    # the ids that name one array element (``afterok:12_0``), though an array has that id:
    # element 0's id is its array's, which alone stands for every element
    elements: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Dependency:
    """``terms`` joined by ``,`` (all must hold) or ``?`` (any may hold)."""

    terms: tuple[DependencyTerm, ...]
    any_of: bool = False

    def __str__(self) -> str:
        sep = "?" if self.any_of else ","
        parts = []
        for t in self.terms:
            if t.kind is DependencyKind.SINGLETON:
                parts.append("singleton")
            else:
                parts.append(t.kind.value + ":" + ":".join(str(j) for j in t.job_ids))
        return sep.join(parts)


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """``--signal=[B:]SIG[@secs]``: send ``signum`` ``seconds_before`` the time limit."""

    signum: int
    seconds_before: int = 60
    batch_only: bool = False

    @property
    def name(self) -> str:
        return _signal.Signals(self.signum).name.removeprefix("SIG")


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """Expanded array indices, plus the ``%`` concurrency limit (0 = unlimited)."""

    indices: tuple[int, ...]
    max_running: int = 0
    text: str = ""  # as the user wrote it, e.g. "0-15:4%2"


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """``--topology required=LEVEL`` (every node under one switch of that level, or wait)
    or ``preferred=LEVEL`` (under one such switch when one can take the job now),
    like Kueue's required/preferred topology. ``LEVEL`` is a level name of the
    cluster's topology (``leaf``, a configured name, or ``levelK``)."""

    level: str
    required: bool = False

    def __str__(self) -> str:
        return f"{'required' if self.required else 'preferred'}={self.level}"


@dataclass(frozen=True, slots=True)
class HetSpec:
    """One component of a heterogeneous job (Slurm's hetjob): the job id of component 0
    (the het job id), this component's offset, and how many components the job has.
    ``job_id`` is 0 until the store assigns ids at submission."""

    job_id: int
    offset: int
    size: int

    @property
    def display_id(self) -> str:
        return f"{self.job_id}+{self.offset}"


@dataclass(frozen=True, slots=True)
class CronSpec:
    """The scrontab entry a cron job runs (docs/user/scrontab.md): its schedule as written
    (``*/5 * * * *``, ``@daily``) and where it is in its user's file, from its first
    ``#SCRON`` line to its command's line (what scancel comments out)."""

    schedule: str
    first_line: int
    line: int


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A complete, validated job request. Per-node quantities are per node."""

    user: str
    script: str
    name: str = "sbatch"
    script_args: tuple[str, ...] = ()  # the script's $1, $2, ... (sbatch job.sh ARGS)
    script_path: str | None = None  # where sbatch read the script (Command=); None: stdin
    workdir: str = "/"
    environment: tuple[tuple[str, str], ...] = ()
    stdout: str | None = None  # pattern; None → slurm-%j.out (slurm-%A_%a.out for arrays)
    stderr: str | None = None  # pattern; None → same file as stdout
    partitions: tuple[str, ...] = ()  # empty → the default partition
    nodes_min: int = 1
    nodes_max: int = 1
    # no -N: the job gets as few nodes as its tasks fit on, up to ``nodes_max`` (one per
    # task), as Slurm's "enough nodes to satisfy the request"; an explicit -N min-max
    # gets as many as it can (False)
    fewest_nodes: bool = False
    ntasks: int = 1
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    min_cpus_per_node: int = 0  # --mincpus: each node gives at least this many CPUs
    memory_per_node_bytes: int | None = None  # --mem; 0 means all memory of the node
    memory_per_cpu_bytes: int | None = None
    memory_per_gpu_bytes: int | None = None
    gpus_per_node: int = 0
    gpus_total: int = 0  # --gpus/-G: spread over the nodes
    gpus_per_task: int = 0
    gpu_type: str | None = None
    time_limit_s: int | None = None  # None → partition default; 0 → unlimited
    # --time-min: backfill may start the job with its limit lowered to no less than this
    # when that lets it start sooner (Slurm's TimeMin); None: its limit is never lowered
    time_min_s: int | None = None
    array: ArraySpec | None = None
    dependency: Dependency | None = None
    kill_on_invalid_dep: bool = False
    account: str | None = None
    qos: str | None = None
    constraint: tuple[str, ...] = ()  # features all required
    exclude: tuple[str, ...] = ()  # node names
    nodelist: tuple[str, ...] = ()  # node names all required
    hold: bool = False
    begin_time: float | None = None
    # --deadline: a pending job that can no longer end by then (now + its --time-min,
    # else its time limit) is ended DEADLINE, as Slurm's; None: none
    deadline: float | None = None
    requeue: bool = True
    signal: SignalSpec | None = None
    # --burst-after: how much later than a new cloud node could start it the job may
    # start on the nodes there before nodes are made for it ("10m", "0.5x" its time
    # limit, "never"; "": its QoS's, partition's or [cloud]'s default; hal.cloud.burst)
    burst_after: str = ""
    exclusive: bool = False
    # --exclusive=user: its nodes run no other user's job while it holds them, and it
    # starts only on nodes no other user's job holds (Slurm's OverSubscribe=USER)
    exclusive_user: bool = False
    # --priority of an administrator: the job starts with it, fixed as `scontrol update
    # Priority=` fixes one (None: the priority it would get)
    priority: int | None = None
    comment: str = ""
    open_mode: str = ""  # --open-mode: "append", "truncate"; "": truncate (Slurm's default)
    wckey: str = ""
    nice: int = 0
    export_env: bool = True  # --export=ALL (the submitter's env is in ``environment``)
    submit_host: str = ""
    switches: int = 0  # --switches=N: at most N leaf switches (0: no limit)
    switch_wait_s: int | None = None  # --switches=N@T: wait at most T (None: the default)
    topology: TopologyConstraint | None = None  # --topology required=LEVEL|preferred=LEVEL
    data: tuple[str, ...] = ()  # --data: input cache keys (hal.core.data)
    reservation: str = ""  # --reservation: run only in this advance reservation
    het: HetSpec | None = None  # a component of a heterogeneous job (docs/user/hetjobs.md)
    # -L/--licenses: (name, count) of the cluster's licenses it holds while it runs
    licenses: tuple[tuple[str, int], ...] = ()
    # --mail-type (``hal.slurm.mail.MailType`` flags; 0: no mail) and where mail goes (the
    # user, or user@MailDomain, when --mail-user was not given: resolved at submission)
    mail_type: int = 0
    mail_user: str = ""
    # a scrontab entry's job: when a run ends it is queued again for the next time its
    # schedule names, under the same id (docs/user/scrontab.md); None for any other job
    cron: CronSpec | None = None
    # an allocation salloc made (its script only holds the nodes): Slurm's BatchFlag=0
    interactive: bool = False
    # --artifact: pinned software its nodes deploy before it runs (docs/user/artifacts.md)
    artifacts: tuple[ArtifactRef, ...] = ()
    # --python-env: the lock its nodes build a Python environment from (hal.core.pyenv)
    python_env: PythonEnv | None = None
    # --container: the image (or OCI bundle) it runs in (hal.core.container)
    container: Container | None = None
    # --near / --apart: placement rules towards other jobs (``hal.core.job_rules``)
    near: tuple[JobRule, ...] = ()
    apart: tuple[JobRule, ...] = ()
    # --feedback-goal: which way each reported metric is better, ((name, "max"|"min"), ...)
    # (``hal.core.feedback``, docs/feedback.md)
    feedback_goals: tuple[tuple[str, str], ...] = ()
    # --feedback-metrics: the job's own Prometheus endpoint its agent scrapes for
    # feedback, "URL[#name,...]" as ``hal.core.feedback.parse_scrape`` checked it; "": none
    feedback_metrics: str = ""
    # --latency-sensitive (or a QoS marked so): kept from noisy neighbours first; the job
    # carries it as ``extra[LATENCY_SENSITIVE]`` (``hal.core.profiles``)
    latency_sensitive: bool = False
    # --malleable: the range it may be resized within (``hal.core.malleable``); the
    # feedback controller requeues it at another size there (docs/feedback.md)
    malleable: MalleableRange | None = None

    def cpus_per_node(self, nodes: int) -> int:
        """CPUs each node must give when the job runs on ``nodes`` nodes."""
        if self.ntasks_per_node is not None:
            tasks = self.ntasks_per_node
        else:
            tasks = -(-self.ntasks // nodes)  # ceil: tasks spread evenly, first nodes fuller
        return max(tasks * self.cpus_per_task, self.min_cpus_per_node)

    @property
    def typed_gpus(self) -> str | None:
        """The GPU type the job's GPUs must be (``--gres=gpu:TYPE:N``), or None when it
        asks no GPUs or any type."""
        if self.gpu_type and (self.gpus_per_node or self.gpus_total or self.gpus_per_task):
            return self.gpu_type
        return None

    def gpus_per_node_on(self, nodes: int) -> int:
        if self.gpus_per_node:
            return self.gpus_per_node
        if self.gpus_total:
            return -(-self.gpus_total // nodes)
        if self.gpus_per_task:
            return self.gpus_per_task * (self.ntasks_per_node or -(-self.ntasks // nodes))
        return 0

    def request_per_node(self, nodes: int, node_memory_bytes: int | None = None) -> ResourceVector:
        """The resources each of ``nodes`` nodes must provide.

        ``--mem=0`` asks for the whole node's memory, so the node's size is needed to
        resolve it; without it the request counts as zero memory.
        """
        cpus = self.cpus_per_node(nodes)
        gpus = self.gpus_per_node_on(nodes)
        if self.memory_per_node_bytes is not None:
            mem = self.memory_per_node_bytes
            if mem == 0:
                mem = node_memory_bytes or 0
        elif self.memory_per_cpu_bytes is not None:
            mem = self.memory_per_cpu_bytes * cpus
        elif self.memory_per_gpu_bytes is not None:
            mem = self.memory_per_gpu_bytes * gpus
        else:
            mem = 0
        return ResourceVector(cpus=cpus, memory_bytes=mem, gpus=gpus)

    def with_changes(self, **changes: object) -> JobSpec:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a running job sits: per node, what it holds. Node order is rank order."""

    nodes: tuple[str, ...]
    per_node: tuple[ResourceVector, ...]
    gpu_ids: tuple[tuple[int, ...], ...] = ()  # per node, the GPU indices held

    def total(self) -> ResourceVector:
        per = self.per_node
        if not per:
            return ResourceVector()
        first = per[0]
        n = len(per)
        if len(set(map(id, per))) == 1:  # uniform: one vector shared by every node
            return ResourceVector(first.cpus * n, first.memory_bytes * n, first.gpus * n)
        return ResourceVector(
            sum(r.cpus for r in per), sum(r.memory_bytes for r in per), sum(r.gpus for r in per)
        )


@dataclass(frozen=True, slots=True)
class Job:
    """One schedulable job (an array element is one job). Immutable; states change by copy."""

    id: int
    spec: JobSpec
    state: JobState = JobState.PENDING
    reason: PendingReason = PendingReason.WAITING_FOR_SCHEDULING
    partition: str = ""  # the partition it was queued in (resolved at submit)
    priority: int = 0
    submit_time: float = 0.0
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    time_limit_s: int = 0  # resolved: 0 → unlimited
    allocation: Allocation | None = None
    exit_code: int = 0
    exit_signal: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_max_running: int = 0
    restarts: int = 0
    held_by_admin: bool = False
    # an administrator set ``priority`` (``scontrol update Priority=``): it is kept, not
    # recalculated by multifactor priority (Slurm's semantics)
    priority_fixed: bool = False
    expected_start: float | None = None
    cancelled_by: str | None = None
    launched: bool = False  # the agent confirmed the batch script started
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def display_id(self) -> str:
        """``123``, ``100_7`` or ``200+1`` (a hetjob component) as squeue shows it."""
        if self.spec.het is not None:
            return self.spec.het.display_id
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)

    @property
    def is_array_element(self) -> bool:
        return self.array_job_id is not None

    @property
    def held(self) -> bool:
        """Held by its user or an administrator (``scontrol hold``): left out of passes."""
        return self.spec.hold or self.held_by_admin

    @property
    def shown_priority(self) -> int:
        """The priority users see: 0 while held, as in Slurm where a hold *is* priority 0
        (``scontrol show job``, squeue's %Q, REST, the dashboard). ``priority`` keeps the
        computed number, so ``scontrol release`` schedules the job by it again."""
        return 0 if self.held else self.priority

    def evolve(self, **changes: object) -> Job:
        return replace(self, **changes)  # type: ignore[arg-type]

    def eligible_since(self, now: float) -> float:
        """When this pending job became eligible to start, which its waits count from
        (priority age, backfill protection, ``--switches`` and data-locality waits, as
        Slurm's EligibleTime): its submit time, its ``--begin``, or when it was released
        from a hold or its dependency was met, or its array's throttle let it go
        (``eligible_time``). ``now`` while it waits on either: the pass that finds it free
        sets ``eligible_time``."""
        if self.reason in WAITING_ON_OTHERS:
            return now
        return max(self.submit_time, self.spec.begin_time or 0.0, self.eligible_time or 0.0)

    def shown_eligible_time(self, now: float) -> float | None:
        """EligibleTime as users see it (REST, ``scontrol show job``, squeue, sacct), as
        Slurm shows it. A pending job whose begin time (``--begin``, ``StartTime=``) is
        still ahead shows that time, when it becomes eligible (its begin time *is* its
        EligibleTime there); one held, or whose dependency is unmet or not judged yet (no
        pass has seen it since it was submitted, released or requeued), or an array
        element held back by its array's ``%N`` throttle, shows None (Unknown, as
        Slurm 22.05.8); any other pending job shows when it became eligible (``eligible_since``:
        its submit time for a plain job). A job past pending shows what was recorded."""
        if self.state is not JobState.PENDING:
            return self.eligible_time
        begin = self.spec.begin_time
        if begin is not None and begin > now:
            return begin
        unjudged = (  # the next pass finds whether its dependency is met
            self.spec.dependency is not None and self.reason is PendingReason.WAITING_FOR_SCHEDULING
        )
        if self.held or unjudged or self.reason in NOT_ELIGIBLE:
            return None
        return self.eligible_since(now)


# a pending job with one of these reasons waits on other jobs (its dependency, its array's
# running elements): not eligible yet, until a pass finds it free
WAITING_ON_OTHERS = frozenset({PendingReason.DEPENDENCY, PendingReason.JOB_ARRAY_TASK_LIMIT})
NOT_ELIGIBLE = WAITING_ON_OTHERS | {PendingReason.DEPENDENCY_NEVER_SATISFIED}


def licenses_held(jobs: Iterable[Job]) -> Counter[str]:
    """How many of each license the running (or suspended, completing) ``jobs`` hold."""
    held: Counter[str] = Counter()
    for job in jobs:
        if job.state.is_active:
            for name, count in job.spec.licenses:
                held[name] += count
    return held
