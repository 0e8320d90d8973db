"""Nodes and partitions."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from hal.core.errors import InvalidRequest
from hal.core.resources import ResourceVector
from hal.core.states import NodeState, PartitionState

# A node feature is a word a job's --constraint can name (joined there with & or ,):
# letters, digits and _.:+=/- only; a node has a bounded number of them.
_FEATURE = re.compile(r"[A-Za-z0-9_.:+=/-]{1,128}")
MAX_FEATURES = 64


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    resources: ResourceVector  # what the node offers to jobs
    state: NodeState = NodeState.UP
    reason: str = ""  # why DOWN or DRAIN, as an operator or the server wrote it
    # who wrote the reason (an operator's name; the server's own account for its own
    # reasons, state.agents.server_user) and when; "" and None for a reason stored before
    # HAL recorded them (migration 15)
    reason_user: str = ""
    reason_time: float | None = None
    # Slurm's DRAIN flag kept on a DOWN node (a drained node set down: ``DOWN+DRAIN``,
    # sinfo ``drained``); only with ``state`` DOWN, cleared by a resume. Stored in the
    # ``state`` column as ``DOWN+DRAIN`` (``state.store``), so no column of its own.
    drain: bool = False
    features: tuple[str, ...] = ()
    gpu_model: str = ""
    gpu_islands: tuple[tuple[int, ...], ...] = ()  # NVLink islands (core.gpu_islands)
    partitions: tuple[str, ...] = ()
    address: str = ""  # how the server reaches the agent, when it needs to
    last_heartbeat: float = 0.0
    topology: tuple[str, ...] = ()  # e.g. ("site-a", "rack-3", "switch-7")
    # topology labels (rack, zone, region, site: core.topology_labels), from the agent's
    # --topology-label and the config's [[topology.labels]]
    labels: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    nvlink_domain: str = ""  # a multi-node NVLink domain (e.g. an NVL72 rack); "" = none

    @property
    def schedulable(self) -> bool:
        return self.state is NodeState.UP

    def evolve(self, **changes: object) -> Node:
        return replace(self, **changes)  # type: ignore[arg-type]


def check_features(features: Sequence[str]) -> None:
    """Refuse node features no ``--constraint`` could name (empty, with spaces, & or ,
    or a NUL that PostgreSQL's text refuses), past 128 characters, or more than 64."""
    if len(features) > MAX_FEATURES:
        raise InvalidRequest(
            f"a node may have at most {MAX_FEATURES} features, got {len(features)}",
            field="features",
        )
    for i, feature in enumerate(features):
        if not _FEATURE.fullmatch(feature):
            raise InvalidRequest(
                f"invalid node feature {feature!r}: write 1 to 128 letters, digits or "
                "_.:+=/- (a job asks for it with --constraint), e.g. --features a100,ib",
                field=f"features[{i}]",
            )


def parse_features(text: str) -> tuple[str, ...]:
    """``"a100,ib"`` → ``("a100", "ib")`` (the agent's ``--features``), checked."""
    features = tuple(f.strip() for f in text.split(",") if f.strip())
    check_features(features)
    return features


def gpu_type_name(model: str) -> str:
    """A GPU model as Slurm names an autodetected GPU type (``AutoDetect=nvml``): NVML's
    name lowercased, spaces as underscores ("NVIDIA H100 80GB HBM3" → "nvidia_h100_80gb_hbm3").
    What ``sinfo``/``scontrol`` show in GRES, so a user can paste it into ``--gres``."""
    return "_".join(model.lower().split())


@lru_cache(maxsize=1024)
def gpu_type_matches(wanted: str, model: str) -> bool:
    """Whether GPUs of ``model`` (NVML's name, e.g. "NVIDIA A100-SXM4-80GB") are of the type
    a job asks for (``--gres=gpu:TYPE``): the whole name in any case, with '_' or '-' for
    its spaces, or any run of its words ("a100", "a100-sxm4", "nvidia_a100-sxm4-80gb");
    never part of a word ("100" is no type)."""
    return bool(model) and f"_{_words(wanted)}_" in f"_{_words(model)}_"


def _words(name: str) -> str:
    return "_".join(re.split(r"[\s_-]+", name.strip().lower()))


@dataclass(frozen=True, slots=True)
class Partition:
    """A queue over a set of nodes, with limits (Slurm's partition)."""

    name: str
    nodes: tuple[str, ...] = ()  # empty → every node
    default: bool = False
    max_time_s: int = 0  # 0 → unlimited
    default_time_s: int = 0  # 0 → max_time_s (or unlimited)
    max_nodes: int = 0  # 0 → unlimited
    priority_tier: int = 1
    # hal.toml's ``up`` (UP or DOWN), or an administrator's ``scontrol update`` (any)
    state: PartitionState = PartitionState.UP
    # PriorityJobFactor: the partition factor of multifactor priority (job factor /
    # the largest of all partitions)
    priority_job_factor: int = 1
    # ``nodes`` as a set: ``contains`` is called per node over whole clusters (a tuple
    # scan made building the scheduler's node table quadratic: 1.4 s at 10,000 nodes)
    _members: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_members", frozenset(self.nodes))

    def contains(self, node_name: str) -> bool:
        return not self._members or node_name in self._members

    @property
    def default_limit_s(self) -> int:
        """The time limit of a job that names none: DefaultTime, else MaxTime (0:
        unlimited)."""
        return self.default_time_s or self.max_time_s
