"""Node groups: nodes the compute control plane (``hal.cloud``) creates on demand.

A group is one kind of machine from one provider (local processes, EC2 instances ...):
its nodes' names, what each offers, and what one costs an hour. Its nodes do not exist
until the autoscaler creates them for waiting jobs, and are removed again once idle, as
Slurm's cloud nodes are powered up and down (``State=CLOUD``, ``ResumeProgram``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hal.core.node import Node
from hal.core.resources import ResourceVector

PROVIDERS = ("local", "ec2", "lambda")
# how a group's capacity is lent: kept until released, or interruptible (EC2 spot: cheaper,
# taken back at the provider's notice)
ON_DEMAND = "on_demand"
SPOT = "spot"
MARKETS = (ON_DEMAND, SPOT)
# the providers that lend interruptible capacity (Lambda Cloud lends none)
SPOT_PROVIDERS = ("ec2", "local")  # local: agents with an EC2 metadata stand-in each


@dataclass(frozen=True, slots=True)
class NodeGroup:
    name: str
    provider: str  # one of PROVIDERS
    nodes: tuple[str, ...]  # the names its nodes take; so also its most nodes
    resources: ResourceVector  # what each node offers to jobs
    features: tuple[str, ...] = ()
    gpu_model: str = ""
    price_per_hour: float = 0.0  # the configured price; a provider's published one wins
    market: str = ON_DEMAND  # one of MARKETS
    max_price: float = 0.0  # spot: the most it pays an hour; 0: no maximum
    # an idle node is removed after this (Slurm's SuspendTime); 0: never
    idle_seconds: float = 300.0
    # a node not joined this long after its creation is removed, and the group rests as
    # long before it is tried again (Slurm's ResumeTimeout)
    boot_timeout_seconds: float = 300.0
    # the expected time from asking for a node to its agent joining, until joins are seen
    # (the burst decision, ``hal.cloud.burst``)
    boot_seconds: float = 120.0
    # spot: how often a node is taken back, per node-hour (an estimate: EC2 publishes
    # only ranges, the Spot Instance Advisor's "frequency of interruption")
    interruption_rate: float = 0.0
    # the data plane's cache instance its nodes read through ("": none, everything comes
    # from the origin), and what moving a GB of inputs to them costs besides
    data_cache: str = ""
    egress_per_gb: float = 0.0
    # the provider's own settings ([cloud.groups.ec2]: region, image_id ...)
    settings: Mapping[str, str] = field(default_factory=dict)

    def template(self, name: str) -> Node:
        """The node ``name`` will be once it joined, as the scheduler will see it."""
        return Node(
            name=name,
            resources=self.resources,
            features=self.features,
            gpu_model=self.gpu_model,
        )
