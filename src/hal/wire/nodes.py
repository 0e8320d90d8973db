"""Nodes, partitions, users and the cluster config view (REST ``/v1/nodes`` ...)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hal.wire.base import WireModel


class NodeInfo(WireModel):
    name: str
    state: str  # UP, DOWN, DRAIN (stored state)
    display_state: str  # sinfo's: idle, mix, alloc, drain, drng, down
    reason: str = ""
    cpus: int
    cpus_alloc: int
    memory_bytes: int
    memory_alloc_bytes: int
    gpus: int
    gpus_alloc: int
    gpu_model: str = ""
    features: list[str] = Field(default_factory=list)
    partitions: list[str] = Field(default_factory=list)
    last_heartbeat: float = 0.0
    address: str = ""
    jobs: list[int] = Field(default_factory=list)


class NodeList(WireModel):
    nodes: list[NodeInfo]


class NodeUpdate(WireModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    state: str = Field(pattern="^(DRAIN|UP|DOWN|RESUME)$")
    reason: str = Field(default="", max_length=1024)


class PartitionInfo(WireModel):
    name: str
    default: bool
    up: bool
    max_time_seconds: int  # 0 = unlimited
    default_time_seconds: int
    max_nodes: int  # 0 = unlimited
    nodes: list[str]
    priority_tier: int = 1


class PartitionList(WireModel):
    partitions: list[PartitionInfo]


class UserInfo(WireModel):
    name: str
    admin: bool


class UserCreated(WireModel):
    name: str
    admin: bool
    token: str  # shown once


class ClusterConfig(WireModel):
    """A few settings tools read (``scontrol show config``)."""

    cluster_name: str
    min_job_age_seconds: int
    kill_wait_seconds: int
    version: str
    scheduler_interval_seconds: float
    settings: dict[str, str] = Field(default_factory=dict)
