"""Submit checks of a job's ``--qos`` and ``--account`` against ``[[qos]]``, ``[[accounts]]``
and ``[[users]]`` of ``hal.toml`` (Slurm refuses both at submit, ``docs/admin/priority.md``).

* QoS: with a ``[[qos]]`` list, a job may name only a configured QoS or ``normal`` (the
  QoS of jobs that name none, which exists in Slurm too whether listed or not); anything
  else is refused with Slurm's "Invalid qos specification". HAL has no per-association
  allowed-QoS lists (Slurm's ``QOS=`` of an association): every user may use every QoS.
  Without a ``[[qos]]`` list any name is accepted (it only labels the job: no QoS has a
  priority or a limit then).
* Account: with an ``[[accounts]]`` list, a job's ``--account`` must be an account the
  user may use, else Slurm's "Invalid account or account/partition combination
  specified". A user listed in ``[[users]]`` may use the accounts of their associations
  (``default_account`` and ``accounts``); any other user may use every configured account
  and ``root`` (HAL gives them an association, with 1 share, where their jobs are
  charged). A job naming no account gets its user's default account at submit
  (``with_defaults``), stored with it; one naming no QoS gets ``normal``.
  Without an ``[[accounts]]`` list any name is accepted (every job is charged to ``root``).
* MaxWall: a job naming no time limit gets its partition's default capped at the
  ``max_wall`` of its QoS and of its account and the ancestors (``max_wall``), as Slurm's
  acct_policy_validate gives such a job the MaxWall: without it the job would get an
  unlimited limit in a partition with no MaxTime and pend for ever over the MaxWall.
"""

from __future__ import annotations

from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.core.priority import (
    DEFAULT_QOS,
    ROOT_ACCOUNT,
    PriorityPolicy,
    account_chains,
    charged_account,
)

INVALID_QOS = "Invalid qos specification"
INVALID_ACCOUNT = "Invalid account or account/partition combination specified"


class Associations:
    """The QoS and accounts of ``policy`` that jobs may name, built once per config."""

    def __init__(self, policy: PriorityPolicy) -> None:
        self._qos = frozenset({q.name for q in policy.qos} | {DEFAULT_QOS}) if policy.qos else None
        self._accounts: frozenset[str] | None = None
        self._by_user: dict[str, tuple[str, ...]] = {}
        if policy.accounts:
            self._accounts = frozenset({a.name for a in policy.accounts} | {ROOT_ACCOUNT})
            by_user: dict[str, list[str]] = {}
            for ua in policy.users:
                by_user.setdefault(ua.user, []).append(ua.account)
            self._by_user = {u: tuple(accts) for u, accts in by_user.items()}
        # MaxWall per QoS, and per account the smallest of its own and its ancestors'
        self._qos_wall = {q.name: q.max_wall_s for q in policy.qos if q.max_wall_s is not None}
        walls = {a.name: a.max_wall_s for a in policy.accounts}
        self._account_wall = {
            name: min(w for a in chain if (w := walls[a]) is not None)
            for name, chain in account_chains(
                policy.accounts, lambda a: a.max_wall_s is not None
            ).items()
            if chain
        }
        self._known_accounts = frozenset(walls)
        self._defaults = policy.default_accounts

    def with_defaults(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the account and QoS it is charged to where it names none, stored
        with the job as Slurm's slurmctld stores them (docs/slurm-checks.md): the user's
        default account (``[[users]]`` ``default_account``; a user without one keeps
        none, and is charged to ``root`` as before) and QoS ``normal``, which HAL always
        has (``sacctmgr show qos`` lists it), as slurmdbd's always exists."""
        account = spec.account or self._defaults.get(spec.user)
        qos = spec.qos or DEFAULT_QOS
        if account == spec.account and qos == spec.qos:
            return spec
        return spec.with_changes(account=account, qos=qos)

    def time_limit(self, spec: JobSpec, default: int) -> int:
        """The time limit of a job naming none: its partition's ``default`` (0:
        unlimited), capped at the MaxWall of the job's QoS and accounts (Slurm's
        acct_policy_validate sets an unset limit to the MaxWall, at most the MaxTime)."""
        account = charged_account(spec.account, spec.user, self._known_accounts, self._defaults)
        walls = (self._qos_wall.get(spec.qos or DEFAULT_QOS), self._account_wall.get(account))
        for wall in walls:
            if wall is not None and (default == 0 or default > wall):
                default = wall
        return default

    def check(self, spec: JobSpec, where: str) -> None:
        """Refuse a job whose QoS or account does not exist or is not the user's."""
        if self._qos is not None and spec.qos and spec.qos not in self._qos:
            raise InvalidRequest(
                f"{INVALID_QOS}: {spec.qos!r} is not a QoS (known: {', '.join(sorted(self._qos))})",
                field=where + "qos",
            )
        if self._accounts is None or not spec.account:
            return
        mine = self._by_user.get(spec.user)
        if mine is None:
            if spec.account in self._accounts:
                return
            allowed = sorted(self._accounts)
        elif spec.account in mine:
            return
        else:
            allowed = sorted(mine)
        raise InvalidRequest(
            f"{INVALID_ACCOUNT}: user {spec.user} may not use account {spec.account!r} "
            f"(their accounts: {', '.join(allowed)})",
            field=where + "account",
        )
