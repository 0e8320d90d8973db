"""``hal data``: job inputs in the HAL cache, through the server's data service.

``hal data locate KEY``: which cache instances hold the key, and for each HAL node the
bytes its leaf cache already has and the estimated time to bring the rest::

    key dataset:imagenet:shard-07  size 1.0 GB
    holders: rack1 (1.0 GB), node003 (1.0 GB)
    NODE      CACHE     LOCAL     MOVED     TIME      SOURCE
    node001   node001   0 B       1.0 GB    0.80 s    rack1
    node003   node003   1.0 GB    0 B       0 s       node003 (local)

``hal data stage KEY[,KEY] --node N``: pull the keys into node N's leaf cache now (what the
scheduler does ahead of a job's start). ``hal data status``: the data view's age and the
pre-staging counts.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from contextlib import closing
from typing import Any
from urllib.parse import quote

from hal.client import HalClient


class DataClient(HalClient):
    """``/v1/data`` calls (plain JSON: the CLI needs no schema classes for three tables)."""

    def data_locate(self, key: str) -> dict[str, Any]:
        r = self._request("GET", f"/v1/data/locate/{quote(key, safe='')}")
        out: dict[str, Any] = self._json(r)
        return out

    def data_stage(self, keys: list[str], node: str) -> dict[str, Any]:
        r = self._request("POST", "/v1/data/stage", json_body={"keys": keys, "node": node})
        out: dict[str, Any] = self._json(r)
        return out

    def data_status(self) -> dict[str, Any]:
        out: dict[str, Any] = self._json(self._request("GET", "/v1/data/status"))
        return out


def add_commands(sub: Any) -> None:
    data = sub.add_parser("data", help="job inputs in the HAL cache: locate, stage, status")
    dsub = data.add_subparsers(metavar="ACTION")
    p = dsub.add_parser("locate", help="holders of a cache key and each node's estimated transfer")
    p.add_argument("key", metavar="KEY")
    p.add_argument("--json", action="store_true", help="print the REST object unchanged")
    p.set_defaults(func=cmd_locate)
    p = dsub.add_parser("stage", help="pull cache keys into a node's leaf cache now")
    p.add_argument("keys", metavar="KEY[,KEY...]")
    p.add_argument("--node", "-w", required=True, metavar="NODE", help="the HAL node")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stage)
    p = dsub.add_parser("status", help="the server's data view: age, staleness, pre-staging")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)


def cmd_locate(ns: argparse.Namespace) -> int:
    from hal.core.data import parse_data_keys

    parse_data_keys([ns.key], field_name="key")  # refused here, not by the request's encoder
    with closing(DataClient()) as hal:
        found = hal.data_locate(ns.key)
    if ns.json:
        print(json.dumps(found, indent=2))
        return 0
    print(draw_locate(found), end="")
    return 0


def cmd_stage(ns: argparse.Namespace) -> int:
    from hal.core.data import parse_data_keys

    keys = list(parse_data_keys(ns.keys, field_name="keys"))
    with closing(DataClient()) as hal:
        done = hal.data_stage(keys, ns.node)
    if ns.json:
        print(json.dumps(done, indent=2))
        return 0
    held = set(done["held"])
    print(
        f"{ns.node} ({done['cache']} at {done['address']}): "
        f"{len(held)}/{len(done['keys'])} keys held"
    )
    for key in done["keys"]:
        print(f"  {key}  {'held' if key in held else 'not found in the cache'}")
    return 0 if len(held) == len(done["keys"]) else 1


def cmd_status(ns: argparse.Namespace) -> int:
    with closing(DataClient()) as hal:
        st = hal.data_status()
    if ns.json:
        print(json.dumps(st, indent=2))
        return 0
    state = "STALE" if st["stale"] else "fresh"
    age = st["view_age_seconds"]
    print(f"cache control plane {st['cache_url']}: view {state}, {age:.1f} s old")
    if st["last_error"]:
        print(f"last error: {st['last_error']}")
    print(
        f"instances {st['instances']}  keys tracked {st['keys']}  "
        f"nodes with a cache {st['nodes_with_cache']}"
    )
    counts = ", ".join(f"{k} {v}" for k, v in sorted(st["prestage"].items()))
    print(f"pre-staging: {counts}; {size(st['bytes_staged'])} staged")
    if st.get("caches"):
        print(draw_caches(st["caches"]), end="")
    return 0


def draw_caches(caches: list[dict[str, Any]]) -> str:
    """Each cache node's reads: hits, misses, hit ratio, bytes pulled in by source."""
    rows = [("CACHE", "TIER", "HITS", "MISSES", "HIT%", "SERVED", "FROM PARENT", "FROM PEER")]
    for c in caches:
        ratio = c["hit_ratio"]
        rows.append(
            (
                c["instance"],
                c["tier"] or "-",
                str(c["hits"]),
                str(c["misses"]),
                "-" if ratio is None else f"{ratio * 100:.1f}",
                size(c["bytes_served"]),
                size(c["bytes_moved"].get("parent", 0)),
                size(c["bytes_moved"].get("peer", 0)),
            )
        )
    return "".join(line + "\n" for line in table(rows))


def size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover


def seconds(s: float) -> str:
    if s == 0:
        return "0 s"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def draw_locate(found: dict[str, Any]) -> str:
    lines = [f"key {found['key']}  size {size(found['size_bytes'])}"]
    holders = found["holders"]
    if holders:
        lines.append(
            "holders: " + ", ".join(f"{h['instance']} ({size(h['size_bytes'])})" for h in holders)
        )
    else:
        lines.append("holders: none (no cache holds the key; nodes read it from the origin)")
    if not found["fresh"]:
        lines.append(
            f"(the cache control plane did not answer: last view, "
            f"{found['view_age_seconds']:.0f} s old)"
        )
    rows = [("NODE", "CACHE", "LOCAL", "MOVED", "TIME", "SOURCE")]
    for n in found["nodes"]:
        local = n["source"] is not None and n["source"] == n["cache"]
        source = f"{n['source']} (local)" if local else (n["source"] or "origin")
        rows.append(
            (
                n["node"],
                n["cache"] or "-",
                size(n["local_bytes"]),
                size(n["moved_bytes"]),
                seconds(n["seconds"]),
                source,
            )
        )
    lines.extend(table(rows))
    return "\n".join(lines) + "\n"


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart (the last one not padded)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in rows
    ]
