"""The control plane's edge: JSON bodies and query strings in, domain values out, and back.

Validation is hand-written rather than schema-driven so that every rule of the contract is
visible in one place and every failure names the field (the HAL cache API's 400 body is
``{code, message, details}``). Nothing here touches state.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from typing import Any

from hal.cache.contentmap import Entry
from hal.cache.directory import EventItem, Holder, InventoryPart
from hal.cache.errors import CacheBadRequest
from hal.cache.registry import TIERS, Instance, LinkMetrics

# the contract's pattern is ECMA-262, where "$" is the very end; Python's "$" also matches
# before a final newline, so the check is a fullmatch instead
ID_PATTERN = re.compile(r"[a-zA-Z0-9_-]+")
EVENT_TYPES = ("key_added", "key_updated", "key_evicted")
MAX_BATCH = 10_000
MAX_LIMIT = 10_000
# the store's instance id column is VARCHAR(255): longer ids would fail every commit on PostgreSQL
MAX_ID_LENGTH = 255
INT64 = 2**63
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})?",
    re.ASCII,
)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


def check_id(value: str, name: str = "id") -> str:
    if not ID_PATTERN.fullmatch(value):
        raise CacheBadRequest(f"{name} {value!r} must match ^[a-zA-Z0-9_-]+$", field=name)
    return value


def _no_constant(name: str) -> Any:
    # Python reads NaN and Infinity, JSON has neither (and they could not be written back)
    raise ValueError(f"{name} is not a JSON value")


def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise CacheBadRequest("a JSON object body is required")
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as err:
        raise CacheBadRequest(f"the body is not valid JSON: {err}") from err
    except RecursionError as err:
        raise CacheBadRequest("the body is nested too deeply") from err
    if not isinstance(body, dict):
        raise CacheBadRequest("the body must be a JSON object")
    return body


# -- field readers -----------------------------------------------------------------------


def _null(obj: dict[str, Any], name: str, where: str) -> None:
    # the contract's optional fields are typed, not nullable: an explicit null is a mistake
    if name in obj and obj[name] is None:
        raise CacheBadRequest(
            f"{where}{name} must not be null (leave it out instead)", field=where + name
        )


def _str(obj: dict[str, Any], name: str, *, required: bool = False, where: str = "") -> str | None:
    _null(obj, name, where)
    value = obj.get(name)
    if value is None:
        if required:
            raise CacheBadRequest(f"{where}{name} is required", field=where + name)
        return None
    if not isinstance(value, str):
        raise CacheBadRequest(f"{where}{name} must be a string", field=where + name)
    return value


def _int(obj: dict[str, Any], name: str, *, where: str = "", int64: bool = True) -> int | None:
    _null(obj, name, where)
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CacheBadRequest(f"{where}{name} must be an integer", field=where + name)
    if int64 and not -INT64 <= value < INT64:
        raise CacheBadRequest(f"{where}{name} does not fit in 64 bits", field=where + name)
    return value


def _size(obj: dict[str, Any], name: str, *, where: str = "") -> int | None:
    # the contract allows any int64; a negative size is kept as sent rather than refused
    return _int(obj, name, where=where)


def _float(obj: dict[str, Any], name: str, *, where: str = "") -> float | None:
    _null(obj, name, where)
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CacheBadRequest(f"{where}{name} must be a number", field=where + name)
    try:
        number = float(value)
    except OverflowError as err:
        raise CacheBadRequest(f"{where}{name} is too large", field=where + name) from err
    if not math.isfinite(number):
        # json reads a decimal past the float range (1e400) as inf, which is not JSON
        raise CacheBadRequest(f"{where}{name} is too large", field=where + name)
    return number


def _bool(obj: dict[str, Any], name: str) -> bool | None:
    _null(obj, name, "")
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise CacheBadRequest(f"{name} must be true or false", field=name)
    return value


def parse_timestamp(value: str, field: str) -> float:
    """RFC 3339 date-time: ``Z`` or an offset, any fraction digits; no zone means UTC.
    The instant must fall in the years 1 to 9999 in UTC, or it could not be shown back."""
    m = _RFC3339.fullmatch(value)
    if m is None:
        raise CacheBadRequest(f"{field} {value!r} is not an RFC 3339 date-time", field=field)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac = m.group(7)
    micros = int((frac[1:] + "000000")[:6]) if frac else 0
    zone = m.group(8)
    try:
        tz = dt.UTC
        if zone and zone not in ("Z", "z"):
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            hours, minutes = int(digits[:2]), int(digits[2:])
            if hours > 23 or minutes > 59:
                raise ValueError("the UTC offset must be at most 23:59")
            tz = dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))
        if second > 60:
            raise ValueError("second must be in 0..60")
        # a leap second (":60") is valid RFC 3339; fold it into the last second
        when = dt.datetime(year, month, day, hour, minute, min(second, 59), micros, tzinfo=tz)
        when = when.astimezone(dt.UTC)
    except (ValueError, OverflowError) as err:
        raise CacheBadRequest(
            f"{field} {value!r} is not a valid date-time: {err}", field=field
        ) from err
    return when.timestamp()


# Times are kept as float seconds, which near the year 9999 are only ~30 µs apart: the last
# instants of 9999 (23:59:59.99999 and later) round up to a float in the year 10000, where
# datetime ends. This is the last float time that can still be shown.
_LAST_SHOWABLE = math.nextafter(dt.datetime.max.replace(tzinfo=dt.UTC).timestamp(), 0.0)


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    when = dt.datetime.fromtimestamp(min(ts, _LAST_SHOWABLE), dt.UTC)
    return when.isoformat().replace("+00:00", "Z")


# -- requests ----------------------------------------------------------------------------


def register_request(instance_id: str, body: dict[str, Any]) -> Instance:
    if len(instance_id) > MAX_ID_LENGTH:
        raise CacheBadRequest(
            f"id is {len(instance_id)} characters long; at most {MAX_ID_LENGTH} are allowed",
            field="id",
        )
    address = _str(body, "address", required=True)
    tier = _str(body, "tier", required=True)
    if tier not in TIERS:
        raise CacheBadRequest(f"tier {tier!r} must be one of root, branch, leaf", field="tier")
    parent = _str(body, "parentId")
    if parent == instance_id:
        raise CacheBadRequest("an instance cannot be its own parent", field="parentId")
    _null(body, "metadata", "")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise CacheBadRequest("metadata must be an object", field="metadata")
    return Instance(
        id=instance_id,
        address=address or "",
        tier=tier,
        region=_str(body, "region"),
        parent_id=parent,
        max_size=_size(body, "maxSize"),
        metadata=metadata or {},
    )


def heartbeat_request(
    body: dict[str, Any],
) -> tuple[float | None, bool | None, dict[str, Any] | None]:
    """hitRate, healthy, and HAL nodes' ``halStats`` extension (``hal.cache.nodestats``)."""
    _int(body, "keyCount", int64=False)
    _int(body, "totalSize")
    for name in ("cpuUsage", "memoryUsage"):
        _float(body, name)
    return _float(body, "hitRate"), _bool(body, "healthy"), _hal_stats(body)


_STAT_COUNTS = ("hits", "misses", "missesNotFound", "bytesServed", "evictions", "expirations")
_STAT_SOURCES = ("pulls", "bytesPulled")


def _hal_stats(body: dict[str, Any]) -> dict[str, Any] | None:
    """Counters only: non-negative integers, ``pulls``/``bytesPulled`` by source."""
    _null(body, "halStats", "")
    stats = body.get("halStats")
    if stats is None:
        return None
    if not isinstance(stats, dict):
        raise CacheBadRequest("halStats must be an object", field="halStats")
    out: dict[str, Any] = {name: _count(stats, name, "halStats.") for name in _STAT_COUNTS}
    for name in _STAT_SOURCES:
        by_source = stats.get(name, {})
        if not isinstance(by_source, dict):
            raise CacheBadRequest(
                f"halStats.{name} must be an object of counts by source", field=f"halStats.{name}"
            )
        out[name] = {str(k): _count(by_source, k, f"halStats.{name}.") for k in by_source}
    return out


def _count(obj: dict[str, Any], name: str, where: str) -> int:
    value = _int(obj, name, where=where)
    if value is None:
        return 0
    if value < 0:
        raise CacheBadRequest(f"{where}{name} must not be negative", field=where + name)
    return value


def inventory_request(
    body: dict[str, Any],
) -> tuple[bool, list[tuple[str, int, float | None]], InventoryPart | None]:
    _null(body, "mode", "")
    mode = body.get("mode", "partial")
    if mode not in ("full", "partial"):
        raise CacheBadRequest(f"mode {mode!r} must be full or partial", field="mode")
    part = _inventory_part(body)
    if part is not None and mode == "full":
        raise CacheBadRequest(
            "a part of a full inventory in several requests is sent as mode partial "
            "(halInventory.last completes it)",
            field="mode",
        )
    keys = body.get("keys")
    if not isinstance(keys, list):
        raise CacheBadRequest("keys is required and must be an array", field="keys")
    out: list[tuple[str, int, float | None]] = []
    for i, item in enumerate(keys):
        where = f"keys[{i}]."
        if not isinstance(item, dict):
            raise CacheBadRequest(f"keys[{i}] must be an object", field=f"keys[{i}]")
        key = _str(item, "key", required=True, where=where)
        size = _size(item, "size", where=where)
        if size is None:
            raise CacheBadRequest(f"{where}size is required", field=where + "size")
        accessed = _str(item, "lastAccessed", where=where)
        when = None if accessed is None else parse_timestamp(accessed, where + "lastAccessed")
        out.append((key or "", size, when))
    return mode == "full", out, part


def _inventory_part(body: dict[str, Any]) -> InventoryPart | None:
    """HAL nodes' ``halInventory`` extension (``hal.cache.directory.InventoryPart``):
    ``{syncId, part, last}``, one part of a full inventory sent in several requests."""
    _null(body, "halInventory", "")
    raw = body.get("halInventory")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise CacheBadRequest("halInventory must be an object", field="halInventory")
    where = "halInventory."
    sync_id = _str(raw, "syncId", required=True, where=where) or ""
    if not 0 < len(sync_id) <= MAX_ID_LENGTH:
        raise CacheBadRequest(
            f"halInventory.syncId must be 1 to {MAX_ID_LENGTH} characters long",
            field="halInventory.syncId",
        )
    index = _int(raw, "part", where=where)
    if index is None or index < 0:
        raise CacheBadRequest(
            "halInventory.part is required: the part's number, from 0", field="halInventory.part"
        )
    _null(raw, "last", where)
    last = raw.get("last", False)
    if not isinstance(last, bool):
        raise CacheBadRequest("halInventory.last must be true or false", field="halInventory.last")
    return InventoryPart(sync_id, index, last)


def _event_item(item: Any, where: str) -> EventItem:
    if not isinstance(item, dict):
        raise CacheBadRequest(f"{where.rstrip('.')} must be an object", field=where.rstrip("."))
    etype = _str(item, "eventType", required=True, where=where)
    if etype not in EVENT_TYPES:
        raise CacheBadRequest(
            f"{where}eventType {etype!r} must be one of " + ", ".join(EVENT_TYPES),
            field=where + "eventType",
        )
    stamp = _str(item, "timestamp", required=True, where=where) or ""
    key = _str(item, "key", required=True, where=where) or ""
    return EventItem(
        event_type=etype,
        timestamp=parse_timestamp(stamp, where + "timestamp"),
        key=key,
        size=_size(item, "size", where=where) or 0,
        source=_str(item, "sourceInstanceId", where=where),
        retrieval_ms=_float(item, "retrievalTimeMs", where=where),
    )


def event_request(body: dict[str, Any]) -> tuple[str, EventItem]:
    instance_id = _str(body, "instanceId", required=True) or ""
    return instance_id, _event_item(body, "")


def batch_request(body: dict[str, Any]) -> tuple[str, list[EventItem]]:
    instance_id = _str(body, "instanceId", required=True) or ""
    events = body.get("events")
    if not isinstance(events, list):
        raise CacheBadRequest("events is required and must be an array", field="events")
    if not 1 <= len(events) <= MAX_BATCH:
        raise CacheBadRequest(
            f"a batch holds 1 to {MAX_BATCH} events, not {len(events)}; split it", field="events"
        )
    return instance_id, [_event_item(e, f"events[{i}].") for i, e in enumerate(events)]


def limit_param(raw: str | None) -> int:
    if raw is None:
        return 1000
    try:
        if not _INTEGER.fullmatch(raw):
            raise ValueError(raw)
        value = int(raw)
    except ValueError as err:
        raise CacheBadRequest(f"limit {raw!r} must be an integer", field="limit") from err
    if value > MAX_LIMIT:
        raise CacheBadRequest(f"limit {value} exceeds the maximum of {MAX_LIMIT}", field="limit")
    # the contract sets no minimum: zero or less asks for an empty page
    return max(0, value)


# -- responses ---------------------------------------------------------------------------


def finite(x: float) -> float:
    """JSON has no Infinity: sums of huge link metrics stop at the largest float."""
    return x if math.isfinite(x) else sys.float_info.max


def proximity(m: LinkMetrics | None) -> dict[str, float]:
    if m is None:
        return {}
    return {
        "latencyMs": finite(m.latency_ms),
        "bandwidthMbps": finite(m.bandwidth_mbps),
        "cost": finite(m.cost),
    }


def instance_json(inst: Instance, status: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": inst.id,
        "status": status,
        "address": inst.address,
        "tier": inst.tier,
    }
    if inst.region is not None:
        out["region"] = inst.region
    if inst.parent_id is not None:
        out["parentId"] = inst.parent_id
    if inst.last_heartbeat is not None:
        out["lastHeartbeat"] = iso(inst.last_heartbeat)
    if inst.hal_stats is not None:
        out["halStats"] = inst.hal_stats
    return out


def holder_json(h: Holder) -> dict[str, Any]:
    out: dict[str, Any] = {"instanceId": h.instance.id, "size": h.entry.size}
    if h.proximity is not None:
        out["proximity"] = proximity(h.proximity)
    return out


def key_json(key: str, entry: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "size": entry.size}
    if entry.last_accessed is not None:
        out["lastAccessed"] = iso(entry.last_accessed)
    return out
