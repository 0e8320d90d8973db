"""Accounts' per-job limits (Slurm's association ``MaxTRES`` and ``MaxWallDurationPerJob``):
every job charged to an account or one of its descendants must keep the account's
``max_wall`` and ``max_tres_per_job``, else it pends with the ``Assoc*PerJob*`` reason.

They depend only on the job (its request and time limit), never on usage, so they need
no counting: the caps of each account are laid out once, and a check walks the job's
limited accounts (its account first, then the ancestors).

A ``--mem=0`` job asks for the whole memory of the nodes it gets, which PreFilter cannot
know: its request counts no memory there, and ``whole_node_memory_over`` checks the
per-job memory caps (its QoS's and accounts') against what Reserve gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hal.core.job import Job
from hal.core.priority import Account, Qos, TresLimits
from hal.core.states import PendingReason as R

# the reason a per-job cap gives, per resource index of a Tres (cpus, gpus, memory, nodes)
_ASSOC_REASONS = (
    R.ASSOC_MAX_CPU_PER_JOB,
    R.ASSOC_MAX_GRES_PER_JOB,
    R.ASSOC_MAX_MEM_PER_JOB,
    R.ASSOC_MAX_NODE_PER_JOB,
)

# (resource index, cap, reason) per capped resource, in check order
Caps = tuple[tuple[int, int, R], ...]
# (max wall seconds or None, caps)
_Rules = tuple[int | None, Caps]


def per_job_caps(limits: TresLimits, reasons: Sequence[R]) -> Caps:
    """``limits``' capped resources with the reason each gives (``reasons`` by resource
    index): the QoS's MaxTRESPerJob and the accounts' MaxTRES are laid out alike."""
    return tuple((i, cap, reasons[i]) for i, cap in enumerate(limits.vector) if cap is not None)


def _rules(account: Account) -> _Rules | None:
    caps = per_job_caps(account.max_tres_per_job, _ASSOC_REASONS)
    if account.max_wall_s is None and not caps:
        return None
    return account.max_wall_s, caps


class AccountPerJob:
    """The per-job limits of the accounts that have any."""

    def __init__(self, accounts: Iterable[Account]) -> None:
        self._rules = {a.name: r for a in accounts if (r := _rules(a)) is not None}

    @classmethod
    def of(cls, accounts: Iterable[Account]) -> AccountPerJob | None:
        """The accounts' per-job limits, or None when no account has one (so a check
        costs nothing then)."""
        limits = cls(accounts)
        return limits if limits._rules else None

    def check(
        self, job: Job, tres: tuple[int, int, int, int], chain: Iterable[str]
    ) -> tuple[R, str] | None:
        """The reason and a message for the first per-job limit of ``chain`` (the job's
        limited accounts, leaf first) that ``job`` asking for ``tres`` breaks, or None."""
        for name in chain:
            rules = self._rules.get(name)
            if rules is None:
                continue
            wall, caps = rules
            if wall is not None and over_max_wall(job, wall):
                return (
                    R.ASSOC_MAX_WALL_PER_JOB,
                    f"time limit above MaxWall {wall}s of account {name}",
                )
            for i, cap, reason in caps:
                if tres[i] > cap:
                    return reason, f"{tres[i]} asked, MaxTRES {cap} of account {name}"
        return None


def over_max_wall(job: Job, wall: int) -> bool:
    """Whether the time limit ``job`` asked for (``-t``) is over MaxWall ``wall``. A limit
    it did not ask for is never over: at submit it was capped at the MaxWall of its QoS
    and accounts (``hal.state.associations``), and Slurm 22.05.8 does not hold it when
    ``scontrol update`` moves the job to a QoS or account with a smaller MaxWall (the
    limit stays, the job runs; docs/slurm-checks.md), as it does a user's ``-t``."""
    if job.spec.time_limit_s is None:
        return False
    return job.time_limit_s == 0 or job.time_limit_s > wall


def whole_node_memory_over(
    job: Job, mem: int, qos: Qos | None, accounts: Iterable[Account]
) -> tuple[R, str] | None:
    """For a ``--mem=0`` job given ``mem`` bytes in all: the reason and a message for
    the first per-job memory cap (its QoS's, then its accounts', leaf first) that
    ``mem`` is over, or None (always None for other jobs: PreFilter checked them)."""
    if job.spec.memory_per_node_bytes != 0:
        return None
    cap = qos.max_tres_per_job.mem_bytes if qos is not None else None
    if cap is not None and mem > cap:
        return R.QOS_MAX_MEM_PER_JOB, f"--mem=0 gets {mem}, MaxTRESPerJob {cap}"
    for account in accounts:
        cap = account.max_tres_per_job.mem_bytes
        if cap is not None and mem > cap:
            return (
                R.ASSOC_MAX_MEM_PER_JOB,
                f"--mem=0 gets {mem}, MaxTRES {cap} of account {account.name}",
            )
    return None
