"""The Redis commands a cache node answers, with Redis's replies and error texts.

Synchronous commands return encoded bytes at once. Commands that may wait (a GET miss pulls
through the tree; writes report their event before they acknowledge) are coroutines; the
connection runs them in order so pipelined replies stay in request order.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from hal.cache import resp
from hal.cache.values import POLICIES, OutOfMemory

if TYPE_CHECKING:
    from hal.cache.node import CacheNode, Connection

SyncCommand = Callable[["CacheNode", "Connection", list[bytes]], bytes]
AsyncCommand = Callable[["CacheNode", "Connection", list[bytes]], Awaitable[bytes]]

UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 1000**2,
    "mb": 1024**2,
    "g": 1000**3,
    "gb": 1024**3,
}
REDIS_VERSION = "7.0.0"


def wrong_args(name: bytes) -> bytes:
    return resp.error(
        f"ERR wrong number of arguments for '{name.decode(errors='replace').lower()}' command"
    )


def parse_int(raw: bytes) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None


NOT_INT = resp.error("ERR value is not an integer or out of range")
SYNTAX = resp.error("ERR syntax error")


def parse_memory(raw: str) -> int | None:
    text = raw.strip().lower()
    digits = text.rstrip("kmgb")
    unit = text[len(digits) :]
    if unit not in UNITS or not digits.isdigit():
        return None
    return int(digits) * UNITS[unit]


# -- connection and server --------------------------------------------------------------------


def cmd_ping(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) > 2:
        return wrong_args(args[0])
    return resp.bulk(args[1]) if len(args) == 2 else resp.PONG


def cmd_echo(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    return resp.bulk(args[1]) if len(args) == 2 else wrong_args(args[0])


def cmd_hello(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) >= 2:
        version = parse_int(args[1])
        if version not in (2, 3):
            return resp.error("NOPROTO unsupported protocol version")
        conn.resp3 = version == 3
        i = 2
        while i < len(args):
            opt = args[i].upper()
            if opt == b"AUTH" and i + 2 < len(args):
                i += 3
            elif opt == b"SETNAME" and i + 1 < len(args):
                conn.name = args[i + 1]
                i += 2
            else:
                return SYNTAX
    info = [
        (b"server", resp.bulk(b"redis")),
        (b"version", resp.bulk(REDIS_VERSION.encode())),
        (b"proto", resp.integer(3 if conn.resp3 else 2)),
        (b"id", resp.integer(conn.id)),
        (b"mode", resp.bulk(b"standalone")),
        (b"role", resp.bulk(b"master")),
        (b"modules", resp.EMPTY_ARRAY),
    ]
    return resp.mapping([(resp.bulk(k), v) for k, v in info], conn.resp3)


def cmd_client(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) < 2:
        return wrong_args(args[0])
    sub = args[1].upper()
    if sub == b"SETINFO":
        return resp.OK if len(args) == 4 else wrong_args(b"client|setinfo")
    if sub == b"SETNAME" and len(args) == 3:
        conn.name = args[2]
        return resp.OK
    if sub == b"GETNAME":
        return resp.bulk(conn.name) if conn.name else resp.nil(conn.resp3)
    if sub == b"ID":
        return resp.integer(conn.id)
    return resp.error(
        f"ERR unknown subcommand '{args[1].decode(errors='replace')}'. Try CLIENT HELP."
    )


def cmd_select(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) != 2:
        return wrong_args(args[0])
    index = parse_int(args[1])
    if index is None:
        return NOT_INT
    return resp.OK if index == 0 else resp.error("ERR DB index is out of range")


def cmd_quit(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    conn.closing = True
    return resp.OK


def cmd_command(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    # clients (redis-cli) probe COMMAND DOCS for hints; an empty answer is valid
    return (
        resp.mapping([], conn.resp3)
        if len(args) > 1 and args[1].upper() == b"DOCS"
        else resp.EMPTY_ARRAY
    )


def cmd_info(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    return resp.bulk(
        node.info_text(
            args[1].decode(errors="replace").lower() if len(args) > 1 else "default"
        ).encode()
    )


def cmd_dbsize(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    return resp.integer(len(node.store))


def cmd_config(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) < 2:
        return wrong_args(args[0])
    sub = args[1].upper()
    if sub == b"GET" and len(args) >= 3:
        params = node.config_params()
        found: dict[str, str] = {}
        for pattern in args[2:]:
            pat = pattern.decode(errors="replace").lower()
            for name, value in params.items():
                if fnmatch.fnmatchcase(name, pat):
                    found[name] = value
        pairs = [(resp.bulk(k.encode()), resp.bulk(v.encode())) for k, v in found.items()]
        return resp.mapping(pairs, conn.resp3)
    if sub == b"SET" and len(args) >= 4 and len(args) % 2 == 0:
        changes: dict[str, str] = {}
        for i in range(2, len(args), 2):
            name = args[i].decode(errors="replace").lower()
            value = args[i + 1].decode(errors="replace")
            if name == "maxmemory":
                if parse_memory(value) is None:
                    return resp.error(
                        "ERR CONFIG SET failed (possibly related to argument "
                        "'maxmemory') - argument must be a memory value"
                    )
            elif name == "maxmemory-policy":
                if value.lower() not in POLICIES:
                    return resp.error(
                        "ERR CONFIG SET failed (possibly related to argument "
                        "'maxmemory-policy') - argument(s) must be one of the "
                        "following: " + ", ".join(POLICIES)
                    )
            elif name not in node.config_params():
                return resp.error(
                    f"ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                )
            changes[name] = value
        node.configure(changes)
        return resp.OK
    if sub == b"RESETSTAT":
        node.reset_stats()
        return resp.OK
    return resp.error(
        f"ERR unknown subcommand '{args[1].decode(errors='replace')}'. Try CONFIG HELP."
    )


# -- keys ---------------------------------------------------------------------------------------


def cmd_exists(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) < 2:
        return wrong_args(args[0])
    # local only: EXISTS never pulls (behaviour sheet)
    return resp.integer(sum(1 for k in args[1:] if node.store.get(k) is not None))


def _ttl(node: CacheNode, conn: Connection, args: list[bytes], millis: bool) -> bytes:
    if len(args) != 2:
        return wrong_args(args[0])
    item = node.store.get(args[1])
    if item is None:
        return resp.integer(-2)
    ms = node.store.pttl(item)
    if ms < 0:
        return resp.integer(-1)
    return resp.integer(ms if millis else (ms + 500) // 1000)


def cmd_ttl(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    return _ttl(node, conn, args, millis=False)


def cmd_pttl(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    return _ttl(node, conn, args, millis=True)


def cmd_persist(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) != 2:
        return wrong_args(args[0])
    item = node.store.get(args[1])
    if item is None or item.deadline is None:
        return resp.integer(0)
    node.store.set_deadline(args[1], None)
    return resp.integer(1)


def cmd_keys(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) != 2:
        return wrong_args(args[0])
    pattern = args[1].decode("latin-1")
    keys = [
        k
        for k in list(node.store.items)
        if node.store.get(k) is not None and fnmatch.fnmatchcase(k.decode("latin-1"), pattern)
    ]
    return resp.array(resp.bulk(k) for k in keys)


async def cmd_get(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) != 2:
        return wrong_args(args[0])
    value = await node.read(args[1])
    return resp.nil(conn.resp3) if value is None else resp.bulk(node.served(value))


async def cmd_set(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) < 3:
        return wrong_args(args[0])
    key, value = args[1], args[2]
    deadline: float | None = None
    nx = xx = keep_ttl = get_old = False
    i = 3
    now = node.clock()
    while i < len(args):
        opt = args[i].upper()
        if (
            opt in (b"EX", b"PX", b"EXAT", b"PXAT")
            and i + 1 < len(args)
            and deadline is None
            and not keep_ttl
        ):
            n = parse_int(args[i + 1])
            if n is None:
                return NOT_INT
            if n <= 0:
                return resp.error("ERR invalid expire time in 'set' command")
            deadline = {
                b"EX": now + n,
                b"PX": now + n / 1000,
                b"EXAT": float(n),
                b"PXAT": n / 1000,
            }[opt]
            i += 2
        elif opt == b"NX" and not xx:
            nx, i = True, i + 1
        elif opt == b"XX" and not nx:
            xx, i = True, i + 1
        elif opt == b"KEEPTTL" and deadline is None:
            keep_ttl, i = True, i + 1
        elif opt == b"GET":
            get_old, i = True, i + 1
        else:
            return SYNTAX
    old = node.store.get(key)
    if (nx and old is not None) or (xx and old is None):
        if get_old:
            return resp.nil(conn.resp3) if old is None else resp.bulk(old.value)
        return resp.nil(conn.resp3)
    if keep_ttl and old is not None:
        deadline = old.deadline
    try:
        await node.write(key, value, deadline)
    except OutOfMemory as err:
        return resp.error(str(err))
    if get_old:
        return resp.nil(conn.resp3) if old is None else resp.bulk(old.value)
    return resp.OK


async def cmd_del(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) < 2:
        return wrong_args(args[0])
    return resp.integer(await node.remove(args[1:]))


async def _expire(node: CacheNode, conn: Connection, args: list[bytes], scale: float) -> bytes:
    if len(args) < 3:
        return wrong_args(args[0])
    n = parse_int(args[2])
    if n is None:
        return NOT_INT
    key = args[1]
    item = node.store.get(key)
    if item is None:
        return resp.integer(0)
    deadline = node.clock() + n * scale
    flags = {a.upper() for a in args[3:]}
    if not flags <= {b"NX", b"XX", b"GT", b"LT"}:
        return resp.error(f"ERR Unsupported option {args[3].decode(errors='replace')}")
    current = item.deadline
    if (
        (b"NX" in flags and current is not None)
        or (b"XX" in flags and current is None)
        or (b"GT" in flags and (current is None or deadline <= current))
        or (b"LT" in flags and current is not None and deadline >= current)
    ):
        return resp.integer(0)
    if n <= 0:
        # a deadline in the past deletes the key at once, as in Redis
        await node.remove([key])
        return resp.integer(1)
    node.store.set_deadline(key, deadline)
    return resp.integer(1)


async def cmd_expire(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    return await _expire(node, conn, args, 1.0)


async def cmd_pexpire(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    return await _expire(node, conn, args, 0.001)


async def cmd_flushall(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    await node.flush()
    return resp.OK


async def cmd_mget(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) < 2:
        return wrong_args(args[0])
    out = []
    for key in args[1:]:
        value = await node.read(key)
        out.append(resp.nil(conn.resp3) if value is None else resp.bulk(node.served(value)))
    return resp.array(out)


async def cmd_hal_fetch(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    found = await node.serve_fetch(args[1:])
    if found is None:
        return resp.nil(conn.resp3)
    value, pttl = found
    return resp.array([resp.bulk(value), resp.integer(pttl)])


async def cmd_hal_stage(node: CacheNode, conn: Connection, args: list[bytes]) -> bytes:
    """``HAL.STAGE key [key ...]``: pull the keys here exactly as GET would (local hits
    stay, misses pull through the tree and keep a copy), without sending the values back.
    Replies the number of the keys held here afterwards. The scheduler pre-stages a job's
    inputs into the leaf cache of its nodes with it. The keys are pulled concurrently, so
    the wait is that of the slowest pull (each bounded by ``--pull-timeout``)."""
    if len(args) < 2:
        return wrong_args(args[0])
    keys = list(dict.fromkeys(args[1:]))
    await asyncio.gather(*(node.read(key) for key in keys))
    # a pulled copy with no TTL left is served but not kept (node._keep): count what is here
    return resp.integer(sum(1 for key in keys if node.store.get(key) is not None))


SYNC: dict[bytes, SyncCommand] = {
    b"PING": cmd_ping,
    b"ECHO": cmd_echo,
    b"HELLO": cmd_hello,
    b"CLIENT": cmd_client,
    b"SELECT": cmd_select,
    b"QUIT": cmd_quit,
    b"COMMAND": cmd_command,
    b"INFO": cmd_info,
    b"DBSIZE": cmd_dbsize,
    b"CONFIG": cmd_config,
    b"EXISTS": cmd_exists,
    b"TTL": cmd_ttl,
    b"PTTL": cmd_pttl,
    b"PERSIST": cmd_persist,
    b"KEYS": cmd_keys,
}
ASYNC: dict[bytes, AsyncCommand] = {
    b"GET": cmd_get,
    b"SET": cmd_set,
    b"DEL": cmd_del,
    b"UNLINK": cmd_del,
    b"EXPIRE": cmd_expire,
    b"PEXPIRE": cmd_pexpire,
    b"FLUSHALL": cmd_flushall,
    b"FLUSHDB": cmd_flushall,
    b"MGET": cmd_mget,
    b"HAL.FETCH": cmd_hal_fetch,
    b"HAL.STAGE": cmd_hal_stage,
}
