"""The body of ``GET /v1/jobs`` (``squeue``, the dashboard) from each job's JSON kept
between requests.

Building a ``JobInfo`` and serialising it costs a few hundred microseconds a job: at
20,000 queued jobs that is seconds of the control plane's one event loop per ``squeue``,
taken from the agents' syncs and the scheduler. A job is immutable (a change is a new
``Job``), so the JSON of the fields only the job decides (``convert.job_fields``) is kept
while the mirror holds the same object; the few that depend on the clock, the agent's
latest usage sample or other jobs (``convert.LIVE_FIELDS``) are worked out on every
request (unless ``convert.live_settled`` says they cannot have changed: a plain pending
job's; of ``squeue``'s one live field, a running job's not suspended) and serialised
again only when they changed. The body is the same JSON as ``JobList``'s (its fields in
another order). Between requests ``warm`` builds what squeue's default set and the sets
asked for lately lack of the queue (``hal.api.list_warmer``, ADR 0030).

``fields=`` (``field_set``) asks for some of ``JobInfo``'s fields: ``squeue`` asks for
the dozen its format shows, a sixth of the bytes to send and to parse. Each field set
asked for keeps its own JSON of each job, worked out from the job alone (its own fields
validated by a model of just those, its live fields only those asked for), so the full
form's is never read back; the ``MAX_FIELD_SETS`` asked for last are kept. A set asked
for the first time cuts each job's own fields from a kept set's JSON of that job's
version (one of only ``FLAT_FIELDS``, leaving out the same defaults: ``,"name":`` occurs
in it only before a field), runs of adjacent fields at a time (``_plan``, ``_cut``), and
builds only the others; a plain pending job's live fields (``live_settled``) are that
set's where it has the same. A new ``squeue -o`` with a field or two beyond a kept set
costs about half of building it all (docs/benchmarks-commands.md). Nothing more is kept of
a job: each set's JSON is its own bytes (a settled job's live part shared).

``omit_defaults`` (ADR 0028) leaves out of each job the fields whose value is their
default in ``JobInfo`` (``JOB_DEFAULTS``, the OpenAPI schema's ``default``): a pending
job's start, end, node list and array fields. A job's own fields are compared, a nested
object's (``steps``, ``gpu_usage``) are whole. Its JSON is kept apart from the full one's.

History (``GET /v1/jobs?history=true``, ``sacct``) reads its jobs from the store afresh,
so no job's JSON is kept for it; with ``fields=`` (or ``omit_defaults``) its body
(``history_body``) is built the same way, each field asked for worked out alone, its
steps and runs whole: ``sacct``'s default format asks for 27 fields, and no job's whole
``JobInfo`` is built.
"""

from __future__ import annotations

import asyncio
import enum
import math
import time
import types
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, create_model

from hal.api.convert import (
    LIVE_FIELDS,
    PROFILE_OWN,
    job_fields,
    job_fields_of,
    live_fields,
    live_settled,
    profile_fields,
)
from hal.core.errors import InvalidRequest
from hal.core.job import Job
from hal.state.cluster import Cluster
from hal.wire.jobs import JobInfo, JobRun, StepRecord

# a few milliseconds of serialising between two turns of the event loop
YIELD_EVERY = 50
# asleep between those turns while a pass is decided (``give_way``: on the server's
# worker thread, or in a forked process the thread waits for). A loop thread that never
# waits holds the interpreter each time the pass lets it go (at every large numpy call),
# and a pass on the thread then takes about 8 times its CPU; with 1 ms asleep per 2 ms of
# work, about 2 times (docs/benchmarks-scale.md, "The interpreter's switch interval")
GIVE_WAY_S = 0.001
# field sets whose JSON is kept (squeue's default, -l, a tool's own -o, the dashboard's)
MAX_FIELD_SETS = 8
# ``squeue``'s default format's fields, asked for with ``omit_defaults``: kept up to date
# between requests from the server's start (``JobListCache.warm``; the same set as
# ``hal.compat.squeue`` asks for: tests/unit/compat/test_squeue_fields.py)
SQUEUE_FIELDS = frozenset(
    [
        "array_job_id",
        "array_max_running",
        "array_task_id",
        "display_id",
        "end_time",
        "id",
        "name",
        "node_count",
        "nodes",
        "partition",
        "priority",
        "reason",
        "start_time",
        "state",
        "state_code",
        "suspended_seconds",
        "user",
    ]
)
# and the other field sets asked for in the last WARM_FOR_S seconds
WARM_FOR_S = 300.0
JOB_FIELDS = tuple(JobInfo.model_fields)  # in JobInfo's order: what ``fields=`` may name
# each field's default (a factory's value), those without one absent: what
# ``omit_defaults`` leaves out
JOB_DEFAULTS: dict[str, Any] = {
    name: info.get_default(call_default_factory=True)
    for name, info in JobInfo.model_fields.items()
    if not info.is_required()
}


def _never() -> bool:
    return False


async def _turn(give_way: Callable[[], bool]) -> None:
    """A turn of the event loop between two chunks of a build: at once, or ``GIVE_WAY_S``
    asleep while ``give_way()`` says a pass is being decided."""
    await asyncio.sleep(GIVE_WAY_S if give_way() else 0)


def _flat(annotation: Any) -> bool:
    """Whether a value so typed serialises without a JSON object in it."""
    if isinstance(annotation, type) and not get_args(annotation):
        return annotation in (str, int, float, bool, type(None)) or issubclass(
            annotation, enum.Enum
        )
    args = get_args(annotation)
    return (
        bool(args)
        and get_origin(annotation) in (list, tuple, Union, types.UnionType)
        and all(a is Ellipsis or _flat(a) for a in args)
    )


# the fields whose JSON holds no object: ``,"name":`` (a quote inside a string is
# escaped) cannot occur inside their values, so a JSON of just these has it only before
# each field
FLAT_FIELDS = frozenset(n for n, f in JobInfo.model_fields.items() if _flat(f.annotation))

# a field set's own fields as cut from JSONs of a job's fields (``_cut``), in their
# order: runs of fields that lie together in one of them (which, their keys,
# ``,"name":``, and those of the fields after them there)
_Plan = tuple[tuple[int, tuple[bytes, ...], tuple[bytes, ...]], ...]


def _key(name: bytes) -> bytes:
    return b',"' + name + b'":'


def _plan(order: Sequence[bytes], kept: Sequence[Sequence[bytes]]) -> _Plan:
    """How to cut the fields ``order`` from JSONs of the fields ``kept`` (each in
    JobInfo's order; one of ``FLAT_FIELDS`` but for one field, each field of ``order``
    in one of them; a field in more than one is cut from the first)."""
    at: dict[bytes, tuple[int, int]] = {}
    for k, names in enumerate(kept):
        for n, name in enumerate(names):
            at.setdefault(name, (k, n))
    runs: list[list[bytes]] = []
    for name in order:
        k, n = at[name]
        if runs and at[runs[-1][-1]] == (k, n - 1):
            runs[-1].append(name)
        else:
            runs.append([name])
    plan = []
    for run in runs:
        k, n = at[run[-1]]
        plan.append((k, tuple(map(_key, run)), tuple(map(_key, kept[k][n + 1 :]))))
    return tuple(plan)


def _cut(heads: Sequence[bytes], plan: _Plan) -> bytes:
    """The JSON, without braces, of the fields ``plan`` names, cut from ``heads`` (each
    ``"a":1,"b":2``, the JSON of the fields ``_plan`` was given, those left out at their
    default absent)."""
    texts = [b"," + head for head in heads]
    out = []
    for k, run, after in plan:
        text = texts[k]
        start = -1
        for key in run:  # (the first of them there: the others before it are left out)
            start = text.find(key)
            if start >= 0:
                break
        if start < 0:
            continue
        end = len(text)
        for key in after:
            found = text.find(key, start + 1)
            if found >= 0:
                end = found
                break
        out.append(text[start + 1 : end])
    return b",".join(out)


def _model(name: str, fields: frozenset[str]) -> TypeAdapter[Any]:
    """An adapter of a model of just ``fields`` of ``JobInfo``, typed as JobInfo's."""
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        name, **{n: (f.annotation, f) for n, f in JobInfo.model_fields.items() if n in fields}
    )
    return TypeAdapter(model)


@dataclass(slots=True)
class _Shape:
    """One field set: its own and live fields, how each part is typed and serialised,
    and each listed job's JSON of it."""

    own: frozenset[str]
    live: frozenset[str]
    full: bool  # every field: the own part validated as a whole ``JobInfo``
    omit_defaults: bool
    order: tuple[bytes, ...]  # ``own``'s names in JobInfo's order: the order of its JSON
    own_model: TypeAdapter[Any]
    live_model: TypeAdapter[Any]
    defaults: dict[str, Any]  # what is left out at its default: none without omit_defaults
    own_fields: Callable[[Job], dict[str, Any]]  # ``job_fields`` of ``own`` (and a few more)
    profile_own: bool  # some of ``own`` are ``profile_fields``'
    # how to cut ``own`` from a kept set's JSON (``_plan``) and build the others, by that
    # set's own fields
    cuts: dict[frozenset[str], tuple[_Plan, tuple[_Shape, ...]]] = field(default_factory=dict)
    entries: dict[int, _Entry] = field(default_factory=dict)
    asked: float = -math.inf  # when a list last asked for it (``time.monotonic``)

    @classmethod
    def of(cls, fields: frozenset[str], omit_defaults: bool = False) -> _Shape:
        own, live = fields - LIVE_FIELDS, fields & LIVE_FIELDS
        full = fields == frozenset(JOB_FIELDS)
        return cls(
            own,
            live,
            full,
            omit_defaults,
            tuple(n.encode() for n in JOB_FIELDS if n in own),
            _model("JobInfoOwn", own),
            _model("JobInfoLive", live),
            {n: d for n, d in JOB_DEFAULTS.items() if n in fields} if omit_defaults else {},
            job_fields_of(own),
            not own.isdisjoint(PROFILE_OWN),
        )

    def json(self, model: TypeAdapter[Any], values: dict[str, Any]) -> bytes:
        """``values`` validated and serialised by ``model`` (the fields it has; ``values``
        may hold others), less the fields at their default where this set leaves them
        out."""
        valid = model.validate_python(values)
        if not self.defaults:
            return model.dump_json(valid)
        names = type(valid).model_fields
        return model.dump_json(valid, exclude=self.at_default(valid, names))

    def dump(self, model: TypeAdapter[Any], values: dict[str, Any]) -> bytes:
        """``json`` less its braces."""
        return _inner(self.json(model, values))

    def values(self, job: Job, cluster: Cluster) -> dict[str, Any]:
        """``job``'s own fields of this set (and maybe a few more)."""
        values = self.own_fields(job)
        if self.profile_own:
            values.update(profile_fields(job, cluster))
        return values

    def at_default(self, valid: object, names: Iterable[str]) -> set[str] | None:
        """Those of ``names`` whose value in ``valid`` is their default, where this set
        leaves them out (None: none)."""
        if not self.defaults:
            return None
        defaults = self.defaults
        return {n for n in names if n in defaults and getattr(valid, n) == defaults[n]}


@dataclass(slots=True)
class _Entry:
    job: Job  # the version whose JSON ``head`` is (identity, not equality)
    head: bytes  # the job's own fields, ``"a":1,"b":2``, without braces
    live: dict[str, Any]  # the live fields ``tail`` holds
    tail: bytes  # the live fields, without braces
    whole: bytes  # the object: ``{`` head, a comma where both have fields, tail ``}``
    settled: bool = False  # ``live_settled(job)``: its live fields never change


def _inner(dumped: bytes) -> bytes:
    return dumped[1:-1]  # ``{...}`` less its braces


def _object(head: bytes, tail: bytes) -> bytes:
    return b"{" + head + (b"," if head and tail else b"") + tail + b"}"


def field_set(text: str | None) -> frozenset[str] | None:
    """``fields=``: ``JobInfo`` field names, comma-separated, any order; None (every
    field) where none is named. A name JobInfo does not have is refused, with the names
    it has."""
    names = frozenset(n.strip() for n in (text or "").split(",") if n.strip())
    if not names:
        return None
    unknown = sorted(names - frozenset(JOB_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"unknown job field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}; "
            f"fields= takes these, comma-separated: {', '.join(JOB_FIELDS)}",
            field="fields",
        )
    return names


class JobListCache:
    """Each listed job's JSON, by field set and job id; entries of jobs the mirror no
    longer holds are dropped when they outnumber the mirror's jobs."""

    def __init__(self) -> None:
        self.shapes: dict[_Key, _Shape] = {}
        # the shapes of the fields a new set builds beyond those kept sets hold
        self.parts: dict[_Key, _Shape] = {}
        self.built = 0  # JSON serialised afresh, a job's or its live fields'

    def _shape(self, fields: frozenset[str], omit_defaults: bool) -> _Shape:
        key = (fields, omit_defaults)
        return _latest(self.shapes, key, MAX_FIELD_SETS, lambda: _Shape.of(*key))

    def _sources(self, shape: _Shape) -> list[_Shape]:
        """The kept sets ``shape``'s own fields may be cut from, most shared fields
        first: those of only ``FLAT_FIELDS`` leaving out the same defaults."""
        if shape.full or not shape.own:
            return []
        found = [
            other
            for other in self.shapes.values()
            if other is not shape
            and not other.full
            and other.omit_defaults == shape.omit_defaults
            and other.own <= FLAT_FIELDS
            and not other.own.isdisjoint(shape.own)
        ]
        return sorted(found, key=lambda other: -len(other.own & shape.own))

    async def body(
        self,
        jobs: Sequence[Job],
        cluster: Cluster,
        fields: frozenset[str] | None = None,
        omit_defaults: bool = False,
        give_way: Callable[[], bool] = _never,
    ) -> bytes:
        """``{"jobs": [...]}`` of ``jobs``, in their order, each with ``fields`` (None:
        every field), less those at their default with ``omit_defaults``. Between every
        ``YIELD_EVERY`` jobs serialised afresh it lets the event loop run (the first list
        after a start builds every job's JSON: seconds at 20,000 jobs), and sleeps
        ``GIVE_WAY_S`` there while ``give_way()`` says a pass is being decided (``_turn``);
        the jobs are the versions ``jobs`` holds, whatever changes meanwhile."""
        shape = self._shape(frozenset(JOB_FIELDS) if fields is None else fields, omit_defaults)
        shape.asked = time.monotonic()
        now = cluster.clock.now()
        parts: list[bytes] = []
        built = self.built
        entries, settled_only = shape.entries, not shape.live
        sources = self._sources(shape)
        for job in jobs:
            entry = entries.get(job.id)  # (most of a queue: its JSON as kept, no call)
            if entry is not None and entry.job is job and (settled_only or entry.settled):
                parts.append(entry.whole)
                continue
            parts.append(self._json(shape, job, cluster, now, sources))
            if self.built - built >= YIELD_EVERY:
                built = self.built
                await _turn(give_way)
        _prune(shape, cluster)
        return b'{"jobs":[' + b",".join(parts) + b"]}"

    async def warm(
        self, jobs: Sequence[Job], cluster: Cluster, idle: Callable[[], Awaitable[object]]
    ) -> int:
        """Build the JSON of each of ``jobs`` (new, or a new version) that squeue's default
        set (``SQUEUE_FIELDS``) and each set asked for in the last ``WARM_FOR_S`` lack, so
        that the next list finds it kept. Between every ``YIELD_EVERY`` jobs built it lets
        the event loop run, then waits for ``idle()`` (no pass being decided). How many
        it built."""
        squeue = (SQUEUE_FIELDS, True)
        if squeue not in self.shapes:
            self._shape(*squeue)
        since = time.monotonic() - WARM_FOR_S
        shapes = [s for k, s in self.shapes.items() if k == squeue or s.asked >= since]
        now = cluster.clock.now()
        built = 0
        for shape in shapes:
            sources = self._sources(shape)
            for job in jobs:
                entry = shape.entries.get(job.id)
                if entry is not None and entry.job is job:
                    continue
                shape.entries[job.id] = self._build(shape, job, cluster, now, sources)
                self.built += 1
                built += 1
                if built % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                    await idle()
            _prune(shape, cluster)
        return built

    def _json(
        self, shape: _Shape, job: Job, cluster: Cluster, now: float, sources: list[_Shape]
    ) -> bytes:
        entry = shape.entries.get(job.id)
        if entry is not None and entry.job is job and (not shape.live or entry.settled):
            return entry.whole  # (no field to work out)
        if entry is None or entry.job is not job:
            entry = shape.entries[job.id] = self._build(shape, job, cluster, now, sources)
            self.built += 1
            return entry.whole
        live = live_fields(job, cluster, now, None if shape.full else shape.live)
        if entry.live != live:
            entry.live = live
            entry.tail = shape.dump(shape.live_model, live)
            entry.whole = _object(entry.head, entry.tail)
            self.built += 1
        return entry.whole

    def _build(
        self, shape: _Shape, job: Job, cluster: Cluster, now: float, sources: list[_Shape]
    ) -> _Entry:
        if shape.full:
            live = live_fields(job, cluster, now)
            info = JobInfo(**job_fields(job), **live)  # validated once per version
            omitted = shape.at_default(info, shape.defaults) or set()
            head = _inner(_INFO.dump_json(info, include=set(shape.own) - omitted))
            tail = _inner(_INFO.dump_json(info, include=set(shape.live) - omitted))
            return _Entry(job, head, live, tail, _object(head, tail), live_settled(job))
        if sources:
            head = self._head(shape, job, cluster, sources)
            # (a settled job's live fields never change: those of a kept set with the same)
            kept = _kept(shape.live, job, sources)
            if kept is not None and kept.settled:
                live, tail = kept.live, kept.tail
            else:
                live, tail = _live(shape, job, cluster, now)
        else:
            head, live, tail = _parts(shape, job, cluster, now)
        settled = live_settled(job, shape.live)
        return _Entry(job, head, live, tail, _object(head, tail), settled)

    def _head(self, shape: _Shape, job: Job, cluster: Cluster, sources: list[_Shape]) -> bytes:
        """``job``'s own fields of ``shape`` (``_Entry.head``): those a kept set of this
        version of it has cut from its JSON, the others built; the same bytes as
        building them all."""
        for source in sources:
            entry = source.entries.get(job.id)
            if entry is not None and entry.job is job:
                break
        else:
            return shape.dump(shape.own_model, shape.values(job, cluster))
        found = shape.cuts.get(source.own)
        if found is None:
            found = shape.cuts[source.own] = self._cuts(shape, source)
        plan, parts = found
        heads = [entry.head]
        heads += [part.dump(part.own_model, part.values(job, cluster)) for part in parts]
        return _cut(heads, plan)

    def _cuts(self, shape: _Shape, source: _Shape) -> tuple[_Plan, tuple[_Shape, ...]]:
        """How to cut ``shape``'s own fields from ``source``'s JSON and those of the
        shapes that build the others (the flat ones together, each other alone), and
        those shapes."""
        missing = shape.own - source.own
        flat = missing & FLAT_FIELDS
        groups = ([flat] if flat else []) + [frozenset({n}) for n in missing - flat]
        keys = [(g, shape.omit_defaults) for g in groups]
        parts = [_latest(self.parts, k, 4 * MAX_FIELD_SETS, partial(_Shape.of, *k)) for k in keys]
        plan = _plan(shape.order, [source.order] + [part.order for part in parts])
        return plan, tuple(parts)


_INFO: TypeAdapter[JobInfo] = TypeAdapter(JobInfo)


def _prune(shape: _Shape, cluster: Cluster) -> None:
    """Drop the entries of jobs the mirror no longer holds (or holds another version of)
    once they outnumber the mirror's jobs."""
    if len(shape.entries) > 2 * len(cluster.jobs) + 1000:
        held = cluster.jobs
        shape.entries = {k: e for k, e in shape.entries.items() if held.get(k) is e.job}


def _kept(live: frozenset[str], job: Job, sources: list[_Shape]) -> _Entry | None:
    """The entry of this version of ``job`` in the first of ``sources`` with just the
    live fields ``live``; None where none has one."""
    for source in sources:
        entry = source.entries.get(job.id)
        if source.live == live and entry is not None and entry.job is job:
            return entry
    return None


_Key = tuple[frozenset[str], bool]  # a field set and whether it leaves out defaults
V = TypeVar("V")


def _latest(kept: dict[_Key, V], key: _Key, most: int, make: Callable[[], V]) -> V:
    """The value of ``key`` in ``kept``, ``make()`` where not there; ``kept`` keeps the
    ``most`` asked for last (taken out and put back: the latest last)."""
    found = kept.pop(key, None)
    if found is None:
        found = make()
        while len(kept) >= most:
            del kept[next(iter(kept))]
    kept[key] = found
    return found


def _parts(
    shape: _Shape, job: Job, cluster: Cluster, now: float
) -> tuple[bytes, dict[str, Any], bytes]:
    """The JSON of ``job``'s own fields of ``shape``, its live fields and their JSON:
    each field worked out alone, no whole ``JobInfo`` built."""
    head = shape.dump(shape.own_model, shape.values(job, cluster)) if shape.own else b""
    return head, *_live(shape, job, cluster, now)


def _live(shape: _Shape, job: Job, cluster: Cluster, now: float) -> tuple[dict[str, Any], bytes]:
    """``job``'s live fields of ``shape`` and their JSON."""
    live = live_fields(job, cluster, now, shape.live)
    return live, shape.dump(shape.live_model, live)


# history's field sets (``history_body``), the ``MAX_FIELD_SETS`` asked for last, each
# with a model of all its fields, JobInfo's order; the jobs are read from the store
# afresh, so no job's JSON is kept
_HISTORY_SHAPES: dict[_Key, tuple[_Shape, TypeAdapter[Any]]] = {}


def _history_shape(fields: frozenset[str], omit_defaults: bool) -> tuple[_Shape, TypeAdapter[Any]]:
    def make() -> tuple[_Shape, TypeAdapter[Any]]:
        return _Shape.of(fields, omit_defaults), _model("JobInfoFields", fields)

    return _latest(_HISTORY_SHAPES, (fields, omit_defaults), MAX_FIELD_SETS, make)


async def history_body(
    jobs: Sequence[Job],
    cluster: Cluster,
    fields: frozenset[str] | None,
    omit_defaults: bool,
    steps: Mapping[int, list[StepRecord]],
    runs: Mapping[int, list[JobRun]],
    give_way: Callable[[], bool] = _never,
) -> bytes:
    """``{"jobs": [...]}`` of history's ``jobs`` (``sacct``), in their order, each with
    ``fields`` (None: every field), less those at their default with ``omit_defaults``:
    the same JSON as a ``JobList`` of their ``job_info`` with ``steps`` and ``runs``
    (by job id; a job not there has none) restricted to those fields, each field worked
    out alone as the queue's list does. Every ``YIELD_EVERY`` jobs it lets the event
    loop run (and gives way as the queue's list does)."""
    asked = frozenset(JOB_FIELDS) if fields is None else fields
    shape, model = _history_shape(asked, omit_defaults)
    now = cluster.clock.now()
    with_steps, with_runs = "steps" in asked, "runs" in asked
    parts: list[bytes] = []
    for n, job in enumerate(jobs, start=1):
        values = shape.values(job, cluster)
        if shape.live:
            values.update(live_fields(job, cluster, now, shape.live))
        if with_steps:
            values["steps"] = steps.get(job.id, [])
        if with_runs:
            values["runs"] = runs.get(job.id, [])
        parts.append(shape.json(model, values))
        if n % YIELD_EVERY == 0:
            await _turn(give_way)
    return b'{"jobs":[' + b",".join(parts) + b"]}"


_CACHES: weakref.WeakKeyDictionary[Cluster, JobListCache] = weakref.WeakKeyDictionary()


async def job_list_body(
    jobs: Sequence[Job],
    cluster: Cluster,
    fields: frozenset[str] | None = None,
    omit_defaults: bool = False,
    give_way: Callable[[], bool] = _never,
) -> bytes:
    """``JobListCache.body`` with the cache kept for ``cluster``."""
    return await job_list_cache(cluster).body(jobs, cluster, fields, omit_defaults, give_way)


async def job_list_warm(
    jobs: Sequence[Job], cluster: Cluster, idle: Callable[[], Awaitable[object]]
) -> int:
    """``JobListCache.warm`` with the cache kept for ``cluster``."""
    return await job_list_cache(cluster).warm(jobs, cluster, idle)


def job_list_cache(cluster: Cluster) -> JobListCache:
    """The job lists' cache kept for ``cluster``."""
    cache = _CACHES.get(cluster)
    if cache is None:
        cache = _CACHES[cluster] = JobListCache()
    return cache
