"""The artifact registry over REST (``/v1/artifacts``; docs/user/artifacts.md)."""

from __future__ import annotations

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
