"""An artifact's content read at the node's leaf cache (docs/user/artifacts.md).

With a cache tree (``[data]`` on the server), the server's route for a node
(``TreeChannel.artifact_route``: ``hal.server.artifact_tree``) names the node's leaf
cache and the content's pieces, which the tree's root holds by then. ``read_through``
reads them at the leaf, ``WINDOW`` at a time (each miss there pulls through the branch, so
the root sends each byte once whatever the number of nodes), and hands them to
``write`` in order, each checked against its sha256 first.

A piece with other bytes (a cache's copy corrupted, or written by hand under the key) is
refused: its copy at the leaf is deleted and the piece read again, which pulls a copy
from upstream. A piece still wrong, or missing after a few tries, raises
``TreeUnusable``, and the caller fetches the content from the server instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hal.wire.artifacts import ArtifactRoute, TreePiece

if TYPE_CHECKING:
    import redis.asyncio as aioredis

WINDOW = 4  # pieces read at once (each up to 16 MiB): the leaf pulls them concurrently
TIMEOUT_S = 60.0  # one read at the leaf, a miss pulled through the tree included
# Reads of a piece the leaf answers nil for: its pull timed out, or the leaf holds its
# parent for dead (a few seconds after a failed pull, ``hal.cache.peers``): the waits
# between them (1, 2, 4 s) outlast that.
MISSING_TRIES = 4
MISSING_WAIT_S = 1.0


class TreeUnusable(Exception):
    """The leaf could not give the content; fetch it from the server."""


@runtime_checkable
class TreeChannel(Protocol):
    async def artifact_route(self, sha256: str, node: str) -> ArtifactRoute:
        """``GET /v1/agent/artifacts/{sha256}/route?node=NODE``."""
        ...


class TreeCounts:
    """What the reads through the tree did (the agent's metrics, tests, the bench)."""

    def __init__(self) -> None:
        self.fetches = 0  # contents read whole at the leaf
        self.bytes = 0
        self.refused = 0  # pieces whose bytes did not have their sha256
        self.fallbacks = 0  # contents fetched from the server after the tree failed


async def read_through(
    route: ArtifactRoute, write: Callable[[bytes], object], counts: TreeCounts
) -> None:
    """Hand ``route``'s pieces, read at its leaf cache and checked, to ``write``."""
    # redis is imported here, by the first job whose artifact has a route: importing it
    # costs every agent's start a few hundred ms of CPU, and most agents never read a tree
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

    host, _, port = route.cache.rpartition(":")
    leaf = aioredis.Redis(
        host=host.strip("[]"),
        port=int(port),
        socket_timeout=TIMEOUT_S,
        socket_connect_timeout=5.0,
        max_connections=WINDOW,
    )
    ahead: deque[asyncio.Task[bytes]] = deque()  # the next pieces, being read
    pieces = iter(route.pieces)
    try:
        for first in itertools.islice(pieces, WINDOW):
            ahead.append(asyncio.ensure_future(_piece(leaf, first, counts)))
        while ahead:
            value = await ahead.popleft()
            following = next(pieces, None)
            if following is not None:  # one more in flight before this one is written
                ahead.append(asyncio.ensure_future(_piece(leaf, following, counts)))
            write(value)
    except RedisError as err:
        raise TreeUnusable(f"leaf cache {route.leaf} at {route.cache}: {err}") from err
    finally:
        for task in ahead:
            task.cancel()
        await asyncio.gather(*ahead, return_exceptions=True)
        with contextlib.suppress(RedisError, OSError):
            await leaf.aclose()


async def _piece(leaf: aioredis.Redis, piece: TreePiece, counts: TreeCounts) -> bytes:
    refused = False
    for attempt in range(MISSING_TRIES):
        value = await leaf.get(piece.key)
        if isinstance(value, str):  # (a client decoding replies: not this one's)
            value = value.encode("utf-8", "surrogateescape")
        if value is None:
            if attempt < MISSING_TRIES - 1:
                await asyncio.sleep(MISSING_WAIT_S * 2**attempt)
            continue
        if len(value) == piece.size and await asyncio.to_thread(_sha256, value) == piece.sha256:
            return value
        counts.refused += 1
        if refused:
            raise TreeUnusable(f"{piece.key}: the tree holds other bytes than its sha256's")
        refused = True
        await leaf.delete(piece.key)  # the next read pulls a copy from upstream
    raise TreeUnusable(f"{piece.key}: the leaf cache does not have it")


def _sha256(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()
