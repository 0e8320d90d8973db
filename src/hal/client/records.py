"""Answers read as plain records, for commands that start, ask once and exit.

``HalClient`` validates what the server answers with the wire models (pydantic), whose
import alone costs a short-lived command more than its request (~100 ms). With
``validate=False`` a method reads the same JSON into ``Record`` objects instead: each JSON
object becomes one, its keys its attributes, so code written against the model
(``JobInfo``) reads a record alike. The server built that JSON from the model, every field
present, and stays the authority on what is valid: a record is never sent back.
"""

from __future__ import annotations

from hal.client import cjson

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")


class Record:
    """One JSON object of an answer; its keys are its attributes. Equal to a record with
    the same attributes and shown as one, as ``types.SimpleNamespace``; unlike it, made
    around the parsed object's own dictionary (``records``), with no copy of it."""

    __hash__ = None  # type: ignore[assignment]  # (changeable: unhashable)

    def __init__(self, **fields: Any) -> None:
        vars(self).update(fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return vars(self) == vars(other)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({shown})"


def replaced(value: T, update: dict[str, Any]) -> T:
    """``value.model_copy(update=update)``, of a wire model or a record alike: a shallow
    copy with these attributes changed."""
    copy_of = getattr(value, "model_copy", None)
    if copy_of is not None:
        return copy_of(update=update)  # type: ignore[no-any-return]
    names = getattr(value, "__struct_fields__", None)
    if names is not None:  # (a long list's job, ``job_list``: a record of its fields)
        fields = {name: getattr(value, name) for name in names}
        return Record(**(fields | update))  # type: ignore[return-value]
    import copy

    new = copy.copy(value)
    vars(new).update(update)
    return new


def records(
    body: bytes | str, defaults: dict[str, Any] | None = None, maps: tuple[str, ...] = ()
) -> Any:
    """The JSON ``body`` with every object a ``Record``; ``defaults``: the values of the
    attributes an object leaves out (a job list's with ``omit_defaults``, ADR 0028),
    read from its class as a missing attribute is (no copy into each record); ``maps``:
    the attributes that hold a mapping (the model's ``dict[str, ...]``, as a node's
    ``topology_labels``), kept a ``dict``."""
    kind = Record if not defaults else type("JobRecord", (Record,), dict(defaults))
    make = object.__new__

    def record(fields: dict[str, Any]) -> Record:
        for name in maps:  # (made a record already: the parser hands objects inside out)
            inner = fields.get(name)
            if isinstance(inner, Record):
                fields[name] = inner.__dict__
        made: Record = make(kind)
        made.__dict__ = fields  # (the parser's own: a fifth of a job list's parse less)
        return made

    return cjson.loads(body, object_hook=record)


# A job list of at least this many bytes is decoded by msgspec (``job_list``): its import
# (typing, re, datetime: about 0.03 s of a command's start-up) is paid back from about
# 2 MiB, some 11,000 jobs of squeue's default fields (the standard scanner's records of
# 100,000 take 0.26 s, msgspec's structs 0.06 s: docs/benchmarks-commands.md)
TYPED_FROM_BYTES = 2 << 20


def job_list(body: bytes | str, fields: list[str], defaults: dict[str, Any]) -> list[Any]:
    """The jobs of a job list of ``fields`` (``GET /v1/jobs?fields=``, with
    ``omit_defaults``: ``defaults`` those left out), read as ``records`` reads them: the
    same attributes, the same values. A long list is decoded by msgspec into a struct of
    just ``fields`` (``TYPED_FROM_BYTES``); where msgspec refuses the body (what the
    standard scanner reads and it does not, as ``NaN``; a job without a field
    it has no default for), ``records`` reads it, its errors its own."""
    if len(body) >= TYPED_FROM_BYTES:
        jobs = _job_structs(body, fields, defaults)
        if jobs is not None:
            return jobs
    found: list[Any] = records(body, defaults).jobs
    return found


def _job_structs(
    body: bytes | str, fields: list[str], defaults: dict[str, Any]
) -> list[Any] | None:
    """``job_list``'s jobs decoded by msgspec (None where it refuses the body): each a
    struct of ``fields`` of any JSON value, ``defaults`` those of the fields
    a job leaves out; unasked fields (an older server's every field) skipped unread; no
    cyclic garbage collection of them (they hold no cycle)."""
    import types
    from typing import Any

    import msgspec

    kind = msgspec.defstruct(
        "JobFields",
        [(name, Any, defaults[name]) if name in defaults else (name, Any) for name in fields],
        kw_only=True,
        gc=False,
    )
    listing = msgspec.defstruct(
        "JobFieldsList", [("jobs", types.GenericAlias(list, (kind,)))], gc=False
    )
    try:
        decoded = msgspec.json.decode(body, type=listing)
    except (msgspec.DecodeError, UnicodeDecodeError):  # (and its ValidationError)
        return None
    jobs: list[Any] = decoded.jobs  # type: ignore[attr-defined]  # (a struct made above)
    return jobs


# A job's fields that a job list with ``omit_defaults`` may leave out, at their value
# then: ``JobInfo``'s defaults (its OpenAPI schema's), a list's as a tuple (records are
# read, never changed); a test checks this against ``JobInfo``
JOB_DEFAULTS: dict[str, Any] = {
    **dict.fromkeys(
        (
            "het_job_id", "het_job_offset", "het_job_id_set", "array_job_id",
            "array_task_id", "account", "qos", "eligible_time", "start_time", "end_time",
            "deadline", "expected_start", "predicted_runtime_seconds", "predicted_end",
            "user_cpu_seconds", "system_cpu_seconds", "rss_bytes", "usage_time",
            "gpu_usage", "profile", "profile_class", "malleable", "feedback_action",
            "script_path", "dependency", "dependency_state", "requeued_after",
            "preempt_time", "interrupted_at", "lost_work_seconds", "cancelled_by",
            "switch_wait_seconds", "topology", "placement", "python_env", "container",
            "time_min_seconds", "cron", "cost",
        ),
        None,
    ),
    **dict.fromkeys(
        (
            "array_max_running", "nice", "min_cpus_per_node", "exit_code", "exit_signal",
            "max_rss_bytes", "restarts", "switches",
        ),
        0,
    ),
    **dict.fromkeys(("cpu_seconds", "suspended_seconds"), 0.0),
    **dict.fromkeys(
        (
            "burst_after", "comment", "wckey", "submit_host", "feedback_goal",
            "feedback_metrics", "reservation", "licenses", "mail_user",
        ),
        "",
    ),
    **dict.fromkeys(
        (
            "nodes", "script_args", "constraint", "req_nodes", "exc_nodes", "data",
            "artifacts", "artifact_digests", "artifact_aliases", "near", "apart", "steps",
            "runs",
        ),
        (),
    ),
    **dict.fromkeys(
        (
            "memory_whole_node", "latency_sensitive", "exclusive", "exclusive_user",
            "held", "interactive",
        ),
        False,
    ),
    "requeue": True,
    "mail_type": "NONE",
}  # fmt: skip
# Those of a job's fields that hold objects: a record reads one whole, so a list that
# names any of them is asked for without ``omit_defaults`` (see ``job_defaults``)
NESTED_JOB_FIELDS = frozenset({"gpu_usage", "profile", "steps", "runs"})


def job_defaults(fields: list[str] | None) -> dict[str, Any] | None:
    """The defaults of ``fields`` that a job list may leave out (``omit_defaults``), for
    ``records``; None (ask for every field sent) for every field or one holding objects,
    whose records would take a job's defaults."""
    if not fields or not NESTED_JOB_FIELDS.isdisjoint(fields):
        return None
    return {name: JOB_DEFAULTS[name] for name in fields if name in JOB_DEFAULTS}


# The attributes of the wire schemas ``read`` reads that hold a mapping (the model's
# ``dict[str, ...]``): their records keep it a ``dict`` (a test checks these names
# against the models)
MAPS: dict[str, tuple[str, ...]] = {
    "nodes.NodeList": ("topology_labels",),
    "nodes.ClusterConfig": ("settings", "licenses"),
    "priority.ShareList": ("tres_run_minutes",),
    "steps.StepList": ("cpus",),
}


# The fields of the items of the wire schemas ``read`` reads that a server older than
# them leaves out, at the model's default (a list's as a tuple): a record reads one left
# out as the model would (a test checks these against the models); ``state`` of a
# partition is worked out from ``up`` (``_states_of_up``), as the model does.
DEFAULTS: dict[str, dict[str, Any]] = {
    "nodes.NodeList": {
        **dict.fromkeys(
            ("reason", "reason_user", "gpu_model", "nvlink_domain", "address"), ""
        ),
        **dict.fromkeys(
            ("state_flags", "gpu_ids_alloc", "gpu_islands", "features", "partitions", "jobs"),
            (),
        ),
        **dict.fromkeys(("reason_time", "free_memory_bytes", "cpu_load"), None),
        "topology_labels": {},
        "last_heartbeat": 0.0,
    },
    "nodes.PartitionList": {"priority_tier": 1, "priority_job_factor": 1, "preempt_mode": "OFF"},
}  # fmt: skip


def read(body: bytes | str, schema: str, *, validate: bool = True) -> Any:
    """``body`` validated by the wire schema ``schema`` (``"nodes.NodeList"``: that of
    ``hal.wire.nodes``); ``validate=False``: read by ``records`` (its mappings kept
    dicts: ``MAPS``; the fields an older server leaves out at their defaults:
    ``DEFAULTS``), the same attributes without pydantic (a command that reads and
    prints)."""
    if not validate:
        found = records(body, DEFAULTS.get(schema), maps=MAPS.get(schema, ()))
        if schema == "nodes.PartitionList":
            _states_of_up(found.partitions)
        return found
    import sys

    module, name = f"hal.wire.{schema}".rsplit(".", 1)
    __import__(module)  # (not importlib.import_module: see hal.compat.commands)
    return getattr(sys.modules[module], name).model_validate_json(body)


def _states_of_up(partitions: list[Any]) -> None:
    """A partition an older server sent without ``state``: UP, or DOWN where not ``up``,
    as ``PartitionInfo`` reads it."""
    for view in partitions:
        if "state" not in vars(view):
            view.state = "DOWN" if view.up is False else "UP"
