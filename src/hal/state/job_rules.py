"""``--near`` and ``--apart`` at submit: rules that could never mean what the user wrote
are refused, each with what to write instead (``hal.core.job_rules`` has the syntax):

* a level the cluster does not have (``node`` always, and the ``--topology`` levels:
  ``hal.state.topology_levels``) — ``BadConstraints``, as for ``--topology``;
* ``job:ID`` naming no job, or one that has ended;
* ``name:NAME`` naming no pending or running job of the submitting user (the job's own
  name counts: an array's elements may keep near each other);
* ``job:ID`` naming another user's job, unless the submitter is an administrator
  (``PermissionDenied``): a rule towards a job puts one's own work beside or away from
  it, which is the other user's business.

Whether the targets still run when the job is scheduled is the scheduler's to judge
(``hal.scheduler.plugins.affinity``): they may end, or start, meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.core.errors import BadConstraints, InvalidRequest, PermissionDenied
from hal.core.job import Job, JobSpec
from hal.core.job_rules import NODE, JobRule
from hal.state.topology_levels import known_levels

if TYPE_CHECKING:
    from hal.state.cluster import Caller
    from hal.state.mirror import Mirror


def rules_of(spec: JobSpec) -> list[tuple[str, JobRule]]:
    """(option, rule) for each of the job's rules: ``near`` first, then ``apart``."""
    return [("near", r) for r in spec.near] + [("apart", r) for r in spec.apart]


def check_rule_levels(mirror: Mirror, spec: JobSpec, where: str) -> None:
    """Raise ``BadConstraints`` for a rule whose level the cluster does not have."""
    if not spec.near and not spec.apart:
        return
    known = (NODE, *known_levels(mirror))
    for option, rule in rules_of(spec):
        if rule.level not in known:
            raise BadConstraints(
                f"--{option}={rule}: this cluster has no {rule.level!r} level; its levels "
                f"are {', '.join(known)}; write e.g. --{option}={_with_level(rule, known)}",
                field=f"{where}{option}",
            )


def check_rule_targets(mirror: Mirror, spec: JobSpec, caller: Caller, where: str) -> None:
    """Raise for a rule naming no live job, or another user's job for a non-admin."""
    for option, rule in rules_of(spec):
        field = f"{where}{option}"
        if rule.job_id:
            _check_job_target(mirror, option, rule, caller, field)
        elif spec.name != rule.name and not _has_named(mirror, spec.user, rule.name):
            raise InvalidRequest(
                f"--{option}={rule}: no pending or running job of yours is named "
                f"{rule.name!r} (squeue --me -o '%i %j' lists them); submit it first, "
                "or name a job by its id (job:ID)",
                field=field,
            )


def _check_job_target(
    mirror: Mirror, option: str, rule: JobRule, caller: Caller, field: str
) -> None:
    found = _jobs_named_by_id(mirror, rule.job_id)
    if not found:
        raise InvalidRequest(
            f"--{option}={rule}: there is no job {rule.job_id}; name a pending or running "
            "job (squeue lists them)",
            field=field,
        )
    live = [j for j in found if not j.state.is_terminal]
    if not live:
        raise InvalidRequest(
            f"--{option}={rule}: job {rule.job_id} has ended ({found[0].state.value}); "
            "name a pending or running job",
            field=field,
        )
    others = sorted({j.spec.user for j in live} - {caller.name})
    if others and not caller.admin:
        raise PermissionDenied(
            f"--{option}={rule}: job {rule.job_id} is {others[0]}'s; a rule may name only "
            "your own jobs (an administrator may name any)"
        )


def _jobs_named_by_id(mirror: Mirror, job_id: int) -> list[Job]:
    """The job ``job_id``, the elements of array ``job_id`` or the components of het job
    ``job_id``, as the mirror has them."""
    found: dict[int, Job] = {}
    job = mirror.jobs.get(job_id)
    if job is not None:
        found[job.id] = job
        if job.spec.het is not None and job.spec.het.offset == 0:
            found.update((j.id, j) for j in mirror.het_components(job_id))
    for element in mirror.arrays.get(job_id, ()):
        each = mirror.jobs.get(element)
        if each is not None:
            found[each.id] = each
    return [found[i] for i in sorted(found)]


def _has_named(mirror: Mirror, user: str, name: str) -> bool:
    """A live job of ``user`` named ``name``: a running one from the mirror's count
    (kept between changes: a batch of many jobs naming one service reads it once),
    else a pending one."""
    if mirror.busy_names()[(name, user)]:
        return True
    return any(
        j.spec.name == name and j.spec.user == user and not j.state.is_terminal
        for j in mirror.unfinished.values()
    )


def _with_level(rule: JobRule, known: tuple[str, ...]) -> str:
    """The rule with the nearest known level in its place, for the error's example."""
    close = [k for k in known if k[:1] == rule.level[:1]] or [NODE]
    return str(JobRule(rule.job_id, rule.name, close[0], rule.required))
