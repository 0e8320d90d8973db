"""``scontrol update PartitionName=P Key=Value ...`` (administrators): a partition's
State, MaxTime, DefaultTime, MaxNodes, PriorityJobFactor, PriorityTier and Default while
the server runs (``PATCH /v1/partitions/{name}``, ``hal.state.partitions``).

As Slurm 22.05.8 (docs/slurm-checks.md): keys and State values in any case,
a State abbreviated (``d`` is DOWN, ``dra`` DRAIN, ``inact`` INACTIVE), silent on
success. Where the peer takes a value HAL reads otherwise, HAL refuses it and says what
to write: ``MaxTime=0`` and ``MaxNodes=0`` (Slurm's zero lets no job run; HAL's 0 is
"unlimited", so write UNLIMITED), a DefaultTime above MaxTime (the peer answers rc 0 and
keeps the old one). Nodes= and the other keys stay hal.toml's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hal.compat.seam import Console
from hal.compat.time_limits import command_time_limit
from hal.core.errors import InvalidRequest, PermissionDenied, UnsupportedOption
from hal.wire.nodes import PartitionChange

STATES = ("UP", "DOWN", "DRAIN", "INACTIVE")  # Slurm's order: ``d`` is DOWN
UPDATABLE = "State, MaxTime, DefaultTime, MaxNodes, PriorityJobFactor, PriorityTier, Default"
_UNLIMITED = ("unlimited", "infinite", "-1")
_PRIORITY_MAX = 65533  # Slurm 22.05.8 refuses 65534 and more
_KEY = re.compile(r"^([A-Za-z]+)=(.*)$")


def is_partition_update(args: list[str]) -> bool:
    """``PartitionName=P ...`` (or ``Partition=P`` first, as Slurm takes it)."""
    return bool(args) and args[0].lower().startswith(("partitionname=", "partition="))


def update_partition(args: list[str], console: Console) -> int:
    name, change = parse_update(args, console.environ)
    try:
        console.client.update_partition(name, change)
    except PermissionDenied as err:
        # Slurm's words for a user who is not an administrator, then why
        console.err(f"slurm_update error: Invalid user id ({err.message})")
        return 1
    return 0


def parse_update(args: list[str], environ: Mapping[str, str]) -> tuple[str, PartitionChange]:
    """The partition ``args`` name and the change they ask for; a mistake raises
    ``InvalidRequest`` naming the key and what to write."""
    name = ""
    fields: dict[str, object] = {}
    for word in args:
        m = _KEY.match(word)
        if not m:
            raise InvalidRequest(
                f"cannot read {word!r}; write Key=Value (e.g. PartitionName=debug State=DOWN)"
            )
        key, value = m.group(1), m.group(2)
        lower = key.lower()
        if lower in ("partitionname", "partition"):
            name = value
        elif lower == "state":
            fields["state"] = _state(value)
        elif lower in ("maxtime", "defaulttime"):
            field = "max_time_seconds" if lower == "maxtime" else "default_time_seconds"
            fields[field] = _time(key, value, environ)
        elif lower == "maxnodes":
            fields["max_nodes"] = _max_nodes(value)
        elif lower in ("priorityjobfactor", "prioritytier"):
            field = "priority_job_factor" if lower == "priorityjobfactor" else "priority_tier"
            fields[field] = _priority(key, value)
        elif lower == "default":
            fields["default"] = _yes_no(key, value)
        else:
            raise UnsupportedOption(
                f"Update of this parameter is not supported: {word}. HAL updates a "
                f"partition's {UPDATABLE}; its Nodes= and other keys are hal.toml's "
                "[[partitions]]: edit the file, then run scontrol reconfigure"
            )
    if not name:
        raise InvalidRequest("give the partition: scontrol update PartitionName=NAME State=DOWN")
    if not fields:
        raise InvalidRequest(f"No changes specified: give one of {UPDATABLE} (e.g. State=DOWN)")
    return name, PartitionChange.model_validate(fields)


def _state(value: str) -> str:
    upper = value.strip().upper()
    for state in STATES:
        if upper and state.startswith(upper):
            return state
    raise InvalidRequest(
        f"Invalid input: State={value}: Acceptable State values are UP, DOWN, DRAIN and "
        "INACTIVE (DRAIN: no new jobs, the queued ones still start; INACTIVE: neither)"
    )


def _time(key: str, value: str, environ: Mapping[str, str]) -> int:
    seconds = command_time_limit(value, environ, field=key)
    if seconds == 0 and value.strip().lower() not in _UNLIMITED:
        raise InvalidRequest(
            f"{key}=0 would let no job run (as in Slurm); write {key}=UNLIMITED for no "
            f"limit, or a time such as {key}=1-00:00:00"
        )
    return seconds


def _max_nodes(value: str) -> int:
    text = value.strip().lower()
    if text in _UNLIMITED:
        return 0
    if not text.isdigit() or int(text) == 0:
        raise InvalidRequest(
            f'Invalid numeric value "{value}" for MaxNodes: write a count of 1 or more, '
            "or MaxNodes=UNLIMITED"
        )
    return int(text)


def _priority(key: str, value: str) -> int:
    text = value.strip()
    if not text.isdigit() or int(text) > _PRIORITY_MAX:
        raise InvalidRequest(f"Invalid {key} value: {value}: write 0 to {_PRIORITY_MAX}")
    return int(text)


def _yes_no(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text not in ("yes", "no"):
        raise InvalidRequest(f"Invalid input: {key}={value}: write {key}=YES or {key}=NO")
    return text == "yes"
