"""Artifacts through the cache tree (docs/user/artifacts.md, docs/admin/cache.md).

With a ``[data]`` cache tree, a node's agent asks the server how to get an artifact's
content (``GET /v1/agent/artifacts/{sha256}/route?node=N``). ``ArtifactTree.route``
answers with the node's leaf cache (``[data.node_cache]``, else the instance named as the
node: the data plane's own mapping) and the content's pieces, after making sure each piece
is in that tree's root: the server writes the ones the root lacks there, read once from
the artifact store. The agent then reads the pieces at its leaf, which pulls them through
its branch from the root, so each byte crosses each link once however many nodes fetch.

The keys are named by the whole content's digest (``hal:artifact:SHA256:INDEX``), and
the route carries each piece's own sha256: a cache can hold wrong bytes (corrupted,
written by hand), never pass them off, since the agent checks every piece and the whole.

No tree, a node without a leaf, or a cache that cannot take the content now: the route
says so (``reason``) and the agent fetches from the server, as without a tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from hal.core.artifacts import Artifact
from hal.core.data import DataView
from hal.core.errors import NotFound, Unavailable
from hal.state.artifacts import PIECE, Registry
from hal.wire.artifacts import ArtifactRoute, TreePiece

log = logging.getLogger("hal.data")

KEY = "hal:artifact:{sha256}:{index}"
# A piece in the tree: four of the store's. Every level's pull of a piece asks the control
# plane where it is and reports its copy: bigger pieces, fewer of those per byte.
TREE_PIECE = 4 * PIECE
SET_WINDOW = 2  # pieces written to a root at once
TIMEOUT_S = 60.0  # one command to a root cache node


def piece_key(sha256: str, index: int) -> str:
    return KEY.format(sha256=sha256, index=index)


class ArtifactTree:
    """Puts artifacts into cache roots and tells agents where to read them.

    ``view``: the data plane's current view (``DataService.view``); ``address``: a cache
    instance's ``HOST:PORT`` (``DataService``'s lookup, raising ``NotFound`` or
    ``Unavailable``)."""

    def __init__(
        self, view: Callable[[], DataView], address: Callable[[str], Awaitable[str]]
    ) -> None:
        self.view = view
        self.address = address
        self._digests: dict[str, list[TreePiece]] = {}  # content → its pieces, once read
        self._seeding: dict[tuple[str, str], asyncio.Future[list[TreePiece]]] = {}
        self._clients: dict[str, aioredis.Redis] = {}
        self._warned: set[str] = set()

    async def route(self, registry: Registry, artifact: Artifact, node: str) -> ArtifactRoute:
        """How ``node`` gets ``artifact``'s content: its leaf and the pieces (in its
        root now), or no cache and why."""
        direct = ArtifactRoute(sha256=artifact.sha256, size=artifact.size)
        view = self.view()
        leaf = view.node_cache.get(node)
        chain = view.tree.chain(leaf) if leaf is not None else ()
        if not chain:
            why = (
                f"node {node!r} reads through no cache instance ([data.node_cache], or a "
                "cache node registered under the node's name)"
                if leaf is None
                else f"cache instance {leaf!r} is not in the cache tree (yet)"
            )
            return direct.model_copy(update={"reason": why})
        root = chain[-1]
        try:
            leaf_address = await self.address(chain[0])
            root_address = await self.address(root)
            pieces = await self._ensure(registry, artifact, root, root_address)
        except (NotFound, Unavailable, RedisError, OSError, TimeoutError) as err:
            why = f"the cache tree cannot take it now ({err.__class__.__name__}: {err})"
            if root not in self._warned:  # once per root until it works again
                self._warned.add(root)
                log.warning("artifact %s: %s; nodes fetch from the server", artifact.sha256, why)
            return direct.model_copy(update={"reason": why})
        self._warned.discard(root)
        return direct.model_copy(update={"cache": leaf_address, "leaf": chain[0], "pieces": pieces})

    async def _ensure(
        self, registry: Registry, artifact: Artifact, root: str, address: str
    ) -> list[TreePiece]:
        """The content's pieces, each in ``root`` (written there if missing). Nodes asking
        at once share one look and one write."""
        ident = (root, artifact.sha256)
        running = self._seeding.get(ident)
        if running is None:
            running = asyncio.ensure_future(self._seed(registry, artifact, address))
            self._seeding[ident] = running
            running.add_done_callback(lambda _: self._seeding.pop(ident, None))
        return await asyncio.shield(running)

    async def _seed(self, registry: Registry, artifact: Artifact, address: str) -> list[TreePiece]:
        client = self._client(address)
        known = self._digests.get(artifact.sha256)
        keys = [piece_key(artifact.sha256, i) for i in range(-(-artifact.size // TREE_PIECE))]
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.exists(key)
        held = [bool(n) for n in await asyncio.wait_for(pipe.execute(), TIMEOUT_S)]
        if known is not None and all(held):
            return known
        await registry.check_content(artifact)
        registry.downloads["cache"] += 1
        pieces: list[TreePiece] = []
        batch: list[tuple[str, bytes]] = []
        whole = hashlib.sha256()
        async for data in _regrouped(registry.pieces(artifact.sha256)):
            index = len(pieces)
            key = piece_key(artifact.sha256, index)
            digest = await asyncio.to_thread(_digest, data, whole)
            pieces.append(TreePiece(key=key, size=len(data), sha256=digest))
            if index >= len(held) or not held[index]:
                batch.append((key, data))
            if len(batch) >= SET_WINDOW:
                await self._write(client, batch, registry)
                batch = []
        if batch:
            await self._write(client, batch, registry)
        if whole.hexdigest() != artifact.sha256:
            raise Unavailable(f"the stored content of {artifact.sha256} reads back different")
        self._digests[artifact.sha256] = pieces
        return pieces

    async def _write(
        self, client: aioredis.Redis, batch: list[tuple[str, bytes]], registry: Registry
    ) -> None:
        await asyncio.wait_for(asyncio.gather(*(client.set(k, v) for k, v in batch)), TIMEOUT_S)
        registry.served_bytes["cache"] += sum(len(v) for _, v in batch)

    def _client(self, address: str) -> aioredis.Redis:
        client = self._clients.get(address)
        if client is None:
            host, _, port = address.rpartition(":")
            client = aioredis.Redis(
                host=host.strip("[]"),
                port=int(port),
                socket_timeout=TIMEOUT_S,
                socket_connect_timeout=2.0,
            )
            self._clients[address] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()
        self._clients = {}


async def _regrouped(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The store's pieces joined into the tree's (``TREE_PIECE`` bytes, the last shorter)."""
    buffer = bytearray()
    async for data in pieces:
        buffer += data
        if len(buffer) >= TREE_PIECE:
            yield bytes(buffer[:TREE_PIECE])
            del buffer[:TREE_PIECE]
    if buffer:
        yield bytes(buffer)


def _digest(data: bytes, whole: hashlib._Hash) -> str:
    """A piece's sha256, and the piece added to the whole content's (off the loop)."""
    whole.update(data)
    return hashlib.sha256(data).hexdigest()
