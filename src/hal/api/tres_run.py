"""sshare's ``TRESRunMins``: what the running jobs of an association still hold, in
TRES-minutes (each job's TRES times the minutes left of its time limit), summed up the
account tree as Slurm's association manager does.

A job without a time limit has no minutes left to count and is left out (Slurm would
count its INFINITE limit); a suspended job's clock is stopped, as for its limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hal.core.job import Job
from hal.core.states import JobState
from hal.core.suspension import suspended_seconds
from hal.scheduler.plugins.multifactor import ShareRow
from hal.scheduler.plugins.multifactor.usage import billing_rate

Assoc = tuple[str, str]  # (account, user)
TRES = ("cpu", "mem", "node", "billing", "gres/gpu")  # sshare's order; mem in MiB
MIB = 1024 * 1024


def tres_run_minutes(
    jobs: Iterable[Job],
    assoc_of: Mapping[int, Assoc],
    rows: Iterable[ShareRow],
    now: float,
    gpu_weight: float,
) -> dict[Assoc, dict[str, int]]:
    """For each row (account rows: ``(account, "")``), its TRES-minutes by TRES name.
    ``assoc_of``: the association each job is charged to, by job id."""
    per_user: dict[Assoc, dict[str, float]] = {}
    for job in jobs:
        alloc = job.allocation
        if (
            job.state not in (JobState.RUNNING, JobState.SUSPENDED)
            or alloc is None
            or job.start_time is None
            or job.time_limit_s <= 0
            or job.id not in assoc_of
        ):
            continue
        ran = now - job.start_time - suspended_seconds(job, now)
        left = max(0.0, job.time_limit_s - ran) / 60
        total = alloc.total()
        held = {
            "cpu": total.cpus,
            "mem": total.memory_bytes / MIB,
            "node": len(alloc.nodes),
            "billing": billing_rate(job, gpu_weight),
            "gres/gpu": total.gpus,
        }
        sums = per_user.setdefault(assoc_of[job.id], dict.fromkeys(TRES, 0.0))
        for name, amount in held.items():
            sums[name] += amount * left
    rows = list(rows)
    parents = {r.account: r.parent for r in rows if not r.user}
    out: dict[Assoc, dict[str, float]] = {
        (r.account, r.user): dict.fromkeys(TRES, 0.0) for r in rows
    }
    for (account, user), sums in per_user.items():
        targets: list[Assoc] = [(account, user)]
        seen: set[str] = set()
        while account and account not in seen:  # the account and every one above it
            seen.add(account)
            targets.append((account, ""))
            account = parents.get(account, "")
        for key in targets:
            if key in out:
                for name, value in sums.items():
                    out[key][name] += value
    return {key: {name: int(value) for name, value in sums.items()} for key, sums in out.items()}
