"""Accounts, QoS, their limits and the multifactor priority weights (Slurm's
``priority/multifactor`` and ``AccountingStorageEnforce=limits``).

Plain values read from ``hal.toml`` (``[priority]``, ``[[accounts]]``, ``[[users]]``,
``[[qos]]``) and used by the priority calculation in
``hal.scheduler.plugins.multifactor`` and the limits in ``hal.scheduler.plugins.limits``.
Times are seconds; a limit of ``None`` is no limit.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from hal.core.cloud_costs import CloudBudget

ROOT_ACCOUNT = "root"
DEFAULT_QOS = "normal"  # the QoS of a job that names none
# Fair-share usage is rebuilt at start-up from the runs that ended within this many decay
# half-lives (older ones weigh less than 2^-40): what [accounting] purge_jobs_after must keep
USAGE_HALF_LIVES = 40
# [priority] fairshare_algorithm: Slurm's classic fair share (PriorityFlags=NO_FAIR_TREE)
# or fair tree (Slurm's default since 19.05)
FairshareAlgorithm = Literal["classic", "fair_tree"]
FAIRSHARE_ALGORITHMS: tuple[FairshareAlgorithm, ...] = ("classic", "fair_tree")
SUBMIT_LIMIT_MESSAGE = (
    "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
)


@dataclass(frozen=True, slots=True)
class TresLimits:
    """A cap on trackable resources (Slurm's ``GrpTRES=``/``MaxTRESPerJob=``): CPUs,
    GPUs, memory in bytes and nodes. ``None``: no cap on that resource."""

    cpus: int | None = None
    gpus: int | None = None
    mem_bytes: int | None = None
    nodes: int | None = None

    @property
    def vector(self) -> tuple[int | None, int | None, int | None, int | None]:
        """The caps in the order limits count resources: CPUs, GPUs, memory, nodes."""
        return (self.cpus, self.gpus, self.mem_bytes, self.nodes)

    @property
    def any(self) -> bool:
        return any(v is not None for v in self.vector)


NO_TRES_LIMITS = TresLimits()


@dataclass(frozen=True, slots=True)
class Account:
    """One node of the account tree (organisation → project → ...). ``parent`` is
    ``root`` for a top-level account. ``shares`` is Slurm's ``Fairshare=`` (raw shares,
    compared with the siblings')."""

    name: str
    parent: str = ROOT_ACCOUNT
    shares: int = 1
    # limits (a job counts against its account and every ancestor's):
    max_jobs: int | None = None  # MaxJobs: running jobs per user in this account
    grp_jobs: int | None = None  # GrpJobs: running jobs of the account (all users)
    grp_tres: TresLimits = NO_TRES_LIMITS  # GrpTRES over the account's running jobs
    # per job (each job charged to the account or a descendant must keep them; a job
    # held by one pends, Slurm's association MaxTRES and MaxWallDurationPerJob):
    max_tres_per_job: TresLimits = NO_TRES_LIMITS  # MaxTRES (cpus, gpus, mem, nodes)
    max_wall_s: int | None = None  # MaxWall (an unlimited job exceeds any)
    # at submit (pending + running jobs; over them the submission is refused):
    max_submit_jobs: int | None = None  # MaxSubmitJobs: per user in the account
    grp_submit_jobs: int | None = None  # GrpSubmitJobs: all users of the account
    # Lending (like Kueue's cohorts): accounts naming the same cohort lend each other the
    # GrpTRES they leave unused, and take it back when they need it (docs/admin/priority.md).
    cohort: str | None = None
    borrow_limit: TresLimits = NO_TRES_LIMITS  # at most this much above its own GrpTRES
    # what new [cloud] nodes may be made for in a period (``hal.core.cloud_costs``): the
    # autoscaler's, not the scheduler's (a job still starts on owned nodes)
    cloud_budget: CloudBudget | None = None

    @property
    def has_limits(self) -> bool:
        """Any limit the scheduler enforces (the submit limits are checked at submit)."""
        return (
            self.max_jobs is not None
            or self.grp_jobs is not None
            or self.grp_tres.any
            or self.max_tres_per_job.any
            or self.max_wall_s is not None
        )

    @property
    def has_submit_limits(self) -> bool:
        return self.max_submit_jobs is not None or self.grp_submit_jobs is not None


@dataclass(frozen=True, slots=True)
class UserAccount:
    """A user's association with an account: the leaf of the tree that holds the user's
    usage there. ``default`` marks the account a job without ``--account`` is charged to."""

    user: str
    account: str
    shares: int = 1
    default: bool = False


@dataclass(frozen=True, slots=True)
class Qos:
    """A quality of service: its priority (the QOS factor) and its limits."""

    name: str
    priority: int = 0
    max_jobs_per_user: int | None = None  # MaxJobsPerUser: running
    max_submit_jobs_per_user: int | None = None  # MaxSubmitJobsPerUser: pending + running
    max_wall_s: int | None = None  # MaxWall (per job; an unlimited job exceeds any)
    max_tres_per_job: TresLimits = NO_TRES_LIMITS  # MaxTRESPerJob (cpus, gpus, mem, nodes)
    grp_tres: TresLimits = NO_TRES_LIMITS  # GrpTRES over the QoS's running jobs
    grp_jobs: int | None = None  # GrpJobs: running jobs of the QoS
    # Preemption (``[preemption] type = "qos"``, docs/admin/preemption.md): the QoS whose jobs
    # this QoS's jobs may preempt (Preempt=); how this QoS's own jobs are preempted
    # (PreemptMode, GraceTime; None: the [preemption] defaults).
    preempt: tuple[str, ...] = ()
    preempt_mode: str | None = None
    grace_time_s: float | None = None
    cloud_budget: CloudBudget | None = None  # as an account's, over the QoS's jobs
    # its jobs are latency-sensitive (``hal.core.profiles.LATENCY_SENSITIVE``): kept from
    # noisy neighbours first
    latency_sensitive: bool = False

    @property
    def has_limits(self) -> bool:
        """Any limit the scheduler enforces (the submit limit is checked at submit)."""
        return (
            self.max_jobs_per_user is not None
            or self.max_wall_s is not None
            or self.max_tres_per_job.any
            or self.grp_tres.any
            or self.grp_jobs is not None
        )


@dataclass(frozen=True, slots=True)
class PriorityPolicy:
    """``[priority]`` (Slurm's ``PriorityWeight*`` and friends, in snake_case) with the
    account tree and the QoS list it reads.

    ``enabled`` is False when the config has no ``[priority]`` table: jobs then keep the
    basic priority given at submit (Slurm's ``priority/basic``: first in, first out within
    a partition tier, minus nice). ``decay_half_life_s`` = 0 means usage never decays.
    ``usage_gpu_weight``: how many CPU-seconds one GPU-second counts for in fair-share
    usage (Slurm's ``TRESBillingWeights=CPU=1,GRES/gpu=W``).
    """

    enabled: bool = False
    weight_age: int = 0
    weight_fairshare: int = 0
    weight_job_size: int = 0
    weight_partition: int = 0
    weight_qos: int = 0
    max_age_s: float = 7 * 86_400.0  # PriorityMaxAge, default 7-0
    favor_small: bool = False  # PriorityFavorSmall
    decay_half_life_s: float = 7 * 86_400.0  # PriorityDecayHalfLife, default 7-0
    calc_period_s: float = 60.0  # PriorityCalcPeriod (Slurm: 5 min)
    usage_gpu_weight: float = 0.0
    fairshare_algorithm: FairshareAlgorithm = "classic"  # or "fair_tree" (docs/admin/priority.md)
    accounts: tuple[Account, ...] = ()
    users: tuple[UserAccount, ...] = ()
    qos: tuple[Qos, ...] = ()

    @property
    def usage_window_s(self) -> float | None:
        """How far back the finished jobs go that fair-share usage is rebuilt from at
        start-up (``USAGE_HALF_LIVES`` half-lives; None: usage never decays, all of them)."""
        if self.decay_half_life_s <= 0:
            return None
        return USAGE_HALF_LIVES * self.decay_half_life_s

    @property
    def default_accounts(self) -> dict[str, str]:
        """User → the account a job of theirs naming none is charged to
        (``[[users]]`` ``default_account``)."""
        return {u.user: u.account for u in self.users if u.default}

    @property
    def has_limits(self) -> bool:
        """Some account or QoS has a limit the scheduler enforces."""
        return any(a.has_limits for a in self.accounts) or any(q.has_limits for q in self.qos)

    @property
    def has_cohorts(self) -> bool:
        """Some accounts lend each other quota (reclaiming it needs preemption)."""
        return any(a.cohort for a in self.accounts)


def charged_account(
    requested: str | None, user: str, known: Container[str], defaults: Mapping[str, str]
) -> str:
    """The account a job is charged to: the one it asked for when it is configured
    (``known``) or is ``root``, else the user's default account, else ``root``. Fair share
    and every limit resolve it here, so they charge the same account."""
    if requested and (requested in known or requested == ROOT_ACCOUNT):
        return requested
    return defaults.get(user, ROOT_ACCOUNT)


def account_chains(
    accounts: Iterable[Account], keep: Callable[[Account], bool]
) -> dict[str, tuple[str, ...]]:
    """Account name → the account and its ancestors for which ``keep`` holds, leaf
    first (the limits a job charged to it counts against)."""
    known = {a.name: a for a in accounts}
    chains: dict[str, tuple[str, ...]] = {}
    for name in known:
        chain: list[str] = []
        seen: set[str] = set()
        up = name
        while up in known and up not in seen:  # (the config refuses cycles)
            seen.add(up)
            if keep(known[up]):
                chain.append(up)
            up = known[up].parent
        chains[name] = tuple(chain)
    return chains
