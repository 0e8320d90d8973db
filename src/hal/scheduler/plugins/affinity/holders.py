"""``Holders``: which node rows each job holding nodes holds, found by what a rule names.

A pass's holders are the snapshot's running jobs (``ctx.running``: in will-run, those
still running at the instant asked) and the jobs placed earlier in the pass (Reserve adds
them, Unreserve takes them out), so that two jobs placed in one pass see each other.

``PassView`` is what the plugin keeps per pass: the required ``--apart`` rules of the
jobs holding nodes, by what they name (every job must keep away from their owners when
a rule names it, so it is looked up cheaply for every job), and the full ``Holders``
index, built only when a job with rules (or one such a rule names) asks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hal.core.job import Allocation, Job
from hal.core.job_rules import JobRule
from hal.core.preemption import holding
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.plugins.topology.tree import IntArray

_NONE: IntArray = np.empty(0, dtype=np.intp)


def target_keys(job: Job) -> list[tuple[object, ...]]:
    """The keys a rule may find ``job`` by: its id, its array's, its het job's, and
    (user, name)."""
    keys: list[tuple[object, ...]] = [("id", job.id), ("name", job.spec.user, job.spec.name)]
    if job.array_job_id is not None and job.array_job_id != job.id:
        keys.append(("id", job.array_job_id))
    het = job.spec.het
    if het is not None and het.job_id != job.id:
        keys.append(("id", het.job_id))
    return keys


def rule_key(rule: JobRule, owner: str) -> tuple[object, ...]:
    """The key ``target_keys`` files a rule's targets under (``owner``: the rule's user)."""
    return ("id", rule.job_id) if rule.job_id else ("name", owner, rule.name)


@dataclass(slots=True)
class Holders:
    """Job id → its rows, and key → the ids of the jobs filed under it."""

    rows: dict[int, IntArray] = field(default_factory=dict)
    by_key: dict[tuple[object, ...], set[int]] = field(default_factory=dict)

    def add(self, job: Job, rows: IntArray) -> None:
        self.rows[job.id] = rows
        for key in target_keys(job):
            self.by_key.setdefault(key, set()).add(job.id)

    def remove(self, job: Job) -> None:
        self.rows.pop(job.id, None)
        for key in target_keys(job):
            ids = self.by_key.get(key)
            if ids is not None:
                ids.discard(job.id)
                if not ids:
                    del self.by_key[key]

    def targets(self, rule: JobRule, owner: str, besides: int) -> IntArray:
        """The rows of every job holding nodes that ``rule`` (``owner``'s) names, other
        than job ``besides`` (the job the rule is judged for)."""
        ids = [i for i in self.by_key.get(rule_key(rule, owner), ()) if i != besides]
        if not ids:
            return _NONE
        if len(ids) == 1:
            return self.rows[ids[0]]
        return np.unique(np.concatenate([self.rows[i] for i in ids]))


def rows_of(table: NodeTable, allocation: Allocation) -> IntArray:
    index = table.index
    return np.array([index[n] for n in allocation.nodes if n in index], dtype=np.intp)


@dataclass(slots=True)
class PassView:
    """Per pass (see the module docstring). ``apart``: the required ``--apart`` rules of
    the jobs holding nodes, filed by what they name (``rule_key``), so that each pending
    job finds those naming it by its own keys. ``placed``: Reserve's placements not yet
    in ``holders`` (folded in when it is first built; most passes never build it)."""

    apart: dict[tuple[object, ...], dict[tuple[int, JobRule], Job]] = field(default_factory=dict)
    placed: dict[int, tuple[Job, Allocation]] = field(default_factory=dict)
    holders: Holders | None = None

    @classmethod
    def of(cls, running: Iterable[Job]) -> PassView:
        view = cls()
        for job in running:
            if job.spec.apart:  # (this runs over every running job of every pass)
                view._own(job)
        return view

    def _own(self, job: Job) -> None:
        for rule in job.spec.apart:
            if rule.required:
                named = self.apart.setdefault(rule_key(rule, job.spec.user), {})
                named[(job.id, rule)] = job

    def _disown(self, job: Job) -> None:
        for rule in job.spec.apart:
            key = rule_key(rule, job.spec.user)
            named = self.apart.get(key)
            if named is not None:
                named.pop((job.id, rule), None)
                if not named:
                    del self.apart[key]

    def index(self, table: NodeTable, running: Iterable[Job]) -> Holders:
        if self.holders is None:
            self.holders = Holders()
            for job in running:
                alloc, _ = holding(job)
                if alloc is not None:
                    self.holders.add(job, rows_of(table, alloc))
        for job, alloc in self.placed.values():
            self.holders.add(job, rows_of(table, alloc))
        self.placed.clear()
        return self.holders

    def add(self, job: Job, allocation: Allocation) -> None:
        if job.spec.apart:
            self._own(job)
        self.placed[job.id] = (job, allocation)  # (into ``holders`` at the next ``index``)

    def remove(self, job: Job) -> None:
        if job.spec.apart:
            self._disown(job)
        if self.placed.pop(job.id, None) is None and self.holders is not None:
            self.holders.remove(job)

    def owners_naming(self, job: Job) -> list[tuple[Job, JobRule]]:
        """The (owner, rule) of each required ``--apart`` rule of a job holding nodes
        that names ``job``."""
        if not self.apart:  # (most passes: asked for every pending job)
            return []
        found: list[tuple[Job, JobRule]] = []
        for key in target_keys(job):
            named = self.apart.get(key)
            if named:
                found.extend((owner, rule) for (i, rule), owner in named.items() if i != job.id)
        return found
