"""``scontrol create|show|update|delete reservation``: Slurm's ``Key=Value`` words in,
Slurm's record out. Times are read here (``now+1hour``, ``2026-11-22T10:00:00``,
``Duration=2:00:00``) so the REST API carries plain Unix seconds."""

from __future__ import annotations

import re

from hal.compat.formats import duration_long, timestamp
from hal.core.errors import InvalidRequest
from hal.core.slurm_syntax import (
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
            seconds = whole_minutes(parse_time_limit(value, field="Duration", unlimited=False))
            if seconds <= 0:
                raise InvalidRequest("Duration must be a positive time, e.g. Duration=2:00:00")
            fields["duration_seconds"] = float(seconds)
        elif dest == "nodes":
            fields["nodes"] = expand_hostlist(value, field="Nodes") if value else []
        elif dest == "node_count":
            if not value.isdigit() or int(value) < 1:
                raise InvalidRequest(f"NodeCnt needs a positive integer, got {value!r}")
            fields["node_count"] = int(value)
        elif dest == "partition":
            fields["partition"] = value
        else:  # users, accounts, flags: comma-separated lists
            fields[dest] = [item.strip() for item in value.split(",") if item.strip()]
    return fields


def create_body(words: list[str], now: float) -> ReservationCreate:
    fields = parse_words(words, now)
    if "name" not in fields:
        raise InvalidRequest("give the reservation a name: ReservationName=NAME")
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
    return [
        f"ReservationName={r.name} StartTime={timestamp(r.start_time)} "
        f"EndTime={timestamp(r.end_time)} Duration={duration_long(r.duration_seconds)}",
        f"Nodes={nodes} NodeCnt={r.node_count} CoreCnt={r.core_count} Features=(null) "
        f"PartitionName={r.partition or '(null)'} Flags={','.join(r.flags) or '(null)'}",
        f"TRES=cpu={r.core_count}",
        f"Users={','.join(r.users) or '(null)'} Groups=(null) "
        f"Accounts={','.join(r.accounts) or '(null)'} Licenses=(null) State={r.state} "
        "BurstBuffer=(null)",
        "MaxStartDelay=(null)",
    ]
