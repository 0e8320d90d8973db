"""Slurm's ``job_desc_msg`` → HAL's submission (``hal.wire.submit.JobSubmit``) or update
(``hal.wire.jobs.JobUpdate`` fields), field by field.

Every field a client sends is accounted for: mapped, ignored with a ``warnings`` entry
(it changes nothing about where or how the job runs: accounting labels, binding
hints), or refused with an ``errors`` entry (unknown, or something HAL does not do, such
as X11 or burst buffers). A refused field stops the request: a job that runs without
what its user asked for is worse than no job. Empty values (``null``, ``""``, ``[]``,
an unset no_val struct) count as not sent, as generated clients send them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from hal.api.fastpath import validate
from hal.api.slurmrest.envelope import (
    JOB_SCRIPT_MISSING,
    REST_FAIL_PARSING,
    error_entry,
    warning_entry,
)
from hal.core.errors import InvalidRequest
from hal.slurm.mail import parse_mail_type
from hal.slurm.syntax import expand_hostlist, parse_gres, parse_nodes
from hal.wire.submit import JobSubmit

MIB = 1024 * 1024

# sent by clients, changing nothing about where or how the job runs: a warning each
IGNORED = frozenset(
    {
        "account_gather_frequency",
        "cpu_binding",
        "cpu_binding_flags",
        "cpu_frequency",
        "distribution",
        "flags",
        "group_id",
        "kill_on_node_fail",
        "memory_binding",
        "memory_binding_type",
        "open_mode",
        "profile",
        "user_id",
        "wckey",
    }
)


@dataclass(slots=True)
class Parsed:
    """What a ``job_desc_msg`` asked for: HAL's fields, and the entries to answer with."""

    fields: dict[str, Any] = field(default_factory=dict)
    errors: list[dict[str, object]] = field(default_factory=list)
    warnings: list[dict[str, object]] = field(default_factory=list)
    # HAL's field → the request's field that set it (``job.tasks`` for ``ntasks``), for
    # naming what HAL's wire bounds refuse
    sources: dict[str, str] = field(default_factory=dict)

    def refuse(
        self, name: str, description: str, errno: tuple[int, str] = REST_FAIL_PARSING
    ) -> None:
        self.errors.append(error_entry(errno, f"job.{name}: {description}", f"job.{name}"))


def empty(value: object) -> bool:
    if value is None or value in ("", [], {}):
        return True
    return isinstance(value, dict) and value.get("set") is False and not value.get("infinite")


def number(value: object) -> tuple[int | None, bool]:
    """A plain integer or a no_val struct → (number, infinite)."""
    if isinstance(value, bool):
        raise ValueError("a number, not true/false")
    if isinstance(value, int):
        return value, False
    if isinstance(value, dict) and set(value) <= {"set", "infinite", "number"}:
        if value.get("infinite"):
            return None, True
        got = value.get("number")
        if value.get("set", True) and isinstance(got, int) and not isinstance(got, bool):
            return got, False
    raise ValueError('a number, or a no_val struct {"set": true, "number": N}')


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("a string")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false")
    return value


def _whole(value: object) -> int:
    got, infinite = number(value)
    if infinite or got is None or got < 0:
        raise ValueError("a number of 0 or more")
    return got


def _minutes(value: object) -> int:
    """A time limit in minutes (Slurm's unit) → seconds; infinite → 0, HAL's no limit."""
    got, infinite = number(value)
    if infinite:
        return 0
    if got is None or got < 0:
        raise ValueError("minutes, 0 or more, or infinite")
    return got * 60


def _signed(value: object) -> int:
    got, infinite = number(value)
    if infinite or got is None:
        raise ValueError("a number")
    return got


def _mebibytes(value: object) -> int:
    got, infinite = number(value)
    if infinite or got is None or got < 0:
        raise ValueError("MiB, 0 or more (infinite is not supported)")
    return got * MIB


def _environment(value: object) -> dict[str, str]:
    """v0.0.41 and later send ``["K=V", ...]``; v0.0.38 sent ``{"K": "V"}``: both read."""
    if isinstance(value, dict):
        if not all(isinstance(v, str) for v in value.values()):
            raise ValueError('"K=V" strings, or an object of strings')
        return {str(k): v for k, v in value.items()}
    if not isinstance(value, list):
        raise ValueError('a list of "K=V" strings')
    out: dict[str, str] = {}
    for item in value:
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f'a list of "K=V" strings; {item!r} is not one')
        key, _, val = item.partition("=")
        out[key] = val
    return out


def _hosts(value: object) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValueError("a list of node names (or one host list string)")
    return [name for item in items for name in expand_hostlist(item, field="nodes")]


def _constraints(value: object) -> list[str]:
    """``a&b`` or ``a,b``: features that must all be present (``hal sbatch -C``'s rule)."""
    text = _text(value)
    if any(ch in text for ch in "|[]*()!"):
        raise ValueError("HAL supports only features that must all be present, joined with &")
    return [f.strip() for f in re.split(r"[&,]", text) if f.strip()]


def _begin(value: object) -> float:
    got, infinite = number(value)
    if infinite or got is None or got < 0:
        raise ValueError("a UNIX time in seconds")
    return float(got)


def _nodes(value: object) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    return parse_nodes(_text(value), field="nodes")


def _gpus(value: object, name: str) -> tuple[str | None, int]:
    return parse_gres(_text(value), field=name)


def _stdin(value: object) -> None:
    if _text(value) != "/dev/null":
        raise ValueError("HAL jobs read no standard input; send /dev/null or nothing")


# slurmrestd's mail_type flags (job_desc_msg) → sbatch's --mail-type words
_MAIL_FLAGS = {
    "TIME=100%": "TIME_LIMIT",
    "TIME=90%": "TIME_LIMIT_90",
    "TIME=80%": "TIME_LIMIT_80",
    "TIME=50%": "TIME_LIMIT_50",
    "INVALID_DEPENDENCY": "INVALID_DEPEND",
}


def _mail_type(value: object) -> str:
    """``["BEGIN", "TIME=80%"]`` (or sbatch's comma list) → ``BEGIN,TIME_LIMIT_80``."""
    words = value.split(",") if isinstance(value, str) else value
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise ValueError('a list of mail flags, e.g. ["BEGIN", "END"]')
    text = ",".join(_MAIL_FLAGS.get(w.strip().upper(), w.strip()) for w in words)
    parse_mail_type(text)
    return text


# name → (reader, HAL's field or fields); a reader raises ValueError or InvalidRequest
Reader = Callable[[object], Any]
SUBMIT: dict[str, tuple[Reader, str]] = {
    "script": (_text, "script"),
    "name": (_text, "name"),
    "partition": (_text, "partition"),
    "account": (_text, "account"),
    "qos": (_text, "qos"),
    "comment": (_text, "comment"),
    "reservation": (_text, "reservation"),
    "licenses": (_text, "licenses"),
    "dependency": (_text, "dependency"),
    "array": (_text, "array"),
    "mail_type": (_mail_type, "mail_type"),
    "mail_user": (_text, "mail_user"),
    "hold": (_flag, "hold"),
    "requeue": (_flag, "requeue"),
    "nice": (_signed, "nice"),
    "environment": (_environment, "environment"),
    "current_working_directory": (_text, "workdir"),
    "standard_output": (_text, "stdout"),
    "standard_error": (_text, "stderr"),
    "standard_input": (_stdin, ""),
    "minimum_nodes": (_whole, "nodes_min"),
    "maximum_nodes": (_whole, "nodes_max"),
    "tasks": (_whole, "ntasks"),
    "tasks_per_node": (_whole, "ntasks_per_node"),
    "cpus_per_task": (_whole, "cpus_per_task"),
    "memory_per_node": (_mebibytes, "memory_per_node_bytes"),
    "memory_per_cpu": (_mebibytes, "memory_per_cpu_bytes"),
    "time_limit": (_minutes, "time_limit_seconds"),
    "time_minimum": (_minutes, "time_min_seconds"),
    "begin_time": (_begin, "begin_time"),
    "deadline": (_begin, "deadline"),
    "constraints": (_constraints, "constraint"),
    "excluded_nodes": (_hosts, "exclude"),
    "required_nodes": (_hosts, "nodelist"),
}
# ``POST /job/{id}``: what ``scontrol update job`` changes (``JobUpdate``'s fields)
UPDATE: dict[str, tuple[Reader, str]] = {
    "time_limit": (_minutes, "time_limit_seconds"),
    "time_minimum": (_minutes, "time_min_seconds"),
    "priority": (_whole, "priority"),
    "nice": (_signed, "nice"),
    "name": (_text, "name"),
    "comment": (_text, "comment"),
    "partition": (_text, "partition"),
    "reservation": (_text, "reservation"),
    "begin_time": (_begin, "begin_time"),
    "dependency": (_text, "dependency"),
    "qos": (_text, "qos"),
    "account": (_text, "account"),
    "constraints": (_constraints, "constraint"),
    "excluded_nodes": (_hosts, "exclude"),
    "required_nodes": (_hosts, "nodelist"),
    "hold": (_flag, "hold"),
}


def _read(desc: dict[str, Any], table: dict[str, tuple[Reader, str]], out: Parsed) -> None:
    for name, value in desc.items():
        if empty(value):
            continue
        if name in IGNORED:
            out.warnings.append(
                warning_entry(
                    f"job.{name}: ignored; HAL does not use it (jobs run as the token's user)"
                    if name in ("user_id", "group_id")
                    else f"job.{name}: ignored; it changes nothing in how HAL runs the job",
                    f"job.{name}",
                )
            )
            continue
        if name in ("nodes", "tres_per_node", "tres_per_job", "tres_per_task") and table is SUBMIT:
            _special(name, value, out)
            continue
        if name not in table:
            out.refuse(
                name,
                "not supported by HAL's slurmrestd facade (docs/reference/slurmrest.md lists the "
                "fields it maps); remove it or use HAL's own API",
                REST_FAIL_PARSING,
            )
            continue
        reader, dest = table[name]
        try:
            got = reader(value)
        except ValueError as err:
            out.refuse(name, f"expected {err}")
            continue
        except InvalidRequest as err:
            out.refuse(name, err.message)
            continue
        if dest:
            out.fields[dest] = got
            out.sources[dest] = f"job.{name}"


def _special(name: str, value: object, out: Parsed) -> None:
    """The fields that set two of HAL's: node counts and GPU requests."""
    try:
        if name == "nodes":
            low, high = _nodes(value)
            out.fields["nodes_min"], out.fields["nodes_max"] = low, high
            out.sources["nodes_min"] = out.sources["nodes_max"] = "job.nodes"
            return
        gpu_type, count = _gpus(value, name)
        dest = {"tres_per_node": "gpus_per_node", "tres_per_job": "gpus"}.get(name, "gpus_per_task")
        out.fields[dest] = count
        out.sources[dest] = f"job.{name}"
        if gpu_type is not None:
            out.fields["gpu_type"] = gpu_type
            out.sources["gpu_type"] = f"job.{name}"
    except ValueError as err:
        out.refuse(name, f"expected {err}")
    except InvalidRequest as err:
        out.refuse(name, err.message)


def read_submit(body: object) -> tuple[JobSubmit | None, Parsed]:
    """``{"script", "job"}`` → a ``JobSubmit`` (None when ``errors`` has entries)."""
    out = Parsed()
    if not isinstance(body, dict):
        out.errors.append(error_entry(REST_FAIL_PARSING, "the body must be a JSON object"))
        return None, out
    for extra in sorted(set(body) - {"script", "job", "jobs"}):
        out.errors.append(
            error_entry(REST_FAIL_PARSING, f"{extra}: unknown field of the submission", extra)
        )
    if "jobs" in body:
        out.errors.append(
            error_entry(
                REST_FAIL_PARSING,
                "jobs: heterogeneous jobs are not supported by the facade; submit them "
                "with HAL's POST /v1/jobs/het",
                "jobs",
            )
        )
    job = body.get("job")
    if not isinstance(job, dict):
        out.errors.append(error_entry(REST_FAIL_PARSING, "job: a job_desc_msg object", "job"))
        return None, out
    _read(job, SUBMIT, out)
    script = body.get("script")
    if script is not None and not isinstance(script, str):
        out.errors.append(error_entry(REST_FAIL_PARSING, "script: expected a string", "script"))
    elif isinstance(script, str) and script:
        out.fields["script"] = script
        out.sources["script"] = "script"
    if "script" not in out.fields:
        out.errors.append(
            error_entry(
                JOB_SCRIPT_MISSING, "script: the batch script is missing or empty", "script"
            )
        )
    if out.errors:
        return None, out
    try:
        return validate(JobSubmit, out.fields), out
    except ValidationError as err:
        _refuse_invalid(err, out)
        return None, out


def _refuse_invalid(err: ValidationError, out: Parsed) -> None:
    """HAL's wire bounds (``POST /v1/jobs``'s: ``tasks`` 1 or more, ``nice`` within
    ±10000, names and paths of bounded length) refused a value: a 9001 entry naming the
    field the client sent, with pydantic's words, as ``/v1`` says them."""
    for problem in err.errors():
        dest = str(problem["loc"][0]) if problem["loc"] else ""
        if problem["type"] == "extra_forbidden":  # a bug: a table names a field JobSubmit lacks
            raise AssertionError(f"SUBMIT maps to an unknown JobSubmit field: {dest}") from err
        source = out.sources.get(dest, f"job.{dest}")
        entry = error_entry(REST_FAIL_PARSING, f"{source}: {problem['msg']}", source)
        if entry not in out.errors:  # ``nodes: 0`` is both HAL's minimum and maximum
            out.errors.append(entry)


def read_update(body: object) -> Parsed:
    """A ``job_desc_msg`` of ``POST /job/{id}`` → ``JobUpdate``'s fields (and ``hold``)."""
    out = Parsed()
    if not isinstance(body, dict):
        out.errors.append(error_entry(REST_FAIL_PARSING, "the body must be a job_desc_msg"))
        return out
    desc = {k: v for k, v in body.items() if k != "job_id"}  # the path names the job
    _read(desc, UPDATE, out)
    return out
