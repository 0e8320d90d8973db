"""``scontrol create|show|update|delete reservation``: Slurm's ``Key=Value`` words in,
Slurm's record and error lines out. Times are read here (``now+1hour``,
``2026-11-22T10:00:00``, ``Duration=2:00:00``, ``Flags=PURGE_COMP=5``) so the REST API
carries plain Unix seconds."""

from __future__ import annotations

import re

from hal.compat.formats import duration_long, timestamp
from hal.compat.seam import Console
from hal.core.errors import Conflict, HalError, InvalidRequest, NotFound
from hal.slurm.syntax import (
    compress_hostlist,
    expand_hostlist,
    parse_begin,
    parse_time_limit,
    whole_minutes,
)
from hal.wire.reservations import ReservationCreate, ReservationInfo, ReservationUpdate

KEYS = (
    "ReservationName, StartTime, EndTime, Duration, Nodes, NodeCnt, Users, Accounts, "
    "Flags, PartitionName"
)
_KEY = re.compile(r"^([A-Za-z]+)([+-]?)=(.*)$")
UNLIMITED_S = 365 * 86_400.0  # Duration=UNLIMITED / infinite: Slurm makes it a year
INVALID = "Requested reservation is invalid"
BUSY = "Requested nodes are busy"
# what scontrol 22.05.8 prints on stdout after a refused create
CREATE_NOTES = (
    "Note, unless nodes are directly requested a reservation must exist in a single partition.",
    "If no partition is requested the default partition is assumed.",
)
_ALIASES = {
    "reservationname": "name",
    "reservation": "name",
    "starttime": "start",
    "endtime": "end",
    "duration": "duration",
    "nodes": "nodes",
    "nodelist": "nodes",
    "nodecnt": "node_count",
    "nodecount": "node_count",
    "users": "users",
    "user": "users",
    "accounts": "accounts",
    "account": "accounts",
    "flags": "flags",
    "partitionname": "partition",
    "partition": "partition",
}


def parse_words(words: list[str], now: float) -> dict[str, object]:
    """``Key=Value`` words → the wire fields they set (``name`` among them)."""
    fields: dict[str, object] = {}
    for word in words:
        m = _KEY.match(word)
        if not m:
            raise InvalidRequest(
                f"cannot read {word!r}; write Key=Value (e.g. Duration=2:00:00); keys: {KEYS}"
            )
        key, sign, value = m.group(1), m.group(2), m.group(3).strip()
        dest = _ALIASES.get(key.lower())
        if dest is None:
            raise InvalidRequest(f"HAL does not support reservation key {key}; it knows {KEYS}")
        if dest in ("users", "accounts", "flags") and (
            sign or any(item.strip().startswith(("-", "+")) for item in value.split(","))
        ):
            # Slurm's forms that add, remove or deny names: taken as names, they would
            # silently replace the whole list (``Users=-bob`` for a user "-bob")
            raise InvalidRequest(
                f"HAL does not support adding, removing or denying with {word!r}: give the "
                f"whole list, e.g. {key}=a,b (`scontrol show reservation` shows the current one)"
            )
        if dest == "name":
            fields["name"] = value
        elif dest in ("start", "end"):
            fields[dest + "_time"] = parse_begin(value, now, field=key)
        elif dest == "duration":
            fields["duration_seconds"] = _duration(value)
        elif dest == "nodes":
            fields["nodes"] = expand_hostlist(value, field="Nodes") if value else []
        elif dest == "node_count":
            if not value.isdigit() or int(value) < 1:
                raise InvalidRequest(f"NodeCnt needs a positive integer, got {value!r}")
            fields["node_count"] = int(value)
        elif dest == "partition":
            fields["partition"] = value
        elif dest == "flags":
            fields["flags"] = [_flag(item.strip()) for item in value.split(",") if item.strip()]
        else:  # users, accounts: comma-separated lists
            fields[dest] = [item.strip() for item in value.split(",") if item.strip()]
    return fields


def _duration(value: str) -> float:
    if value.lower() in ("unlimited", "infinite"):
        return UNLIMITED_S
    seconds = whole_minutes(parse_time_limit(value, field="Duration", unlimited=False))
    if seconds <= 0:
        raise InvalidRequest("Duration must be a positive time, e.g. Duration=2:00:00")
    return float(seconds)


def _flag(word: str) -> str:
    """``PURGE_COMP=00:05:00`` (Slurm's time forms; ``5``: minutes) → ``PURGE_COMP=300``."""
    name, sep, value = word.partition("=")
    if not sep or name.upper() != "PURGE_COMP":
        return word
    seconds = whole_minutes(parse_time_limit(value, field="PURGE_COMP", unlimited=False))
    if seconds <= 0:
        raise InvalidRequest("PURGE_COMP needs a positive time, e.g. PURGE_COMP=00:05:00")
    return f"PURGE_COMP={seconds}"


def create_body(words: list[str], now: float) -> ReservationCreate:
    fields = parse_words(words, now)  # (no name: the server makes one, as slurmctld)
    try:
        return ReservationCreate.model_validate(fields)
    except ValueError as err:
        raise InvalidRequest(f"invalid reservation: {err}") from None


def update_body(words: list[str], now: float) -> tuple[str, ReservationUpdate]:
    fields = parse_words(words, now)
    name = fields.pop("name", None)
    if not isinstance(name, str) or not name:
        raise InvalidRequest("say which reservation: scontrol update ReservationName=NAME ...")
    if not fields:
        raise InvalidRequest(f"nothing to update; give Key=Value pairs among {KEYS}")
    try:
        return name, ReservationUpdate.model_validate(fields)
    except ValueError as err:
        raise InvalidRequest(f"invalid update: {err}") from None


def reservation_record(r: ReservationInfo) -> list[str]:
    """A reservation as ``scontrol show reservation`` prints it, one item per line."""
    nodes = compress_hostlist(r.nodes) if r.nodes else "(null)"
    flags = ",".join(_shown_flag(f) for f in r.flags) or "(null)"
    return [
        f"ReservationName={r.name} StartTime={timestamp(r.start_time)} "
        f"EndTime={timestamp(r.end_time)} Duration={duration_long(r.duration_seconds)}",
        f"Nodes={nodes} NodeCnt={r.node_count} CoreCnt={r.core_count} Features=(null) "
        f"PartitionName={r.partition or '(null)'} Flags={flags}",
        f"TRES=cpu={r.core_count}",
        f"Users={','.join(r.users) or '(null)'} Groups=(null) "
        f"Accounts={','.join(r.accounts) or '(null)'} Licenses=(null) State={r.state} "
        "BurstBuffer=(null) Watts=n/a",
        "MaxStartDelay=(null)",
    ]


def _shown_flag(word: str) -> str:
    name, sep, seconds = word.partition("=")
    return f"{name}={duration_long(float(seconds))}" if sep else word


# -- Slurm's words for a refusal -----------------------------------------------------------


def create_refused(err: HalError, console: Console) -> int:
    """Busy nodes as scontrol 22.05.8 says it (the error, then its notes on stdout);
    anything else is raised again for scontrol's usual ``scontrol: error:`` line."""
    if not (isinstance(err, Conflict) and err.message.startswith(BUSY)):
        raise err
    console.err(f"Error creating the reservation: {err.message}")
    for line in CREATE_NOTES:
        console.out(line)
    return 1


def update_refused(err: HalError, console: Console) -> int:
    """An unknown reservation in Slurm's two lines; anything else is raised again."""
    if not isinstance(err, NotFound):
        raise err
    console.err(f"Error updating the reservation: {INVALID}")
    console.err(f"slurm_update error: {INVALID}")
    return 1


def delete_refused(err: HalError, word: str, console: Console) -> int:
    """``delete_reservation <word as typed>: <why>``: Slurm's words for an unknown
    reservation, the server's (Slurm's, then what to do) for one in use."""
    if isinstance(err, NotFound):
        console.err(f"delete_reservation {word}: {INVALID}")
    elif isinstance(err, Conflict):
        console.err(f"delete_reservation {word}: {err.message}")
    else:
        raise err
    return 1
