"""``PeerFetcher``: reads a key from another cache node (a parent or a peer) over RESP.

Nodes talk to each other with one private command, ``HAL.FETCH``::

    HAL.FETCH <key> LOCAL                                  local copy only, never pulls
    HAL.FETCH <key> PULL <budget-ms> <hops> <known> [fresh-id ...]
                                                           the parent does its own pull-through

and get back ``[value, pttl-ms]`` or nil. ``known`` is 1 when the asker got the list of
fresh holders from the control plane; the parent then trusts its own copy only if it is on
that list (a copy pulled before an origin overwrite must not be served). ``pttl`` carries the
remaining TTL down the tree so a copy expires when its source does.

A node that fails (refused, reset, timed out) is remembered as dead for a few seconds so the
next read bypasses it at once instead of waiting again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import hiredis

from hal.cache import resp

DEAD_FOR_S = 3.0
CONNECT_TIMEOUT_S = 0.3


class PeerUnavailable(Exception):
    """The other node did not answer in time (or answered an error)."""


class PeerFetcher:
    def __init__(self) -> None:
        self._dead_until: dict[str, float] = {}

    def is_dead(self, address: str) -> bool:
        return self._dead_until.get(address, 0.0) > time.monotonic()

    async def fetch(
        self, address: str, args: list[bytes], timeout_s: float
    ) -> tuple[bytes, int] | None:
        if self.is_dead(address):
            raise PeerUnavailable(f"{address} failed recently")
        try:
            return await asyncio.wait_for(self._fetch(address, args), max(0.01, timeout_s))
        except (OSError, TimeoutError, PeerUnavailable, hiredis.ProtocolError) as err:
            self._dead_until[address] = time.monotonic() + DEAD_FOR_S
            raise PeerUnavailable(f"{address}: {err.__class__.__name__}: {err}") from err

    async def _fetch(self, address: str, args: list[bytes]) -> tuple[bytes, int] | None:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port)), CONNECT_TIMEOUT_S
        )
        try:
            writer.write(resp.array(resp.bulk(a) for a in [b"HAL.FETCH", *args]))
            parser = hiredis.Reader()
            while True:
                data = await reader.read(65536)
                if not data:
                    raise PeerUnavailable("connection closed before the reply")
                parser.feed(data)
                reply = parser.gets()
                if reply is not False:
                    break
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if reply is None:
            return None
        if isinstance(reply, hiredis.ReplyError) or not isinstance(reply, list) or len(reply) != 2:
            raise PeerUnavailable(f"unexpected reply {reply!r}")
        value, pttl = reply
        if not isinstance(value, bytes) or not isinstance(pttl, int):
            raise PeerUnavailable(f"unexpected reply {reply!r}")
        return value, pttl
