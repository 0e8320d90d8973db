"""REST schemas of ``/v1/priority`` (sprio), ``/v1/shares`` (sshare) and
``/v1/jobs/{id}/explain`` (hal explain)."""

from __future__ import annotations

import math

from pydantic import Field, field_validator

from hal.wire.base import WireModel
from hal.wire.bounds import LEVEL_FS_INFINITE

MULTIFACTOR = "priority/multifactor"
BASIC = "priority/basic"


class FactorValues(WireModel):
    """The priority factors of one job: normalised (each in [0, 1]) or weighted."""

    site: float = 0.0
    age: float = 0.0
    fairshare: float = 0.0
    job_size: float = 0.0
    partition: float = 0.0
    qos: float = 0.0


class JobPriorityInfo(WireModel):
    job_id: int
    display_id: str
    user: str
    account: str
    partition: str
    qos: str
    priority: int  # what the queue is sorted by
    fixed: bool  # set by an administrator: kept, not recalculated
    nice: int
    weighted: FactorValues
    normalized: FactorValues


class PriorityWeightsInfo(WireModel):
    """``[priority]``'s multifactor settings, as sprio's header and ``scontrol show
    config`` show them."""

    age: int = 0
    fairshare: int = 0
    job_size: int = 0
    partition: int = 0
    qos: int = 0
    max_age_seconds: float = 7 * 86_400.0
    favor_small: bool = False
    decay_half_life_seconds: float = 7 * 86_400.0  # 0: usage never decays
    calc_period_seconds: float = 60.0


class PriorityList(WireModel):
    plugin: str  # priority/multifactor or priority/basic
    weights: PriorityWeightsInfo
    jobs: list[JobPriorityInfo]


class ShareInfo(WireModel):
    """One association (``user == ""``: an account) as ``sshare`` shows it."""

    account: str
    user: str
    parent: str
    depth: int
    raw_shares: int
    norm_shares: float
    raw_usage: float  # decayed billing-seconds (CPU-seconds + weighted GPU-seconds)
    norm_usage: float
    effective_usage: float
    fairshare: float  # fair tree: rank / N for users, 0 for accounts (sshare: empty)
    # fair tree's Level Fairshare S / U among the siblings (LEVEL_FS_INFINITE: no usage);
    # None with the classic algorithm and for root (sshare -l prints it empty)
    level_fs: float | None = None
    # sshare's TRESRunMins: TRES (cpu, mem in MiB, node, billing, gres/gpu) times the
    # minutes left of the running jobs' time limits, summed up the tree (api/tres_run.py)
    tres_run_minutes: dict[str, int] = Field(default_factory=dict)

    @field_validator("level_fs")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and (math.isinf(value) or value > LEVEL_FS_INFINITE):
            return LEVEL_FS_INFINITE
        return value


class ShareList(WireModel):
    decay_half_life_seconds: float
    rows: list[ShareInfo]


class TresInfo(WireModel):
    """CPUs, GPUs, memory and nodes: a limit (``None``: no cap) or what is in use."""

    cpus: int | None = None
    gpus: int | None = None
    memory_bytes: int | None = None
    nodes: int | None = None


class LimitInfo(WireModel):
    """One QoS or account with limits (``sacctmgr show qos/assoc``) and what its running
    jobs hold against them now."""

    kind: str  # "qos" or "account"
    name: str
    parent: str | None = None  # accounts: the parent account
    cohort: str | None = None  # accounts: the cohort it lends to and borrows from
    max_jobs_per_user: int | None = None  # QoS MaxJobsPerUser, account MaxJobs
    # QoS MaxSubmitJobsPerUser, account MaxSubmitJobs (pending + running, at submit)
    max_submit_jobs_per_user: int | None = None
    grp_submit_jobs: int | None = None  # accounts: GrpSubmitJobs (all users, at submit)
    grp_jobs: int | None = None
    grp_tres: TresInfo
    max_tres_per_job: TresInfo | None = None  # QoS MaxTRESPerJob, account MaxTRES
    max_wall_seconds: int | None = None  # MaxWall (accounts: MaxWallDurationPerJob)
    running_jobs: int
    used: TresInfo  # held by its running jobs (accounts: sub-accounts' jobs included)
    running_by_user: dict[str, int]


class LimitList(WireModel):
    limits: list[LimitInfo]


class NodeRejection(WireModel):
    """Nodes a Filter plugin turned away for the job (each node is counted once, for the
    first plugin in profile order that rejected it)."""

    plugin: str
    reason: str  # e.g. "insufficient gpu", "Resources", a plugin's message
    nodes: int


class BurstOffer(WireModel):
    """What one group's new nodes would cost a job (``hal.cloud.burst.Offer``)."""

    group: str
    nodes: int
    ready_at: float  # now + the group's boot time
    expected_cost: float  # the sum of the three parts
    run_cost: float  # price × (boot + predicted run time) × nodes
    interruption_cost: float  # spot: the lost work and boots expected
    data_cost: float  # moving its --data inputs there
    p_interruption: float
    soon_enough: bool  # its expected start here is later than ready_at + patience


class BurstInfo(WireModel):
    """The autoscaler's burst decision for a waiting job (``hal.cloud.burst.Decision``)."""

    decided_at: float
    expected_start: float | None  # on the capacity already there (None: none known)
    patience_seconds: float | None  # None: never
    runtime_seconds: float  # the predicted run time the costs use
    group: str | None  # the group chosen; None: it waits
    why: str
    offers: list[BurstOffer]


class ExplainInfo(WireModel):
    job_id: int
    display_id: str
    state: str
    reason: str  # the pending reason (Slurm's name)
    detail: str  # one line saying why, in words
    blocking_plugin: str  # "" when nothing blocks it now
    nodes_total: int
    nodes_available: int  # nodes that would take the job now
    nodes_needed: int
    rejections: list[NodeRejection]
    summary: str  # "0/512 nodes available: 384 insufficient gpu, 128 not in partition"
    jobs_ahead: int  # pending jobs before it in its partition's queue
    ahead_ids: list[str]  # the first few of them, in queue order
    priority: JobPriorityInfo | None
    fairshare: ShareInfo | None
    expected_start: float | None  # from the backfill planner (squeue --start)
    earliest_start: float | None  # will-run estimate ignoring other pending jobs
    # a het job: the component (``123+1``) whose request keeps the whole job waiting; the
    # node histogram and blocking plugin are that component's
    het_blocking_component: str | None = None
    # [cloud]: the nodes the autoscaler made for this job that have not joined yet
    cloud_nodes: list[str] = Field(default_factory=list)
    # [cloud]: the autoscaler's last burst decision for it (None: none yet, or no groups)
    burst: BurstInfo | None = None
    # a started job: why the scheduler chose its nodes, when a plugin's choice decided
    # them (the traffic graph's note, as ``JobInfo.placement``); None: none
    placement: str | None = None
    # a malleable or moved job: the feedback controller's last resize or move of it,
    # and why (``hal.core.malleable.ACTION``); None: none
    feedback_action: str | None = None
