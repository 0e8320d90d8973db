"""The accounts' submit limits (Slurm's association ``MaxSubmitJobs`` and
``GrpSubmitJobs``), checked when jobs are submitted: a user's pending and running jobs
charged to an account or any of its descendants may not exceed the account's
``max_submit_jobs``, nor all its users' together its ``grp_submit_jobs``. A job counts
against its account and every ancestor's, as the running-job limits do."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from hal.core.job import Job, JobSpec
from hal.core.priority import ROOT_ACCOUNT, PriorityPolicy, account_chains, charged_account


class AccountSubmitLimits:
    """The accounts of ``policy`` with a submit limit, and each account's chain of them."""

    def __init__(self, policy: PriorityPolicy) -> None:
        self._accounts = {a.name: a for a in policy.accounts}
        self._defaults = policy.default_accounts
        self._chains = account_chains(policy.accounts, lambda a: a.has_submit_limits)

    @property
    def active(self) -> bool:
        return any(self._chains.values())

    def _chain(self, spec: JobSpec) -> tuple[str, ...]:
        account = charged_account(spec.account, spec.user, self._accounts, self._defaults)
        return self._chains.get(account, ()) if account != ROOT_ACCOUNT else ()

    def first_over(self, unfinished: Iterable[Job], specs: Sequence[JobSpec]) -> int | None:
        """The index of the first of ``specs`` (each array element counting one job)
        that would take an account over a submit limit, counting ``unfinished`` jobs
        (pending and running) and the specs before it; None when all fit."""
        per_user: Counter[tuple[str, str]] = Counter()
        per_account: Counter[str] = Counter()
        for job in unfinished:
            for name in self._chain(job.spec):
                per_user[(name, job.spec.user)] += 1
                per_account[name] += 1
        for i, spec in enumerate(specs):
            n = len(spec.array.indices) if spec.array else 1
            for name in self._chain(spec):
                acct = self._accounts[name]
                key = (name, spec.user)
                per_user[key] += n
                per_account[name] += n
                if acct.max_submit_jobs is not None and per_user[key] > acct.max_submit_jobs:
                    return i
                if acct.grp_submit_jobs is not None and per_account[name] > acct.grp_submit_jobs:
                    return i
        return None
