"""Rows ↔ core objects. JSON for the nested parts of a job (spec, allocation)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from hal.core.artifacts import ArtifactRef
from hal.core.container import Container
from hal.core.job import (
    Allocation,
    ArraySpec,
    CronSpec,
    Dependency,
    DependencyKind,
    DependencyTerm,
    HetSpec,
    Job,
    JobSpec,
    SignalSpec,
    TopologyConstraint,
)
from hal.core.job_rules import JobRule
from hal.core.malleable import MalleableRange
from hal.core.pyenv import PythonEnv
from hal.core.resources import ResourceVector
from hal.core.states import JobState, PendingReason

_TUPLE_FIELDS = ("partitions", "constraint", "exclude", "nodelist", "data", "script_args")
_RULE_FIELDS = ("near", "apart")  # --near/--apart: [job_id, name, level, required] each


def spec_to_json(spec: JobSpec) -> str:
    """Serialise everything but the script (stored once per submission)."""
    d: dict[str, Any] = {}
    for name in JobSpec.__slots__:
        if name == "script":
            continue
        value = getattr(spec, name)
        if name == "environment":
            value = [list(kv) for kv in value]
        elif name == "array" and value is not None:
            value = {
                "indices": list(value.indices),
                "max_running": value.max_running,
                "text": value.text,
            }
        elif name == "dependency" and value is not None:
            value = {
                "any_of": value.any_of,
                "terms": [
                    [t.kind.value, list(t.job_ids), *([list(t.elements)] if t.elements else [])]
                    for t in value.terms
                ],
            }
        elif name == "signal" and value is not None:
            value = [value.signum, value.seconds_before, value.batch_only]
        elif name == "topology" and value is not None:
            value = [value.level, value.required]
        elif name == "het" and value is not None:
            value = [value.job_id, value.offset, value.size]
        elif name == "cron" and value is not None:
            value = [value.schedule, value.first_line, value.line]
        elif name in _TUPLE_FIELDS:
            value = list(value)
        elif name in ("licenses", "feedback_goals"):
            value = [list(pair) for pair in value]
        elif name == "artifacts":
            # (the alias only where the job named one: older records have 4 fields)
            value = [[a.name, a.version, a.sha256, a.kind, *_alias(a)] for a in value]
        elif name == "python_env" and value is not None:
            value = _python_env(value)
        elif name == "container" and value is not None:
            i = value.image
            value = [value.bundle, [i.name, i.version, i.sha256, i.kind] if i else None]
        elif name in _RULE_FIELDS:
            value = [[r.job_id, r.name, r.level, r.required] for r in value]
        elif name == "malleable" and value is not None:
            value = [value.unit, value.low, value.high]
        d[name] = value
    return json.dumps(d, separators=(",", ":"))


def _python_env(env: PythonEnv) -> list[Any]:
    """kind, sha256, files, and a conda-pack archive's pin (older records have 3 fields)."""
    out: list[Any] = [env.kind, env.sha256, [list(f) for f in env.files]]
    if (a := env.artifact) is not None:
        out.append([a.name, a.version, a.sha256, a.kind, *_alias(a)])
    return out


def _alias(ref: ArtifactRef) -> list[str]:
    return [ref.alias] if ref.alias else []


def spec_from_json(text: str, script: str) -> JobSpec:
    d: dict[str, Any] = json.loads(text)
    d["script"] = script
    d["environment"] = tuple((k, v) for k, v in d.get("environment", ()))
    d["licenses"] = tuple((str(n), int(c)) for n, c in d.get("licenses", ()))
    d["feedback_goals"] = tuple((str(n), str(g)) for n, g in d.get("feedback_goals", ()))
    d["artifacts"] = tuple(ArtifactRef(*a) for a in d.get("artifacts", ()))
    if d.get("python_env") is not None:
        kind, sha256, files, *artifact = d["python_env"]
        d["python_env"] = PythonEnv(
            kind,
            sha256,
            tuple((str(n), str(c)) for n, c in files),
            ArtifactRef(*artifact[0]) if artifact else None,
        )
    if d.get("container") is not None:
        bundle, image = d["container"]
        d["container"] = Container(ArtifactRef(*image) if image else None, str(bundle))
    for name in _TUPLE_FIELDS:
        d[name] = tuple(d.get(name, ()))
    for name in _RULE_FIELDS:
        rules = d.get(name, ())
        d[name] = tuple(JobRule(int(i), str(n), str(lv), bool(r)) for i, n, lv, r in rules)
    if d.get("array") is not None:
        a = d["array"]
        d["array"] = ArraySpec(tuple(a["indices"]), a["max_running"], a["text"])
    if d.get("dependency") is not None:
        dep = d["dependency"]
        d["dependency"] = Dependency(
            terms=tuple(
                DependencyTerm(DependencyKind(t[0]), tuple(t[1]), tuple(t[2] if len(t) > 2 else ()))
                for t in dep["terms"]
            ),
            any_of=dep["any_of"],
        )
    if d.get("signal") is not None:
        s = d["signal"]
        d["signal"] = SignalSpec(s[0], s[1], s[2])
    if d.get("topology") is not None:
        level, required = d["topology"]
        d["topology"] = TopologyConstraint(level, required)
    if d.get("het") is not None:
        d["het"] = HetSpec(*d["het"])
    if d.get("cron") is not None:
        d["cron"] = CronSpec(*d["cron"])
    if d.get("malleable") is not None:
        unit, low, high = d["malleable"]
        d["malleable"] = MalleableRange(str(unit), int(low), int(high))
    known = set(JobSpec.__slots__)
    return JobSpec(**{k: v for k, v in d.items() if k in known})


def allocation_to_json(a: Allocation | None) -> str | None:
    if a is None:
        return None
    return json.dumps(
        {
            "nodes": list(a.nodes),
            "per_node": [[r.cpus, r.memory_bytes, r.gpus] for r in a.per_node],
            "gpu_ids": [list(g) for g in a.gpu_ids],
        },
        separators=(",", ":"),
    )


def allocation_from_json(text: str | None) -> Allocation | None:
    if not text:
        return None
    d = json.loads(text)
    return Allocation(
        nodes=tuple(d["nodes"]),
        per_node=tuple(ResourceVector(c, m, g) for c, m, g in d["per_node"]),
        gpu_ids=tuple(tuple(g) for g in d.get("gpu_ids", ())),
    )


# job.extra's CPU seconds' user and system parts, where its agent said them (columns
# ``user_cpu_seconds``, ``system_cpu_seconds``; absent: not known)
USER_CPU = "user_cpu_seconds"
SYSTEM_CPU = "system_cpu_seconds"
# job.extra keys that columns of their own hold (not written to ``jobs.marks``)
MARK_FREE = frozenset({"script_id", "max_rss", "cpu_seconds", USER_CPU, SYSTEM_CPU})


def marks_to_json(extra: dict[str, str]) -> str:
    """``jobs.marks``: ``extra`` less ``MARK_FREE`` (sorted: the same marks, the same text)."""
    return json.dumps({k: v for k, v in sorted(extra.items()) if k not in MARK_FREE})


def job_to_row(job: Job, script_id: int, *, spec: bool = True) -> dict[str, Any]:
    """``job``'s ``jobs`` row; ``spec`` False: without the columns only its spec gives
    (``rows.SPEC_COLUMNS``), for an update that keeps the stored ones."""
    row = {
        "id": job.id,
        "array_job_id": job.array_job_id,
        "array_task_id": job.array_task_id,
        "user_name": job.spec.user,
        "name": job.spec.name,
        "partition": job.partition,
        "state": job.state.value,
        "reason": job.reason.value,
        "priority": job.priority,
        "submit_time": job.submit_time,
        "eligible_time": job.eligible_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "time_limit": job.time_limit_s,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "restarts": job.restarts,
        "held_by_admin": job.held_by_admin,
        "priority_fixed": job.priority_fixed,
        "cancelled_by": job.cancelled_by,
        "allocation": allocation_to_json(job.allocation),
        "script_id": script_id,
        "array_max_running": job.array_max_running,
        "launched": job.launched,
        "marks": marks_to_json(job.extra),
    }
    if spec:
        row["spec"] = spec_to_json(job.spec)
    else:
        del row["name"]
    return row


def job_from_row(row: Any, script: str, specs: dict[tuple[str, str], JobSpec] | None = None) -> Job:
    """The job of a ``jobs`` row. ``specs``: the specs decoded so far by (JSON, script),
    so that rows with the same spec (an array's elements) share one ``JobSpec`` object,
    as the submitted jobs did: the scheduler decides such elements once per spec."""
    key = (row.spec, script)
    spec = specs.get(key) if specs is not None else None
    if spec is None:
        spec = spec_from_json(row.spec, script)
        if specs is not None:
            specs[key] = spec
    return Job(
        id=int(row.id),
        spec=spec,
        state=JobState(row.state),
        reason=PendingReason(row.reason),
        partition=row.partition,
        priority=int(row.priority),
        submit_time=float(row.submit_time),
        eligible_time=row.eligible_time,
        start_time=row.start_time,
        end_time=row.end_time,
        time_limit_s=int(row.time_limit),
        allocation=allocation_from_json(row.allocation),
        exit_code=int(row.exit_code),
        exit_signal=int(row.exit_signal),
        array_job_id=row.array_job_id,
        array_task_id=row.array_task_id,
        array_max_running=int(row.array_max_running),
        restarts=int(row.restarts),
        held_by_admin=bool(row.held_by_admin),
        priority_fixed=bool(row.priority_fixed),
        cancelled_by=row.cancelled_by,
        launched=bool(row.launched),
        extra={
            **json.loads(row.marks or "{}"),
            "script_id": str(row.script_id),
            "max_rss": str(row.max_rss),
            "cpu_seconds": str(row.cpu_seconds),
            **_cpu_parts(row),
        },
    )


class JobRowMemo:
    """Jobs decoded from their ``jobs`` rows, kept between reads by a standby server
    (``hal.server.standby``): a row read again unchanged gives the job decoded before,
    so the read at a takeover decodes only the rows changed since the last preload
    (decoding is most of a start's cost: about 0.5 s per 10,000 jobs on an idle core).
    On PostgreSQL each job is kept with its row's version (``xmin``, the transaction
    that wrote it): a read asks for the versions first and fetches only the rows whose
    version it has not seen (``SqlStateStore.load_jobs``), so a takeover neither
    decodes nor transfers the rows that did not change.
    Used for one load after the takeover, then dropped: the leader's mirror may change
    a job's ``extra`` in place."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[tuple[Any, ...], Job]] = {}
        self._versions: dict[int, tuple[str, Job]] = {}  # id: (xmin, job), PostgreSQL
        # ... and their specs, shared across reads (an array's elements share one)
        self._specs: dict[tuple[str, str], JobSpec] = {}
        self.hits = 0

    def job(self, row: Any, specs: dict[tuple[str, str], JobSpec]) -> Job:
        values = tuple(row)
        found = self._rows.get(int(row.id))
        if found is not None and found[0] == values:
            self.hits += 1
            job = found[1]
            specs.setdefault((row.spec, row.script), job.spec)  # (an array's next rows)
            return job
        job = job_from_row(row, row.script, specs)
        self._rows[job.id] = (values, job)
        return job

    def keep(self, ids: set[int]) -> None:
        """Forget the jobs a whole read did not return (purged, or ended long ago)."""
        for gone in self._rows.keys() - ids:
            del self._rows[gone]
        for gone in self._versions.keys() - ids:
            del self._versions[gone]
        used = {id(job.spec) for _, job in self._versions.values()}
        self._specs = {k: spec for k, spec in self._specs.items() if id(spec) in used}

    def stale(self, versions: Iterable[tuple[int, str]]) -> list[int]:
        """Of ``(id, xmin)`` pairs, the ids whose row this memo has not at that version."""
        stale, hits = stale_versions(self._versions, versions)
        self.hits += hits
        return stale

    def versioned(self, row: Any) -> Job:
        """The job of a row read with its ``xmin``, decoded and kept at that version."""
        job = job_from_row(row, row.script, self._specs)
        self._versions[job.id] = (str(row.xmin), job)
        return job

    def at_version(self, job_id: int) -> Job:
        return self._versions[job_id][1]


def _cpu_parts(row: Any) -> dict[str, str]:
    """``USER_CPU`` and ``SYSTEM_CPU`` of a ``jobs`` row that has them (not NULL)."""
    user, system = row.user_cpu_seconds, row.system_cpu_seconds
    if user is None or system is None:
        return {}
    return {USER_CPU: str(user), SYSTEM_CPU: str(system)}


V = TypeVar("V")


def stale_versions(
    known: Mapping[int, tuple[V, object]], versions: Iterable[tuple[int, V]]
) -> tuple[list[int], int]:
    """Of ``(id, version)`` pairs, the ids ``known`` (id -> (version, value)) has not at
    that version, and how many it has."""
    stale: list[int] = []
    hits = 0
    for key, version in versions:
        found = known.get(key)
        if found is None or found[0] != version:
            stale.append(key)
        else:
            hits += 1
    return stale, hits
