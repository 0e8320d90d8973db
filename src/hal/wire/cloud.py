"""The compute control plane's state (REST ``GET /v1/cloud``, ``hal cloud``)."""

from __future__ import annotations

from pydantic import Field

from hal.wire.base import WireModel


class CloudNodeInfo(WireModel):
    node: str
    instance: str  # the provider's id (EC2's instance id; the local provider's pid)
    state: str  # booting (its agent has not joined), joined, idle, or stopping
    created_at: float
    idle_since: float | None = None  # when it last ran a job (None: it runs one, or booting)


class CloudGroupInfo(WireModel):
    name: str
    provider: str
    nodes: list[str]  # every name the group may use
    cpus: int
    memory_bytes: int
    gpus: int = 0
    gpu_type: str = ""
    features: list[str] = Field(default_factory=list)
    price_per_hour: float = 0.0
    idle_seconds: float
    boot_timeout_seconds: float
    instances: list[CloudNodeInfo] = Field(default_factory=list)
    resting_until: float | None = None  # after a failure, nothing is created till then
    last_error: str = ""
    # its provider failed or did not answer (last_error says how); a capacity answer
    # leaves it healthy; healthy again once a listing succeeds
    healthy: bool = True
    unhealthy_since: float | None = None
    created: int = 0  # nodes created since the server started
    removed: int = 0
    boot_failures: int = 0
    # taken out of [cloud]: its nodes are drained and removed as they free up
    retiring: bool = False


class CloudStatus(WireModel):
    interval_seconds: float = 0.0
    pending_seconds: float = 0.0
    groups: list[CloudGroupInfo] = Field(default_factory=list)  # none: no [cloud] groups
