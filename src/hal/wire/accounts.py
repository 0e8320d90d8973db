"""REST schema of ``GET /v1/associations`` (``sacctmgr show assoc/user/account/qos``):
the accounts, user associations and QoS of hal.toml, as the server read them at start or
at the last ``scontrol reconfigure``.

Limits are the configured ones (``None``: no limit); nothing here says what running jobs
hold against them (that is ``GET /v1/limits``)."""

from __future__ import annotations

from pydantic import Field

from hal.wire.base import WireModel
from hal.wire.priority import TresInfo


class AccountRecord(WireModel):
    """One ``[[accounts]]`` entry, or ``root`` (the top of the tree, never configured)."""

    name: str
    parent: str  # "" for root
    shares: int  # Fairshare= (raw shares among its siblings)
    max_jobs: int | None = None  # MaxJobs (running jobs per user)
    grp_jobs: int | None = None
    max_submit_jobs: int | None = None  # MaxSubmitJobs (per user)
    grp_submit_jobs: int | None = None
    grp_tres: TresInfo = Field(default_factory=TresInfo)
    max_tres_per_job: TresInfo = Field(default_factory=TresInfo)  # MaxTRES
    max_wall_seconds: int | None = None
    cohort: str | None = None


class UserAssociation(WireModel):
    """A user's association with an account (``[[users]]``: ``default_account`` and
    ``accounts``). ``admin``: a HAL user of that name is an administrator."""

    user: str
    account: str
    shares: int
    default: bool
    admin: bool


class QosRecord(WireModel):
    """One ``[[qos]]`` entry (or ``normal`` when not listed: the QoS of jobs naming none).
    ``grace_time_seconds`` is the QoS's own, else ``[preemption]``'s; ``preempt_mode``
    None: ``[preemption]``'s mode (Slurm's ``cluster``)."""

    name: str
    priority: int
    max_jobs_per_user: int | None = None
    max_submit_jobs_per_user: int | None = None
    max_wall_seconds: int | None = None
    max_tres_per_job: TresInfo = Field(default_factory=TresInfo)
    grp_tres: TresInfo = Field(default_factory=TresInfo)
    grp_jobs: int | None = None
    preempt: list[str] = Field(default_factory=list)
    preempt_mode: str | None = None
    grace_time_seconds: float = 0.0


class AssociationList(WireModel):
    cluster: str
    accounts: list[AccountRecord]  # root first, then config order
    users: list[UserAssociation]  # config order: each user's default account first
    qos: list[QosRecord]
