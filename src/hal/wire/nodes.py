"""Nodes, partitions, users and the cluster config view (REST ``/v1/nodes`` ...)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, model_validator

from hal.wire.base import WireModel
from hal.wire.bounds import INT32_MAX, LATEST_SECONDS
from hal.wire.priority import PriorityWeightsInfo


class NodeInfo(WireModel):
    name: str
    # UP, DOWN, DRAIN (stored state); UP for a [cloud] group's node not created yet
    state: str
    display_state: str  # sinfo's: idle, mix, alloc, drain, drng, down
    # Slurm's flags on top of it (sinfo's suffixes: idle*, alloc$, idle~; node_flags.py):
    # NOT_RESPONDING, MAINTENANCE, RESERVED; on a [cloud] group's node CLOUD, and on one
    # with no registered node POWERED_DOWN, POWERING_UP or POWERING_DOWN
    # (hal.api.cloud_nodes)
    state_flags: list[str] = Field(default_factory=list)
    reason: str = ""
    # who set the reason (an operator's name, or the server's account for its own) and
    # when; "" and None for a reason stored before HAL recorded them (sinfo -R, %u %H)
    reason_user: str = ""
    reason_time: float | None = None
    cpus: int
    cpus_alloc: int
    memory_bytes: int
    memory_alloc_bytes: int
    # the host's MemAvailable and 1-minute load average from the agent's latest
    # heartbeat; None while unknown (no agent, or an agent too old to report them)
    free_memory_bytes: int | None = None
    cpu_load: float | None = None
    gpus: int
    gpus_alloc: int
    gpu_ids_alloc: list[int] = Field(default_factory=list)  # indices of the gpus_alloc
    gpu_model: str = ""
    gpu_islands: list[list[int]] = Field(default_factory=list)  # NVLink; [] = one island
    topology_labels: dict[str, str] = Field(default_factory=dict)  # rack, zone, ...
    nvlink_domain: str = ""  # multi-node NVLink domain; "" = none
    features: list[str] = Field(default_factory=list)
    partitions: list[str] = Field(default_factory=list)
    last_heartbeat: float = 0.0
    address: str = ""
    jobs: list[int] = Field(default_factory=list)


class NodeList(WireModel):
    nodes: list[NodeInfo]


class NodeUpdate(WireModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    # POWER_DOWN / POWER_UP: an owned node powered down or up ([power], docs/admin/power.md)
    state: str = Field(pattern="^(DRAIN|UP|DOWN|RESUME|POWER_DOWN|POWER_UP)$")
    reason: str = Field(default="", max_length=1024)


class PartitionInfo(WireModel):
    name: str
    default: bool
    up: bool  # State=UP (a DRAIN partition starts jobs too: ``state`` tells them apart)
    # UP, DOWN, DRAIN or INACTIVE (Slurm's State=); from a server that sends only ``up``,
    # UP or DOWN (``_state_of_up``)
    state: str = "UP"
    max_time_seconds: int  # 0 = unlimited
    default_time_seconds: int  # DefaultTime as configured; 0 = none (jobs get MaxTime)
    max_nodes: int  # 0 = unlimited
    # the nodes it holds ([]: none, not every node): the registered ones and the names of
    # the [cloud] groups' nodes, created or not
    nodes: list[str]
    priority_tier: int = 1
    priority_job_factor: int = 1  # Slurm's PriorityJobFactor
    # Slurm's PreemptMode: OFF without preemption, else [preemption]'s mode (REQUEUE,
    # CANCEL, SUSPEND); a QoS may still override it per job
    preempt_mode: str = "OFF"

    @model_validator(mode="before")
    @classmethod
    def _state_of_up(cls, data: Any) -> Any:
        if isinstance(data, dict) and "state" not in data and data.get("up") is False:
            return {**data, "state": "DOWN"}
        return data


class PartitionChange(WireModel):
    """``PATCH /v1/partitions/{name}`` (administrators; ``scontrol update
    PartitionName=``): the fields to change, the others as they are. Kept over a server
    restart; ``scontrol reconfigure`` puts hal.toml's partitions back."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    # UP takes and starts jobs; DOWN takes them (they wait: PartitionDown); DRAIN
    # starts those queued, refuses new ones; INACTIVE neither (PartitionInactive)
    state: str | None = Field(default=None, pattern="^(UP|DOWN|DRAIN|INACTIVE)$")
    # bounded as the database stores them (past BIGINT/INTEGER PostgreSQL refused the
    # write: a 500) and as a job's time limit is
    max_time_seconds: int | None = Field(default=None, ge=0, le=LATEST_SECONDS)  # 0: unlimited
    default_time_seconds: int | None = Field(default=None, ge=0, le=LATEST_SECONDS)  # 0: none
    max_nodes: int | None = Field(default=None, ge=0, le=INT32_MAX)  # 0: unlimited
    # Slurm's bounds (22.05.8 refuses 65534 and more, and negative values)
    priority_job_factor: int | None = Field(default=None, ge=0, le=65533)
    priority_tier: int | None = Field(default=None, ge=0, le=65533)
    default: bool | None = None  # True: the default partition (no other is then)


class PartitionList(WireModel):
    partitions: list[PartitionInfo]


class LicenseInfo(WireModel):
    """One of the cluster's licenses (``[licenses]``) and how many running jobs hold."""

    name: str
    total: int
    used: int
    free: int


class LicenseList(WireModel):
    licenses: list[LicenseInfo]


class UserInfo(WireModel):
    name: str
    admin: bool
    # an agent's token (``hal user add NAME --agent``): the agent channel only, for the
    # nodes of the host list ``nodes`` ("" for any node)
    agent: bool = False
    nodes: str = ""


class UserCreated(WireModel):
    name: str
    admin: bool
    token: str  # shown once
    agent: bool = False
    nodes: str = ""


class ClusterConfig(WireModel):
    """The settings tools read (``scontrol show config``, ``hal.compat.scontrol_config``).
    The fields with defaults came later: a client reading an older server's answer
    leaves out what those would have shown."""

    cluster_name: str
    min_job_age_seconds: int
    kill_wait_seconds: int
    version: str
    scheduler_interval_seconds: float
    # Slurm keys whose values the server words itself (MaxArraySize, SlurmUser ...)
    settings: dict[str, str] = Field(default_factory=dict)
    node_timeout_seconds: float | None = None  # Slurm's SlurmdTimeout
    return_to_service: int | None = None  # Slurm's ReturnToService (0, 1, 2)
    priority: PriorityWeightsInfo | None = None  # None: priority/basic (no [priority])
    preempt_type: str = "off"  # off, qos, partition_prio (hal.core.preemption)
    preempt_mode: str = "requeue"  # requeue, cancel, suspend
    preempt_exempt_seconds: float = 0.0
    backfill: bool | None = None  # the profile has a backfill stage (sched/backfill)
    enable_user_top: bool = False  # SchedulerParameters=enable_user_top
    licenses: dict[str, int] = Field(default_factory=dict)  # [licenses]
    state_save_location: str = ""  # the server's data directory ("": none)
    boot_time: float | None = None  # when the server started


class Reconfigured(WireModel):
    """What ``scontrol reconfigure`` did (``POST /v1/reconfigure``): the hal.toml keys
    whose new values the server took, and those that change only at a restart, whose
    running values it kept."""

    changed: list[str] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list)
    # what the new file may not mean: a partition none of whose nodes has registered
    warnings: list[str] = Field(default_factory=list)


def kept_warning(key: str) -> str:
    """What the server's log, ``scontrol reconfigure`` and slurmrestd's warnings say of
    a setting ``Reconfigured.kept`` names."""
    return f"reconfigure: {key} changes only at restart; kept"


class SwitchInfo(WireModel):
    """One switch of the tree (``GET /v1/topology``)."""

    name: str
    level: int  # 0 for a leaf; an inner switch is one above its highest child
    nodes: list[str] = Field(default_factory=list)  # a leaf's nodes
    switches: list[str] = Field(default_factory=list)  # an inner switch's children
    nodes_total: int  # nodes under it, registered or not
    nodes_free: int  # of those: registered, UP and running nothing
    link_speed: int = 1  # Slurm's LinkSpeed (topology.conf), shown, not scheduled on


class BlockInfo(WireModel):
    name: str
    nodes: list[str]
    nodes_free: int


class LabelDomainInfo(WireModel):
    """One domain of the label tree (a site, region, zone or rack), in tree order."""

    level: str  # site, region, zone, rack
    name: str  # as shown: "r1", "(no zone)", "(own rack: n7)"
    depth: int  # 0 for the top level present
    nodes: list[str] = Field(default_factory=list)  # a rack's nodes
    nodes_total: int
    nodes_free: int


class NvlinkDomainInfo(WireModel):
    """A multi-node NVLink domain (agent --nvlink-domain)."""

    name: str
    nodes: list[str]
    nodes_free: int


class TopologyInfo(WireModel):
    """The switch tree as configured, with how full each switch is now; the label tree
    (rack, zone, region, site), NVLink domains and each node's GPU islands."""

    configured: bool
    level_names: list[str] = Field(default_factory=list)  # bottom-up
    roots: list[str] = Field(default_factory=list)
    switches: list[SwitchInfo] = Field(default_factory=list)
    blocks: list[BlockInfo] = Field(default_factory=list)
    block_sizes: list[int] = Field(default_factory=list)
    unplaced: list[str] = Field(default_factory=list)  # registered nodes the tree lacks
    unregistered: list[str] = Field(default_factory=list)  # tree nodes never registered
    label_levels: list[str] = Field(default_factory=list)  # present label levels, leaf first
    labels_place: bool = False  # the label tree places jobs (no switches or blocks)
    label_domains: list[LabelDomainInfo] = Field(default_factory=list)
    nvlink_domains: list[NvlinkDomainInfo] = Field(default_factory=list)
    gpu_islands: dict[str, list[list[int]]] = Field(default_factory=dict)  # node -> islands
