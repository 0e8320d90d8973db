"""The Provider protocol: what the autoscaler asks of a place nodes come from.

A provider serves one node group (``hal.core.node_groups.NodeGroup``, from ``[cloud]``):
it creates one instance per node name, lists the group's instances of this cluster, and
removes instances. The provider's own records (EC2's tags, Lambda Cloud's instance
names, the local provider's state folder) are the truth: the server keeps no table of
instances, so a restarted server finds its instances again by listing them, as
Kubernetes' cluster autoscaler does. Calls block (boto3 and httpx do); the server runs
them in a worker thread.

Every provider passes the conformance suite in ``hal.testing.cloud``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hal.core.errors import InvalidRequest, did_you_mean
from hal.core.node_groups import ON_DEMAND, NodeGroup

# what an instance is doing, as far as its provider says
PENDING = "pending"  # asked for, not yet running
RUNNING = "running"  # running (its agent may not have joined yet)
STOPPING = "stopping"  # being removed


class ProviderError(Exception):
    """A provider could not do what was asked (refused, out of capacity, unreachable).
    The message says what the provider said; the autoscaler logs it, raises an event
    and rests the group."""

    capacity = False  # the provider has no machines of the kind now (``CapacityError``)


class CapacityError(ProviderError):
    """The provider has no capacity for the group's machines now, wherever it looked
    (each of a Lambda group's regions; EC2's ``InsufficientInstanceCapacity``): the
    autoscaler tries the next group that holds the jobs in the same pass."""

    capacity = True


@dataclass(frozen=True, slots=True)
class Instance:
    id: str  # the provider's id (an EC2 instance id; the local provider's pid)
    node: str  # the node name its agent joins as
    group: str
    state: str  # PENDING, RUNNING or STOPPING
    created_at: float  # Unix time
    market: str = ON_DEMAND  # how it is lent (``hal.core.node_groups.MARKETS``)


@dataclass(frozen=True, slots=True)
class Launch:
    """What an instance's agent needs to join: the control plane's URL (or several,
    comma-separated, for a failover pair), a token, and the PEM of the CA it is to trust
    for an https server ("" for plain HTTP or a CA the image already trusts)."""

    server_url: str
    token: str
    ca_pem: str = ""


@dataclass(frozen=True, slots=True)
class Price:
    """What one of a group's nodes costs an hour, as its provider publishes it (EC2's spot
    price history, a neo-cloud's instance-type price)."""

    group: str
    price_per_hour: float  # in ``currency``
    source: str  # where it came from, e.g. "ec2 spot price history (eu-west-1a)"
    observed_at: float  # Unix time the provider gave for it (or when it was read)
    currency: str = "USD"


class Provider(Protocol):
    group: NodeGroup

    def create(self, names: Sequence[str], launch: Launch) -> list[Instance]:
        """Start one instance per name, each running an agent that joins as that name.
        Returns the instances started; raises ``ProviderError`` when none could be."""
        ...

    def instances(self) -> list[Instance]:
        """The group's instances in this cluster that are not yet gone."""
        ...

    def remove(self, instances: Sequence[Instance]) -> None:
        """Stop and delete the instances (those already gone are skipped)."""
        ...


class PricedProvider(Provider, Protocol):
    """A provider that publishes its prices; the server reads them each price interval."""

    def prices(self) -> list[Price]:
        """The group's current price(s); raises ``ProviderError`` when they cannot be read."""
        ...


def check_known_settings(group: NodeGroup, known: Sequence[str]) -> None:
    """Refuse a setting in the group's provider table that its provider does not take,
    naming the nearest it does (``[cloud.groups.ec2] imageid`` → ``image_id``)."""
    for key in group.settings:
        if key not in known:
            raise InvalidRequest(
                f"[cloud.groups.{group.provider}] of group {group.name!r}: unknown setting "
                f"{key!r}{did_you_mean(key, known)}; it takes {', '.join(known)}",
                field=f"cloud.groups.{group.name}.{group.provider}.{key}",
            )
