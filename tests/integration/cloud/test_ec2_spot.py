"""EC2 spot groups against moto's EC2 server: the request EC2 gets, the instances'
lifecycle, and the price read from the spot price history. moto's spot price history
is one constant price with a fixed time stamp: these tests check that the provider
reads and parses what EC2 answers (the latest per zone, its zone and time), not a
figure."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from hal.cloud.ec2 import Ec2Provider
from hal.cloud.provider import CapacityError, Launch, ProviderError
from hal.core.node_groups import ON_DEMAND, SPOT, NodeGroup

MakeGroup = Callable[..., NodeGroup]


def _spot(make_group: MakeGroup, settings: dict[str, str], max_price: float = 0.0) -> NodeGroup:
    return replace(make_group(**settings), market=SPOT, max_price=max_price)


def test_a_spot_group_asks_for_one_time_spot_instances(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    provider = Ec2Provider(_spot(make_group, settings, max_price=0.125), cluster)
    request = provider._request("burst1", launch)
    assert request["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
            "MaxPrice": "0.125",
        },
    }
    no_max = Ec2Provider(_spot(make_group, settings), cluster)._request("burst1", launch)
    assert "MaxPrice" not in no_max["InstanceMarketOptions"]["SpotOptions"]
    on_demand = Ec2Provider(make_group(**settings), cluster)._request("burst1", launch)
    assert "InstanceMarketOptions" not in on_demand


def test_spot_instances_are_tagged_and_listed_as_spot(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    """EC2 (moto) starts them as spot instances; the listing reports their lifecycle,
    and an on-demand group's as on demand."""
    spot = Ec2Provider(_spot(make_group, settings, max_price=0.5), cluster)
    plain = Ec2Provider(replace(make_group(**settings), name="plain"), cluster)
    try:
        [made] = spot.create(["burst1"], launch)
        [other] = plain.create(["burst2"], launch)
        raw = ec2.describe_instances(InstanceIds=[made.id])["Reservations"][0]["Instances"][0]
        assert raw["InstanceLifecycle"] == "spot"
        assert {"Key": "hal:market", "Value": "spot"} in raw["Tags"]
        assert [(i.id, i.market) for i in spot.instances()] == [(made.id, SPOT)]
        assert [(i.id, i.market) for i in plain.instances()] == [(other.id, ON_DEMAND)]
    finally:
        spot.remove(spot.instances())
        plain.remove(plain.instances())


def test_the_spot_price_is_the_latest_of_the_cheapest_zone(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str
) -> None:
    provider = Ec2Provider(_spot(make_group, settings), cluster)
    history = ec2.describe_spot_price_history(
        InstanceTypes=["c7i.xlarge"], ProductDescriptions=["Linux/UNIX"]
    )["SpotPriceHistory"]
    assert history, "moto lists a spot price per zone offering the type"
    [price] = provider.prices()
    cheapest = min(float(h["SpotPrice"]) for h in history)
    zones = {h["AvailabilityZone"] for h in history if float(h["SpotPrice"]) == cheapest}
    assert price.price_per_hour == cheapest
    assert price.group == "burst" and price.currency == "USD"
    zone = price.source.removeprefix("ec2 spot price history (").removesuffix(")")
    assert zone in zones, price.source
    stamps = {h["Timestamp"].timestamp() for h in history if h["AvailabilityZone"] == zone}
    assert price.observed_at in stamps
    assert price.observed_at < time.time()  # EC2's time, not when it was read


def test_a_subnet_groups_spot_price_is_its_zones(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str
) -> None:
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    zone = f"{settings['region']}b"
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone=zone)
    group = _spot(make_group, {**settings, "subnet_id": subnet["Subnet"]["SubnetId"]})
    [price] = Ec2Provider(group, cluster).prices()
    assert price.source == f"ec2 spot price history ({zone})"


def test_an_on_demand_groups_price_is_its_configured_one(
    make_group: MakeGroup, settings: dict[str, str], cluster: str
) -> None:
    group = replace(make_group(**settings), price_per_hour=0.17)
    before = time.time()
    [price] = Ec2Provider(group, cluster).prices()
    assert (price.price_per_hour, price.source) == (0.17, "config")
    assert before <= price.observed_at <= time.time()


def test_an_unknown_type_has_no_spot_price(
    make_group: MakeGroup, settings: dict[str, str], cluster: str
) -> None:
    group = _spot(make_group, {**settings, "instance_type": "c7i.nonesuch"})
    with pytest.raises(ProviderError, match=r"no spot price for c7i\.nonesuch"):
        Ec2Provider(group, cluster).prices()


def test_a_create_retried_after_a_failure_sends_the_same_client_token(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    """A RunInstances that failed (its answer lost, say) is sent again with the same
    ClientToken, which EC2 answers with the instance it made, if it made one; once one
    succeeded, the name's next launch has a token of its own. (moto ignores the
    token: what EC2 does with it is EC2's documented behaviour, not shown here.)"""
    provider = Ec2Provider(make_group(**{**settings, "image_id": "ami-00000000"}), cluster)
    sent: list[str] = []
    provider.client.meta.events.register(
        "provide-client-params.ec2.RunInstances",
        lambda params, **_: sent.append(params["ClientToken"]),
    )
    for _ in range(2):
        with pytest.raises(ProviderError):
            provider.create(["burst1"], launch)
    good = Ec2Provider(make_group(**settings), cluster)
    good._tokens = provider._tokens
    good.client.meta.events.register(
        "provide-client-params.ec2.RunInstances",
        lambda params, **_: sent.append(params["ClientToken"]),
    )
    try:
        good.create(["burst1"], launch)
        assert sent[0] == sent[1] == sent[2] and sent[0].startswith("hal-")
        assert good._tokens == {}
    finally:
        good.remove(good.instances())


def test_capacity_codes_are_capacity_errors() -> None:
    from botocore.exceptions import ClientError

    from hal.cloud.ec2 import _provider_error

    def error(code: str) -> ProviderError:
        reply = {"Error": {"Code": code, "Message": "m"}}
        return _provider_error("x", ClientError(reply, "RunInstances"))  # type: ignore[arg-type]

    assert isinstance(error("InsufficientInstanceCapacity"), CapacityError)
    assert isinstance(error("SpotMaxPriceTooLow"), CapacityError)
    assert not error("InvalidAMIID.NotFound").capacity
