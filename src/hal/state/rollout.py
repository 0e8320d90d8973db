"""Artifact aliases, their canaries and rollbacks (docs/user/artifacts.md).

An alias (``app@stable``) names one published version of an artifact; its owner or an
administrator moves it (``hal artifact promote app@2 --to stable``) and moves it back
(``hal artifact rollback app``: the version it named before). A job naming ``app@stable``
is pinned at submission to the version the alias names then, and its record keeps the
alias beside the version and digest.

A **canary** (``promote app@3 --to stable --canary 10%``) gives a share of the jobs
naming the alias the new version, the rest the alias's version. The choice is made
when the job is stored, by a hash of its id (so it is the same on every server and
every replay; each element of an array by its own). Promoting the canary's
version without ``--canary`` completes the rollout.

While a canary runs, the jobs that named the alias since it began are counted as they
end, per version. When the canary's jobs fail markedly more often than the others
(``hal.predict.anomaly.CanaryRule``: the anomaly detector's failure states, effect size
and rank-sum test), the canary is rolled back by itself: the alias keeps its version,
and an ``artifact.rolled_back`` event carries the counts, rates and p-value.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, insert, select

from hal.core.artifacts import LATEST, ArtifactRef, check_name
from hal.core.errors import Conflict, InvalidRequest, NotFound
from hal.core.job import Job, JobSpec
from hal.core.pyenv import pin_conda
from hal.predict.anomaly import FAILED_STATES, CanaryRule, CanaryVerdict, NodeFailures
from hal.state import schema
from hal.state.rows import EventRow
from hal.state.store import sql_store

if TYPE_CHECKING:
    from hal.state.artifacts import Registry
    from hal.state.cluster import Caller

log = logging.getLogger("hal.state.rollout")
BUCKETS = 10_000  # a canary's share is chosen in steps of 0.01 %
AUTOMATIC = "hal"  # who rolls a failing canary back


@dataclass(slots=True)
class Alias:
    name: str
    alias: str
    version: str  # what a job naming NAME@ALIAS gets (but the canary's share)
    canary: str = ""  # the version a share of them gets; "" when none
    share: float = 0.0  # that share, in % (0..100)
    since: float = 0.0  # when the version or the canary was set
    history: list[str] = field(default_factory=list)  # the versions it named before, in order
    changed_by: str = ""
    # memory only: ended jobs since the canary began, per version → [jobs, failed], the
    # jobs counted, and the evidence of the last automatic rollback
    counts: dict[str, list[int]] = field(default_factory=dict)
    counted: set[int] = field(default_factory=set)
    rolled_back: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "alias": self.alias,
            "version": self.version,
            "canary": self.canary,
            "share": self.share,
            "since": self.since,
            "history": json.dumps(self.history),
            "changed_by": self.changed_by,
        }


def pins_of(spec: JobSpec) -> tuple[ArtifactRef, ...]:
    """The artifacts a job pins: ``--artifact``'s, ``--container``'s image and
    ``--python-env``'s conda-pack archive."""
    image = spec.container.image if spec.container is not None else None
    conda = spec.python_env.artifact if spec.python_env is not None else None
    return (*spec.artifacts, *(r for r in (image, conda) if r is not None))


def canary_pick(name: str, alias: str, job_id: int, share: float) -> bool:
    """Whether job ``job_id`` naming ``name@alias`` gets the canary (``share`` %): by a
    hash of them, the same everywhere."""
    digest = hashlib.sha256(f"{name}@{alias}:{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS < round(share * BUCKETS / 100)


def parse_share(text: str) -> float:
    """``10%`` or ``10`` → 10.0; refused outside 0–100 %."""
    raw = text.strip().removesuffix("%").strip()
    try:
        share = float(raw)
    except ValueError:
        share = float("nan")
    if not 0 < share < 100:  # (NaN too)
        raise InvalidRequest(
            f"canary share {text!r} is not a share between 0 and 100 %: give one such as "
            "10% (the share of jobs naming the alias that get the new version); promote "
            "without --canary to give it to all",
            field="canary",
        )
    return share


class Aliases:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.cluster = registry.cluster
        self.by_key: dict[tuple[str, str], Alias] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # rollbacks since the server started (``hal_artifact_rollbacks_total``), by how
        self.rollbacks: Counter[str] = Counter()
        self.cluster.on_jobs_changed(self._on_jobs)

    async def load(self) -> None:
        def work() -> list[Alias]:
            t = schema.artifact_aliases
            with sql_store(self.cluster.store).engine.connect() as conn:
                rows = conn.execute(select(*t.c)).all()
            return [
                Alias(
                    r.name,
                    r.alias,
                    r.version,
                    r.canary,
                    r.share,
                    r.since,
                    list(json.loads(r.history)),
                    r.changed_by,
                )
                for r in rows
            ]

        self.by_key = {(a.name, a.alias): a for a in await self.cluster.db(work)}
        self._on_jobs(list(self.cluster.jobs.values()))  # the canaries' counts, again

    # -- reading --------------------------------------------------------------------------

    def of(self, name: str) -> list[Alias]:
        return sorted((a for a in self.by_key.values() if a.name == name), key=lambda a: a.alias)

    def naming(self, name: str, version: str) -> list[str]:
        """The aliases of ``name`` that name ``version`` (as their version or canary)."""
        return [a.alias for a in self.of(name) if version in (a.version, a.canary)]

    def resolve(self, name: str, alias: str) -> ArtifactRef | None:
        """What a job naming ``name@alias`` is pinned to (the alias's version; the canary
        is chosen when the job has its id: ``choose``); None: no such alias."""
        found = self.by_key.get((name, alias))
        if found is None:
            return None
        return self.registry.find(name, found.version).ref(alias)

    def choose(self, jobs: list[Job]) -> list[Job]:
        """New jobs (with their ids, before they are stored): those naming an alias with
        a canary get the canary's version if their id's hash falls in its share."""
        if not any(a.canary for a in self.by_key.values()):
            return jobs
        out = []
        for job in jobs:
            spec = job.spec
            refs = tuple(self._choose_one(job.id, r) for r in spec.artifacts)
            if refs != spec.artifacts:
                spec = spec.with_changes(artifacts=refs)
            image = spec.container.image if spec.container is not None else None
            if spec.container is not None and image is not None:
                chosen = self._choose_one(job.id, image)
                # (a canary that is no image cannot run it: the alias's version does)
                if chosen != image and chosen.kind == image.kind:
                    spec = spec.with_changes(container=replace(spec.container, image=chosen))
            env = spec.python_env
            if env is not None and env.artifact is not None:  # a conda-pack archive
                chosen = self._choose_one(job.id, env.artifact)
                if chosen != env.artifact and chosen.kind == env.artifact.kind:
                    spec = spec.with_changes(python_env=pin_conda(env, chosen))
            out.append(job if spec is job.spec else replace(job, spec=spec))
        return out

    def _choose_one(self, job_id: int, ref: ArtifactRef) -> ArtifactRef:
        found = self.by_key.get((ref.name, ref.alias)) if ref.alias else None
        if found is None or not found.canary or ref.version != found.version:
            return ref
        if not canary_pick(ref.name, ref.alias, job_id, found.share):
            return ref
        canary = self.registry.index.get((ref.name, found.canary))
        return ref if canary is None else canary.ref(ref.alias)

    # -- moving ---------------------------------------------------------------------------

    async def promote(
        self, name: str, version: str, alias: str, caller: Caller, share: float | None = None
    ) -> Alias:
        """Point ``name@alias`` at ``version``, or (``share``) start a canary of it."""
        self._check_alias(name, alias)
        target = self.registry.find(name, version)  # (NotFound says what there is)
        self.registry.check_owner(name, caller)
        now = self.cluster.clock.now()
        old = self.by_key.get((name, alias))
        if share is not None:
            if old is None:
                raise InvalidRequest(
                    f"{name}@{alias} names no version yet, so there is nothing for a canary "
                    f"to be compared with: promote a version to it first (hal artifact "
                    f"promote {name}@VERSION --to {alias})",
                    field="canary",
                )
            if target.version == old.version:
                raise InvalidRequest(
                    f"{name}@{alias} already names {target.version}: a canary is another version",
                    field="canary",
                )
            new = replace(
                old,
                canary=target.version,
                share=share,
                since=now,
                changed_by=caller.name,
                counts={},
                counted=set(),
                rolled_back={},
            )
            kind = "artifact.canary"
        else:
            history = [] if old is None else list(old.history)
            if old is not None and old.version != target.version:
                history.append(old.version)
            new = Alias(
                name,
                alias,
                target.version,
                since=now,
                history=history[-50:],
                changed_by=caller.name,
            )
            kind = "artifact.promoted"
        data: dict[str, Any] = {
            "name": name,
            "alias": alias,
            "version": target.version,
            "sha256": target.sha256,
            "from": old.version if old else None,
            "by": caller.name,
        }
        if share is not None:
            data["share"] = share
        await self._store(new, EventRow(now, kind, data=data))
        return new

    async def rollback(
        self, name: str, alias: str, caller: Caller, verdict: CanaryVerdict | None = None
    ) -> Alias:
        """A canary ends (the alias keeps its version); without one, the alias goes back
        to the version it named before (skipping versions removed since)."""
        self.registry.check_owner(name, caller)
        old = self.by_key.get((name, alias))
        if old is None:
            raise NotFound(
                f"{name} has no alias {alias!r}: see hal artifact aliases {name}", field="alias"
            )
        now = self.cluster.clock.now()
        data: dict[str, Any] = {"name": name, "alias": alias, "by": caller.name}
        if old.canary:
            new = replace(
                old,
                canary="",
                share=0.0,
                since=now,
                changed_by=caller.name,
                counts={},
                counted=set(),
            )
            data |= {"from": old.canary, "to": old.version, "canary": True}
        else:
            history = list(old.history)
            while history and (name, history[-1]) not in self.registry.index:
                history.pop()
            if not history:
                raise Conflict(
                    f"{name}@{alias} named no other version before {old.version} (that is "
                    f"still published): promote one (hal artifact promote {name}@VERSION "
                    f"--to {alias})"
                )
            back = history.pop()
            new = Alias(name, alias, back, since=now, history=history, changed_by=caller.name)
            data |= {"from": old.version, "to": back, "canary": False}
        if verdict is not None:
            evidence = {
                "automatic": True,
                "canary_jobs": verdict.canary_jobs,
                "canary_failed": verdict.canary_failed,
                "previous_jobs": verdict.previous_jobs,
                "previous_failed": verdict.previous_failed,
                "canary_rate": round(verdict.canary_rate, 4),
                "previous_rate": round(verdict.previous_rate, 4),
                "threshold": round(verdict.threshold, 4),
                "p_value": verdict.p_value,
            }
            data |= evidence
            new.rolled_back = {"time": now, "from": old.canary, **evidence}
        await self._store(new, EventRow(now, "artifact.rolled_back", data=data))
        self.rollbacks["automatic" if verdict is not None else "by_hand"] += 1
        return new

    def _check_alias(self, name: str, alias: str) -> None:
        check_name(alias, "alias")
        if alias.lower() == LATEST:
            raise InvalidRequest(
                f"{alias!r} means the newest version; choose another alias name (stable, "
                "canary ...)",
                field="alias",
            )
        if (name, alias) in self.registry.index:
            raise InvalidRequest(
                f"{name}@{alias} is a published version; an alias needs a name no version "
                "has (stable, canary ...)",
                field="alias",
            )

    async def _store(self, alias: Alias, event: EventRow) -> None:
        t = schema.artifact_aliases

        def work() -> None:
            with sql_store(self.cluster.store).engine.begin() as conn:
                conn.execute(delete(t).where(t.c.name == alias.name, t.c.alias == alias.alias))
                conn.execute(insert(t).values(**alias.row()))

        await self.cluster.db(work)
        self.by_key[(alias.name, alias.alias)] = alias
        await self.cluster.record_events([event])

    # -- the canaries' outcomes (the cluster's job listener, event loop) ------------------

    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        if not any(a.canary for a in self.by_key.values()):
            return
        for job in jobs:
            if not job.state.is_terminal:
                continue
            for ref in pins_of(job.spec):
                found = self.by_key.get((ref.name, ref.alias)) if ref.alias else None
                if found is None or not found.canary or job.submit_time < found.since:
                    continue
                if ref.version not in (found.canary, found.version) or job.id in found.counted:
                    continue
                found.counted.add(job.id)
                count = found.counts.setdefault(ref.version, [0, 0])
                count[0] += 1
                count[1] += job.state in FAILED_STATES
                self._judge(found)

    def _judge(self, alias: Alias) -> None:
        canary = NodeFailures(*alias.counts.get(alias.canary, [0, 0]))
        previous = NodeFailures(*alias.counts.get(alias.version, [0, 0]))
        config = self.cluster.config.artifacts  # (scontrol reconfigure changes it)
        rule = CanaryRule(min_jobs=config.canary_min_jobs, alpha=config.canary_alpha)
        verdict = rule.judge(canary, previous)
        if verdict is None:
            return
        key = (alias.name, alias.alias)
        if any(t.get_name() == f"hal-rollback-{key}" for t in self._tasks):
            return
        log.warning(
            "%s@%s: canary %s fails %d of %d jobs against %d of %d (p=%.2g): rolling it back",
            alias.name,
            alias.alias,
            alias.canary,
            verdict.canary_failed,
            verdict.canary_jobs,
            verdict.previous_failed,
            verdict.previous_jobs,
            verdict.p_value,
        )
        task = asyncio.get_running_loop().create_task(
            self._roll_back(alias.name, alias.alias, alias.canary, verdict),
            name=f"hal-rollback-{key}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _roll_back(self, name: str, alias: str, canary: str, verdict: CanaryVerdict) -> None:
        from hal.state.cluster import Caller

        found = self.by_key.get((name, alias))
        if found is None or found.canary != canary:
            return  # moved meanwhile
        try:
            await self.rollback(name, alias, Caller(AUTOMATIC, admin=True), verdict)
        except Exception:
            log.exception("rolling back the canary of %s@%s failed", name, alias)
