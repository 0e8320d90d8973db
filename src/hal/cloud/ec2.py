"""The EC2 provider: one EC2 instance per node, found again by its tags.

Each instance carries the tags ``hal:cluster``, ``hal:group``, ``hal:node`` and ``Name``;
listing filters on them, so the tags are the only record (a restarted server finds its
instances by listing). The instance's user data is a shell script that starts
``hal agent`` joining as the node's name (``DEFAULT_USER_DATA``, or the group's
``user_data`` template).

A spot group (``market = "spot"``) asks for one-time spot instances that EC2 terminates
when it takes them back, at most ``max_price`` an hour where the group sets one; its
instances carry the tag ``hal:market`` and are listed with ``market="spot"``. Its
price is read from EC2's spot price history (``prices``); an on-demand group's is the
configured one.

``create`` lists first and gives back the instance a name already has, so a create
retried after its answer was lost launches nothing new; a ``RunInstances`` that failed
is retried with the same ``ClientToken``, so one EC2 started without answering is not
started twice. Credentials come from boto3's usual chain (environment
variables, ``~/.aws``, an instance role); each provider has its own boto3 session, so
nothing is shared between providers or with other code.

The user data holds the agent token: anyone who may call ``DescribeInstanceAttribute``
or reach the instance's metadata service can read it. Give the group an agent token of
its own (``hal user add NAME --agent``) and keep the IAM policy narrow.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, cast

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from hal.cloud.provider import (
    PENDING,
    RUNNING,
    STOPPING,
    CapacityError,
    Instance,
    Launch,
    Price,
    ProviderError,
    check_known_settings,
)
from hal.core.errors import InvalidRequest
from hal.core.node_groups import ON_DEMAND, SPOT, NodeGroup

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.literals import InstanceTypeType
    from mypy_boto3_ec2.type_defs import (
        FilterTypeDef,
        InstanceTypeDef,
        RunInstancesRequestTypeDef,
    )

log = logging.getLogger("hal.cloud.ec2")

REQUIRED = ("region", "image_id", "instance_type")
OPTIONAL = (
    "endpoint_url",  # another EC2 endpoint (a VPC endpoint, moto in tests)
    "subnet_id",
    "security_group_ids",  # comma-separated
    "key_name",
    "iam_instance_profile",  # the profile's name
    "user_data",  # a template with PLACEHOLDERS; default: DEFAULT_USER_DATA
)
KNOWN = REQUIRED + OPTIONAL
PLACEHOLDERS = (
    "server_url",
    "node",
    "token",
    "cpus",
    "memory_mib",
    "gpus",
    "features",
    "gpu_type",
)
# states of instances not yet gone; "terminated" ones are gone
LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")
# EC2's answers that it has no machines for the request now (or none at the spot
# price): another group may have some
CAPACITY_CODES = (
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientCapacity",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "InsufficientFreeAddressesInSubnet",
)
SPOT_HISTORY_S = 6 * 3600.0  # how far back the spot price history is read

IMDS_URL = "http://169.254.169.254"  # the instance metadata service, on every EC2 instance

DEFAULT_USER_DATA = """\
#!/bin/sh
# written by HAL: run the agent that joins the control plane as node {node}
export HAL_TOKEN={token}
CA={ca_pem}  # the site CA's PEM for an https control plane ("" for none)
if [ -n "$CA" ]; then
  mkdir -p /etc/hal && printf '%s' "$CA" > /etc/hal/ca.pem && export HAL_CA_FILE=/etc/hal/ca.pem
fi
exec hal agent --server {server_url} --name {node} --cpus {cpus} --memory {memory_mib}M \
--gpus {gpus}\
"""


def default_user_data(group: NodeGroup) -> str:
    """``DEFAULT_USER_DATA``, with ``--features`` and ``--gpu-type`` where the group has
    them. The node offers what the group says, as the autoscaler planned (``--gpus 0``
    too: without it the agent would offer the GPUs NVML finds; ``--gpu-type``: a job's
    ``--gres=gpu:TYPE`` must match the node made for it, whatever NVML calls it). A spot
    group's agent reads its interruption notices (``--interruption-notice``)."""
    text = DEFAULT_USER_DATA
    if group.features:
        text += " --features {features}"
    if group.gpu_model:
        text += " --gpu-type {gpu_type}"
    if group.market == SPOT:  # the two-minute notice, from the instance's metadata service
        text += " --interruption-notice " + IMDS_URL
    return text + "\n"


class Ec2Provider:
    """Creates, lists and removes the EC2 instances of one node group of one cluster."""

    def __init__(self, group: NodeGroup, cluster: str) -> None:
        self.group = group
        self.cluster = cluster
        self.settings = _checked_settings(group)
        self.user_data = self.settings.get("user_data") or default_user_data(group)
        _check_template(group, self.user_data)
        session = boto3.session.Session()
        # a few quick retries: the autoscaler tries again on its next pass anyway
        config = Config(
            retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30
        )
        self._where = f"EC2 {self.settings['region']} (group {group.name})"
        self.client: EC2Client = session.client(
            "ec2",
            region_name=self.settings["region"],
            endpoint_url=self.settings.get("endpoint_url") or None,
            config=config,
        )
        # node → the ClientToken of its RunInstances that failed: the next try sends it
        # again, so an instance EC2 started without answering is given back, not doubled
        self._tokens: dict[str, str] = {}

    def create(self, names: Sequence[str], launch: Launch) -> list[Instance]:
        """One ``RunInstances`` per name (a name with an instance already gets that one
        back). A failure stops the rest (capacity or quota would refuse them too): the
        instances already started are returned and the failure logged; it is raised
        only when none started."""
        if not names:
            return []
        have = {i.node: i for i in self.instances() if i.state != STOPPING}
        started: list[Instance] = []
        for name in names:
            if name in have:
                started.append(have[name])
                self._tokens.pop(name, None)  # (a failed call's instance, found)
                continue
            token = self._tokens.setdefault(name, f"hal-{uuid.uuid4().hex}")
            request = self._request(name, launch)
            request["ClientToken"] = token
            try:
                reply = self.client.run_instances(**request)
            except (ClientError, BotoCoreError) as err:
                error = _provider_error(f"{self._where}: could not start node {name}", err)
                if not started:
                    raise error from err
                log.warning("%s; %d of %d started", error, len(started), len(names))
                break
            del self._tokens[name]
            started += [self._instance(i) for i in reply["Instances"]]
        return started

    def prices(self) -> list[Price]:
        """A spot group's price: the latest of EC2's spot price history for the
        instance type, in the subnet's zone where the group names a subnet, else the
        cheapest zone's. An on-demand group's: its configured ``price_per_hour``."""
        if self.group.market != SPOT:
            return [Price(self.group.name, self.group.price_per_hour, "config", time.time())]
        zone = self._zone()
        now = datetime.now(UTC)
        latest: dict[str, tuple[datetime, float]] = {}
        try:
            pages = self.client.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=[cast("InstanceTypeType", self.settings["instance_type"])],
                ProductDescriptions=["Linux/UNIX"],
                StartTime=now - timedelta(seconds=SPOT_HISTORY_S),
                EndTime=now,
                Filters=[{"Name": "availability-zone", "Values": [zone]}] if zone else [],
            )
            for page in pages:
                for entry in page["SpotPriceHistory"]:
                    where, when = entry.get("AvailabilityZone", ""), entry.get("Timestamp")
                    if when is None or "SpotPrice" not in entry:
                        continue
                    if where not in latest or when > latest[where][0]:
                        latest[where] = (when, float(entry["SpotPrice"]))
        except (ClientError, BotoCoreError, ValueError) as err:
            raise _provider_error(f"{self._where}: could not read the spot prices", err) from err
        if not latest:
            raise ProviderError(
                f"{self._where}: EC2 has no spot price for {self.settings['instance_type']}"
                f"{' in ' + zone if zone else ''} (is the type offered there?)"
            )
        where, (when, price) = min(latest.items(), key=lambda kv: (kv[1][1], kv[0]))
        return [
            Price(
                self.group.name,
                price,
                f"ec2 spot price history ({where})",
                when.timestamp(),
            )
        ]

    def _zone(self) -> str:
        """The availability zone of the group's subnet ("" without one)."""
        subnet = self.settings.get("subnet_id", "")
        if not subnet:
            return ""
        try:
            reply = self.client.describe_subnets(SubnetIds=[subnet])
        except (ClientError, BotoCoreError) as err:
            raise _provider_error(f"{self._where}: could not read subnet {subnet}", err) from err
        return str(reply["Subnets"][0].get("AvailabilityZone", ""))

    def instances(self) -> list[Instance]:
        """The group's instances of this cluster, from their tags."""
        filters: list[FilterTypeDef] = [
            {"Name": "tag:hal:cluster", "Values": [self.cluster]},
            {"Name": "tag:hal:group", "Values": [self.group.name]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        found: list[Instance] = []
        try:
            for page in self.client.get_paginator("describe_instances").paginate(Filters=filters):
                for reservation in page["Reservations"]:
                    found += [self._instance(i) for i in reservation["Instances"]]
        except (ClientError, BotoCoreError) as err:
            raise _provider_error(f"{self._where}: could not list instances", err) from err
        return found

    def remove(self, instances: Sequence[Instance]) -> None:
        """Terminate the instances in one call. EC2 refuses the whole call when one id
        is unknown (gone long ago); then each is terminated alone, skipping the gone."""
        ids = [i.id for i in instances]
        if not ids:
            return
        try:
            self._terminate(ids)
        except _Gone:
            if len(ids) > 1:
                for instance_id in ids:
                    with contextlib.suppress(_Gone):
                        self._terminate([instance_id])

    def _terminate(self, ids: list[str]) -> None:
        try:
            self.client.terminate_instances(InstanceIds=ids)
        except ClientError as err:
            if _code(err) == "InvalidInstanceID.NotFound":
                raise _Gone from err
            raise _provider_error(f"{self._where}: could not remove {', '.join(ids)}", err) from err
        except BotoCoreError as err:
            raise _provider_error(f"{self._where}: could not remove {', '.join(ids)}", err) from err

    def _request(self, name: str, launch: Launch) -> RunInstancesRequestTypeDef:
        tags = {"hal:cluster": self.cluster, "hal:group": self.group.name, "hal:node": name}
        if self.group.market == SPOT:
            tags["hal:market"] = SPOT
        request: RunInstancesRequestTypeDef = {
            "ImageId": self.settings["image_id"],
            # any name: EC2 judges it (the stubs list only the types known when built)
            "InstanceType": cast("InstanceTypeType", self.settings["instance_type"]),
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": self.render(name, launch),  # boto3 encodes it in base64
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in {**tags, "Name": name}.items()],
                }
            ],
        }
        settings = self.settings
        if settings.get("subnet_id"):
            request["SubnetId"] = settings["subnet_id"]
        groups = [g.strip() for g in settings.get("security_group_ids", "").split(",")]
        if any(groups):
            request["SecurityGroupIds"] = [g for g in groups if g]
        if settings.get("key_name"):
            request["KeyName"] = settings["key_name"]
        if settings.get("iam_instance_profile"):
            request["IamInstanceProfile"] = {"Name": settings["iam_instance_profile"]}
        if self.group.market == SPOT:
            # one-time, terminated when taken back: HAL requeues the jobs, and makes
            # another node when they still wait
            request["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
            if self.group.max_price > 0:
                spot = request["InstanceMarketOptions"]["SpotOptions"]
                spot["MaxPrice"] = f"{self.group.max_price:.6f}".rstrip("0").rstrip(".")
        return request

    def render(self, name: str, launch: Launch) -> str:
        """The user data for node ``name``: the template with every value shell-quoted."""
        return self.user_data.format_map(_values(self.group, name, launch))

    def _instance(self, raw: InstanceTypeDef) -> Instance:
        tags = {t.get("Key", ""): t.get("Value", "") for t in raw.get("Tags", [])}
        state = raw.get("State", {}).get("Name", "pending")
        launched = raw.get("LaunchTime")
        return Instance(
            id=raw.get("InstanceId", ""),
            node=tags.get("hal:node", ""),
            group=tags.get("hal:group", self.group.name),
            state=PENDING if state == "pending" else RUNNING if state == "running" else STOPPING,
            created_at=launched.timestamp() if launched is not None else 0.0,
            market=SPOT if raw.get("InstanceLifecycle") == "spot" else ON_DEMAND,
        )


def _values(group: NodeGroup, name: str, launch: Launch) -> dict[str, str]:
    values = {
        "server_url": launch.server_url,
        "node": name,
        "token": launch.token,
        "cpus": str(group.resources.cpus),
        "memory_mib": str(group.resources.memory_bytes // 2**20),
        "gpus": str(group.resources.gpus),
        "features": ",".join(group.features),
        "gpu_type": group.gpu_model,
        "ca_pem": launch.ca_pem,
    }
    return {k: shlex.quote(v) for k, v in values.items()}


def _checked_settings(group: NodeGroup) -> Mapping[str, str]:
    where = f"[cloud.groups.ec2] of group {group.name!r}"
    if group.provider != "ec2":
        raise InvalidRequest(f"group {group.name!r} has provider {group.provider!r}, not ec2")
    check_known_settings(group, KNOWN)
    for key in REQUIRED:
        if not group.settings.get(key, "").strip():
            raise InvalidRequest(
                f"{where}: {key!r} is required (required: {', '.join(REQUIRED)}; "
                f"optional: {', '.join(OPTIONAL)})",
                field=f"cloud.groups.{group.name}.ec2.{key}",
            )
    return dict(group.settings)


def _check_template(group: NodeGroup, template: str) -> None:
    """Refuse a ``user_data`` template with an unknown placeholder now, not at launch."""
    try:
        template.format_map(_values(group, "node", Launch(server_url="http://x", token="t")))
    except (KeyError, IndexError, ValueError) as err:
        raise InvalidRequest(
            f"[cloud.groups.ec2] of group {group.name!r}: user_data has a bad placeholder "
            f"({err}); known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)} "
            "(write {{ and }} for literal braces)",
            field=f"cloud.groups.{group.name}.ec2.user_data",
        ) from None


class _Gone(Exception):
    """EC2 knows none or only some of the ids (``InvalidInstanceID.NotFound``)."""


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _provider_error(what: str, err: Exception) -> ProviderError:
    """The AWS code and message (or botocore's, when AWS was not reached), with a hint."""
    if isinstance(err, ClientError):
        message = err.response.get("Error", {}).get("Message", str(err))
        kind = CapacityError if _code(err) in CAPACITY_CODES else ProviderError
        return kind(f"{what}: {_code(err)}: {message}")
    hint = ""
    if isinstance(err, NoCredentialsError):
        hint = " (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a role)"
    return ProviderError(f"{what}: {type(err).__name__}: {err}{hint}")
