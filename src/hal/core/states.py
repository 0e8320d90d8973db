"""Job and node states, with Slurm's names and two-letter codes.

HAL uses Slurm's vocabulary everywhere (API, CLI, metrics) because workflow tools parse it:
PSI/J asserts that every state code it reads is one of Slurm's.
"""

from __future__ import annotations

from enum import StrEnum

from hal.core.state_names import JOB_STATE_CODES, TERMINAL_JOB_STATES
from hal.core.state_names import OTHER_SLURM_STATES as OTHER_SLURM_STATES  # noqa: PLC0414


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"

    @property
    def code(self) -> str:
        return STATE_CODES[self]

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def is_active(self) -> bool:
        """Holds resources on a node (running, suspended or being cleaned up)."""
        return self in (JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING)


STATE_CODES: dict[JobState, str] = {JobState(name): code for name, code in JOB_STATE_CODES.items()}
STATES_BY_CODE: dict[str, JobState] = {code: state for state, code in STATE_CODES.items()}
TERMINAL_STATES = frozenset(JobState(name) for name in TERMINAL_JOB_STATES)


class PendingReason(StrEnum):
    """Why a job is not running (Slurm's ``job_reason_codes``), and why a job ended."""

    NONE = "None"
    WAITING_FOR_SCHEDULING = "WaitingForScheduling"
    PRIORITY = "Priority"
    RESOURCES = "Resources"
    DEPENDENCY = "Dependency"
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"
    BEGIN_TIME = "BeginTime"
    JOB_HELD_USER = "JobHeldUser"
    JOB_HELD_ADMIN = "JobHeldAdmin"
    PARTITION_TIME_LIMIT = "PartitionTimeLimit"
    PARTITION_NODE_LIMIT = "PartitionNodeLimit"
    PARTITION_DOWN = "PartitionDown"
    PARTITION_INACTIVE = "PartitionInactive"
    REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
    BAD_CONSTRAINTS = "BadConstraints"
    JOB_ARRAY_TASK_LIMIT = "JobArrayTaskLimit"
    NODE_DOWN = "NodeDown"
    # accounting limits (AccountingStorageEnforce=limits): the QoS's ...
    QOS_MAX_JOBS_PER_USER = "QOSMaxJobsPerUserLimit"
    QOS_MAX_WALL_PER_JOB = "QOSMaxWallDurationPerJobLimit"
    QOS_MAX_CPU_PER_JOB = "QOSMaxCpuPerJobLimit"
    QOS_MAX_GRES_PER_JOB = "QOSMaxGRESPerJob"
    QOS_MAX_MEM_PER_JOB = "QOSMaxMemoryPerJob"
    QOS_MAX_NODE_PER_JOB = "QOSMaxNodePerJobLimit"
    QOS_GRP_CPU = "QOSGrpCpuLimit"
    QOS_GRP_GRES = "QOSGrpGRES"
    QOS_GRP_MEM = "QOSGrpMemLimit"
    QOS_GRP_NODE = "QOSGrpNodeLimit"
    QOS_GRP_JOBS = "QOSGrpJobsLimit"
    # ... and the account association's (or an ancestor account's)
    ASSOC_MAX_JOBS = "AssocMaxJobsLimit"
    ASSOC_GRP_JOBS = "AssocGrpJobsLimit"
    ASSOC_GRP_CPU = "AssocGrpCpuLimit"
    ASSOC_GRP_GRES = "AssocGrpGRES"
    ASSOC_GRP_MEM = "AssocGrpMemLimit"
    ASSOC_GRP_NODE = "AssocGrpNodeLimit"
    ASSOC_MAX_WALL_PER_JOB = "AssocMaxWallDurationPerJobLimit"
    ASSOC_MAX_CPU_PER_JOB = "AssocMaxCpuPerJobLimit"
    ASSOC_MAX_GRES_PER_JOB = "AssocMaxGRESPerJob"
    ASSOC_MAX_MEM_PER_JOB = "AssocMaxMemPerJob"
    ASSOC_MAX_NODE_PER_JOB = "AssocMaxNodePerJobLimit"
    # HAL's own (Slurm has none for it): waiting, within --switches' max-wait, for a
    # placement on fewer leaf switches than are free now.
    TOPOLOGY = "Topology"
    # HAL's own: waiting, within [data] locality_wait_seconds, for a node whose cache
    # holds more of the job's --data inputs than the free ones (delay scheduling).
    DATA_LOCALITY = "DataLocality"
    # HAL's own: a --near/--apart rule holds the job: its target does not run yet, or no
    # free node lies where the rule allows (hal.scheduler.plugins.affinity)
    AFFINITY = "Affinity"
    # HAL's own: only new cloud nodes could hold the job now, and its account's (or QoS's)
    # cloud_budget would be passed by them; it runs on owned nodes when they free up
    CLOUD_BUDGET = "CloudBudget"
    # advance reservations (``scontrol create reservation``): a job waiting for its
    # reservation (not started yet, nodes busy, or unknown to it), and an ordinary job
    # -L: not enough of a license is free now (hal.scheduler.plugins.licenses)
    LICENSES = "Licenses"
    # kept off nodes a maintenance reservation holds
    RESERVATION = "Reservation"
    RESERVED_FOR_MAINTENANCE = "ReqNodeNotAvail, Reserved for maintenance"
    # a pending job whose reservation was deleted: held (its owner releases it) with
    # the reservation cleared, as Slurm does (``hal.state.reservations.delete``)
    RESERVATION_DELETED = "ReservationDeleted"
    # ``scontrol requeuehold``: back in the queue, held until its owner releases it
    # (Slurm's WAIT_HELD_USER with this description, which its commands show)
    REQUEUED_HELD = "job requeued in held state"
    # --deadline: it could no longer end by its deadline, and was ended DEADLINE
    DEADLINE = "DeadLine"
    # reasons recorded on finished jobs
    NON_ZERO_EXIT_CODE = "NonZeroExitCode"
    JOB_LAUNCH_FAILURE = "JobLaunchFailure"  # its script could not start (output file...)
    TIME_LIMIT = "TimeLimit"
    OUT_OF_MEMORY = "OutOfMemory"
    # a job ended NODE_FAIL: Slurm's FAIL_DOWN_NODE, whose name is NodeDown (PSI/J checks
    # a failed job's reason against Slurm's names and asserts)
    NODE_FAIL = "NodeDown"

    @classmethod
    def _missing_(cls, value: object) -> PendingReason | None:
        # "NodeFail": what HAL recorded for NODE_FAIL before it used Slurm's name; rows
        # stored then still load
        return cls.NODE_FAIL if value == "NodeFail" else None


class NodeState(StrEnum):
    """The administrative/health state an operator or a heartbeat sets.

    ``idle``/``mix``/``alloc`` are derived from allocations at display time; what is stored
    is whether the node is usable at all.
    """

    UP = "UP"
    DOWN = "DOWN"
    DRAIN = "DRAIN"


class PartitionState(StrEnum):
    """A partition's State (Slurm's; ``scontrol update PartitionName=P State=...``):
    whether it takes new jobs (UP, DOWN) and whether it starts queued ones (UP, DRAIN).
    INACTIVE does neither. Running jobs run on in every state."""

    UP = "UP"
    DOWN = "DOWN"
    DRAIN = "DRAIN"
    INACTIVE = "INACTIVE"

    @property
    def takes_jobs(self) -> bool:
        return self is _PARTITION_UP or self is _PARTITION_DOWN

    @property
    def starts_jobs(self) -> bool:
        # (module constants: a member looked up through the enum class costs about
        # 80 ns, and the pass asks this of every pending job)
        return self is _PARTITION_UP or self is _PARTITION_DRAIN


_PARTITION_UP, _PARTITION_DOWN = PartitionState.UP, PartitionState.DOWN
_PARTITION_DRAIN = PartitionState.DRAIN
