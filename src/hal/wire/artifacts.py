"""The artifact registry over REST (``/v1/artifacts``; docs/user/artifacts.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hal.wire.base import WireModel

SHA256_HEADER = "X-HAL-SHA256"  # an upload's digest as the client computed it; a download's
KIND_HEADER = "X-HAL-Artifact-Kind"  # a download's kind: archive or program


class ArtifactInfo(WireModel):
    name: str
    version: str
    sha256: str  # of the content; what jobs pin
    size: int  # bytes
    owner: str  # who published it
    created: float  # Unix time
    kind: str  # "archive": unpacked on the nodes; "program": kept as it is


class ArtifactList(WireModel):
    artifacts: list[ArtifactInfo] = Field(default_factory=list)  # by name, newest first


class AliasInfo(WireModel):
    """``NAME@ALIAS`` (``hal artifact aliases``): the version it names, its canary."""

    name: str
    alias: str
    version: str  # what jobs naming it get (but the canary's share)
    sha256: str
    canary: str = ""  # the version a share of them gets; "" when none
    canary_sha256: str = ""
    share: float = 0.0  # the canary's share of the jobs, in %
    since: float  # when the version or the canary was set
    history: list[str] = Field(default_factory=list)  # the versions it named before
    changed_by: str = ""
    # the jobs naming it that ended since the canary began: on the canary, on the version
    canary_jobs: int = 0
    canary_failed: int = 0
    previous_jobs: int = 0
    previous_failed: int = 0
    # the evidence of the last automatic rollback since the server started; {} if none
    rolled_back: dict[str, Any] = Field(default_factory=dict)


class AliasList(WireModel):
    aliases: list[AliasInfo] = Field(default_factory=list)


class AliasMove(WireModel):
    """``hal artifact promote NAME@VERSION --to ALIAS [--canary SHARE]``."""

    version: str = Field(max_length=128)
    canary: str | None = Field(default=None, max_length=16)  # "10%": a canary of that share


class NodeCopy(WireModel):
    """One copy in a node's artifact cache."""

    sha256: str
    kind: str  # "archive", "program", "python-env" (built from a lock) or "conda" (unpacked)
    size: int
    used: float  # when a job last deployed it (Unix time)
    held: bool  # a job running on the node uses it: never evicted
    versions: list[str] = Field(default_factory=list)  # NAME@VERSION with this content


class NodeInventory(WireModel):
    node: str
    reported: float  # when its agent last said (Unix time)
    limit_bytes: int  # its cache's bound ([artifacts] node_cache, or its --artifact-cache)
    used_bytes: int
    copies: list[NodeCopy] = Field(default_factory=list)


class ArtifactNodes(WireModel):
    nodes: list[NodeInventory] = Field(default_factory=list)


class TreePiece(WireModel):
    """One piece of an artifact's content in the cache tree: the cache key it sits under
    (``hal:artifact:SHA256:INDEX``, named by the whole content's digest) and its own
    size and sha256, which the agent checks before it keeps the piece."""

    key: str
    size: int
    sha256: str


class ArtifactRoute(WireModel):
    """``GET /v1/agent/artifacts/{sha256}/route?node=N``: how node ``N`` gets the
    content. ``cache`` empty: from the server (``/v1/agent/artifacts/{sha256}``), with
    ``reason`` saying why; else ``HOST:PORT`` of the node's leaf cache, and ``pieces``,
    in order, are in its tree's root already."""

    sha256: str
    size: int
    cache: str = ""  # the leaf cache's address; "": fetch from the server
    leaf: str = ""  # its instance id
    pieces: list[TreePiece] = Field(default_factory=list)
    reason: str = ""  # why not through the tree ("" when through it)
