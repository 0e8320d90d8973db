"""Declared placement rules between jobs: ``--near`` (affinity) and ``--apart``
(anti-affinity), as Kubernetes' inter-pod affinity states them, on HAL's topology levels.

A rule is written ``[required=|preferred=]TARGET[@LEVEL]``:

* ``TARGET`` is ``job:ID`` (that job; an array's id stands for all its elements, a het
  job's for all its components) or ``name:NAME`` (every job of the same user named
  ``NAME``, as ``--job-name`` set it);
* ``LEVEL`` is ``node`` (the default), ``nvlink``, or a topology level of the cluster
  (``leaf``/``switch``, a configured level name, ``rack``, ``zone``, ``region``,
  ``site``...): two nodes are *within* ``LEVEL`` when they share that domain;
* ``required`` (the default) is a filter: a near-rule keeps the job on nodes within
  ``LEVEL`` of a node of its target, and waits while no target runs; an apart-rule keeps
  it off every node within ``LEVEL`` of one. ``preferred`` only scores nodes so.

Several rules are joined by commas (or given in several options). Which levels exist and
which jobs exist is the control plane's to check at submit (``hal.state.job_rules``); this
module checks the syntax only.

Pure: imports only ``hal.core``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hal.core.errors import InvalidRequest

if TYPE_CHECKING:
    from hal.core.job import Job

NODE = "node"  # the level of the node itself
MAX_RULES = 32  # per option: a job near or apart from more is not a rule, it is a list
_INT64_MAX = 2**63 - 1
_HINT = (
    "write [required=|preferred=]job:ID[@LEVEL] or [required=|preferred=]name:NAME[@LEVEL], "
    "e.g. {opt}=job:123@node or {opt}=preferred=name:db@leaf"
)


@dataclass(frozen=True, slots=True)
class JobRule:
    """One rule's target (``job:ID``: ``job_id``; ``name:NAME``: ``name``), the level
    it holds at, and whether it is required (a filter) or preferred (a score)."""

    job_id: int = 0
    name: str = ""
    level: str = NODE
    required: bool = True

    @property
    def target(self) -> str:
        return f"job:{self.job_id}" if self.job_id else f"name:{self.name}"

    def __str__(self) -> str:
        """As the user may write it again: ``job:12@node``, ``preferred=name:db@leaf``."""
        mode = "" if self.required else "preferred="
        return f"{mode}{self.target}@{self.level}"

    def names(self, job: Job, owner: str) -> bool:
        """Whether ``job`` is one of this rule's targets, the rule being ``owner``'s (a
        ``name:`` rule names that user's jobs only)."""
        if self.job_id:
            het = job.spec.het
            return self.job_id in (job.id, job.array_job_id) or (
                het is not None and het.job_id == self.job_id
            )
        return job.spec.name == self.name and job.spec.user == owner

    def names_itself(self, job: Job) -> bool:
        """Whether the rule names the job's own group: its name (``name:``), its array or
        its het job (``job:``). Such a rule holds for the first of the group to start
        (nothing of it runs yet), as Kubernetes lets the first pod of a self-affine set
        go anywhere."""
        return self.names(job, job.spec.user)


def parse_rules(texts: Iterable[str], option: str) -> tuple[JobRule, ...]:
    """Every rule of ``texts`` (each may hold several, comma-separated) for ``--option``
    (``near``, ``apart``: named in errors and their ``field``)."""
    rules: list[JobRule] = []
    for text in texts:
        for part in text.split(","):
            if part.strip():
                rules.append(parse_rule(part, option))
    if len(rules) > MAX_RULES:
        raise InvalidRequest(
            f"--{option}: {len(rules)} rules; a job takes at most {MAX_RULES}", field=option
        )
    return tuple(dict.fromkeys(rules))  # (the same rule twice counts once)


def parse_rule(text: str, option: str) -> JobRule:
    """One rule (see the module docstring)."""
    spelled = text.strip()

    def bad(why: str) -> InvalidRequest:
        hint = _HINT.format(opt=f"--{option}")
        return InvalidRequest(f"invalid --{option} {spelled!r}: {why}; {hint}", field=option)

    rest = spelled
    required = True
    mode, eq, after = rest.partition("=")
    if eq and mode.strip().lower() in ("required", "preferred"):
        required = mode.strip().lower() == "required"
        rest = after.strip()
    target, at, level = rest.partition("@")
    target, level = target.strip(), level.strip()
    if at and not level:
        raise bad("nothing after @")
    if any(c.isspace() for c in level) or "@" in level:
        raise bad(f"{level!r} is not a level name")
    kind, colon, value = target.partition(":")
    kind, value = kind.strip().lower(), value.strip()
    if not colon or kind not in ("job", "name"):
        raise bad("the target is job:ID or name:NAME")
    if not value:
        raise bad(f"nothing after {kind}:")
    level = level or NODE
    if kind == "name":
        if any(c.isspace() for c in value):
            raise bad(f"job name {value!r} has blanks")
        return JobRule(name=value, level=level, required=required)
    if not value.isdigit() or not 0 < int(value) <= _INT64_MAX:
        raise bad(f"job id {value!r} is not a job id (a positive number)")
    return JobRule(job_id=int(value), level=level, required=required)


def check_consistent(near: tuple[JobRule, ...], apart: tuple[JobRule, ...]) -> None:
    """Refuse a job that must be both near and apart from the same target at the same
    level: no node can satisfy both."""
    held = {(r.target, r.level) for r in near if r.required}
    for rule in apart:
        if rule.required and (rule.target, rule.level) in held:
            raise InvalidRequest(
                f"--near={rule.target}@{rule.level} and --apart={rule.target}@{rule.level} "
                "both required: no node is both; drop one, or make one preferred=",
                field="apart",
            )
