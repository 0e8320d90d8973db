"""Accounts, QoS and the multifactor priority weights (Slurm's ``priority/multifactor``).

Plain values read from ``hal.toml`` (``[priority]``, ``[[accounts]]``, ``[[users]]``,
``[[qos]]``) and used by the priority calculation in
``hal.scheduler.plugins.multifactor``. Times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT_ACCOUNT = "root"


@dataclass(frozen=True, slots=True)
class Account:
    """One node of the account tree (organisation → project → ...). ``parent`` is
    ``root`` for a top-level account. ``shares`` is Slurm's ``Fairshare=`` (raw shares,
    compared with the siblings')."""

    name: str
    parent: str = ROOT_ACCOUNT
    shares: int = 1


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
    """A quality of service; only its priority is used so far (the QOS factor)."""

    name: str
    priority: int = 0


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
    accounts: tuple[Account, ...] = ()
    users: tuple[UserAccount, ...] = ()
    qos: tuple[Qos, ...] = ()
