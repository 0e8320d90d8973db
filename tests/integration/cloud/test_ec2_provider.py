"""The EC2 provider against moto's real EC2 server: the conformance suite, then what is
EC2's own (tags, user data, errors, settings)."""

from __future__ import annotations

import base64
import logging
import os
import re
import shlex
import stat
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest

from hal.cli.parser import build_parser
from hal.cloud.ec2 import Ec2Provider
from hal.cloud.provider import STOPPING, Instance, Launch, ProviderError
from hal.core.errors import InvalidRequest
from hal.core.node_groups import NodeGroup
from hal.core.resources import ResourceVector
from hal.testing.cloud import CHECKS, FAILURE_CHECKS, GROUP_CHECKS, StandIn, limit, wait_for
from hal.testing.live import free_port

MakeGroup = Callable[..., NodeGroup]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_conformance(
    make_group: MakeGroup, check: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    check(Ec2Provider(make_group(**settings), cluster), launch)


@pytest.mark.parametrize("check", GROUP_CHECKS, ids=lambda c: c.__name__)
def test_group_conformance(
    make_group: MakeGroup, check: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    check(Ec2Provider, make_group(**settings), cluster, launch)


@pytest.mark.parametrize("check", FAILURE_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("market", ["on_demand", "spot"])
def test_failure_conformance(
    make_group: MakeGroup,
    check: Any,
    market: str,
    ec2: Any,
    settings: dict[str, str],
    cluster: str,
    launch: Launch,
) -> None:
    """An instance terminated behind the provider's back (as EC2 takes a spot instance
    back, or loses a machine) is no longer listed. moto never answers that it is out of
    capacity, so the capacity check skips (CAPACITY_CODES are EC2's documented codes)."""
    group = replace(make_group(**settings), market=market)
    stand_in = StandIn(
        name="moto's EC2 server",
        provider=lambda: Ec2Provider(group, cluster),
        lose=lambda instance: ec2.terminate_instances(InstanceIds=[instance.id]),
        lacks=(("full", "moto never answers InsufficientInstanceCapacity"),),
    )
    if (reason := limit(check, stand_in)) is not None:
        pytest.skip(reason)
    check(stand_in, launch)


def _described(ec2: Any, instance_id: str) -> dict[str, Any]:
    reply = ec2.describe_instances(InstanceIds=[instance_id])
    return dict(reply["Reservations"][0]["Instances"][0])


def _user_data(ec2: Any, instance_id: str) -> str:
    reply = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(reply["UserData"]["Value"]).decode()


def test_instances_carry_the_tags_and_settings(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    provider = Ec2Provider(make_group(**settings), cluster)
    [instance] = provider.create(["burst2"], launch)
    try:
        raw = _described(ec2, instance.id)
        assert {t["Key"]: t["Value"] for t in raw["Tags"]} == {
            "hal:cluster": cluster,
            "hal:group": "burst",
            "hal:node": "burst2",
            "Name": "burst2",
        }
        assert raw["ImageId"] == settings["image_id"]
        assert raw["InstanceType"] == "c7i.xlarge"
        assert instance.created_at == raw["LaunchTime"].timestamp()
    finally:
        provider.remove([instance])


def test_optional_settings_reach_ec2(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.7.1.0/24")["Subnet"]["SubnetId"]
    groups = [
        ec2.create_security_group(GroupName=f"{cluster}-{i}", Description="t", VpcId=vpc)["GroupId"]
        for i in (1, 2)
    ]
    ec2.create_key_pair(KeyName=cluster)
    group = make_group(
        **settings, subnet_id=subnet, security_group_ids=" , ".join(groups), key_name=cluster
    )
    provider = Ec2Provider(group, cluster)
    [instance] = provider.create(["burst1"], launch)
    try:
        raw = _described(ec2, instance.id)
        assert raw["SubnetId"] == subnet
        assert sorted(g["GroupId"] for g in raw["SecurityGroups"]) == sorted(groups)
        assert raw["KeyName"] == cluster
    finally:
        provider.remove([instance])


def test_user_data_starts_the_agent(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str, tmp_path: Path
) -> None:
    """The default script is valid sh, and run with a stand-in ``hal`` on PATH it passes
    the token in the environment and flags ``hal agent`` accepts, quoted intact."""
    launch = Launch(server_url="http://head.example:8080/a b", token="t0k'en $HOME")
    provider = Ec2Provider(make_group(**settings), cluster)
    [instance] = provider.create(["burst3"], launch)
    try:
        script = _user_data(ec2, instance.id)
    finally:
        provider.remove([instance])
    assert script.startswith("#!/bin/sh\n")
    path = tmp_path / "user-data"
    path.write_text(script)
    subprocess.run(["sh", "-n", str(path)], check=True)
    stand_in = tmp_path / "bin" / "hal"
    stand_in.parent.mkdir()
    out = tmp_path / "out"
    stand_in.write_text(f'#!/bin/sh\nprintf "%s\\n" "$HAL_TOKEN" "$@" > {shlex.quote(str(out))}\n')
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{stand_in.parent}:{os.environ['PATH']}"}
    subprocess.run(["sh", str(path)], check=True, env=env)
    token, *argv = out.read_text().splitlines()
    assert token == launch.token
    assert argv == [
        "agent",
        "--server",
        launch.server_url,
        "--name",
        "burst3",
        "--cpus",
        "4",
        "--memory",
        "16384M",
        "--gpus",
        "1",
        "--features",
        "cloud,c7i",
        "--gpu-type",
        "nvidia_a100",
    ]
    args = build_parser(argv).parse_args(argv)
    assert (args.server, args.name, args.cpus, args.memory) == (
        [launch.server_url],
        "burst3",
        4,
        "16384M",
    )
    assert (args.gpus, args.features, args.gpu_type) == (1, "cloud,c7i", "nvidia_a100")


def test_user_data_gives_the_agent_the_site_ca(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, tmp_path: Path
) -> None:
    """For an https server the launch's CA is written on the instance and the agent
    trusts it (``HAL_CA_FILE``): a PEM's newlines and any quote survive the script."""
    pem = "-----BEGIN CERTIFICATE-----\nMIIB'x\n-----END CERTIFICATE-----\n"
    launch = Launch(server_url="https://a:8470,https://b:8470", token="t", ca_pem=pem)
    script = Ec2Provider(make_group(**settings), cluster).render("burst1", launch)
    etc = tmp_path / "etc"
    path = tmp_path / "user-data"
    path.write_text(script.replace("/etc/hal", str(etc)))  # not this machine's /etc
    stand_in = tmp_path / "bin" / "hal"
    stand_in.parent.mkdir()
    out = tmp_path / "out"
    stand_in.write_text(f'#!/bin/sh\nprintf "%s\\n" "$HAL_CA_FILE" "$3" > {out}\n')
    stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in.parent}:{os.environ['PATH']}"}
    env.pop("HAL_CA_FILE", None)
    subprocess.run(["sh", str(path)], check=True, env=env)
    assert out.read_text().splitlines() == [str(etc / "ca.pem"), launch.server_url]
    assert (etc / "ca.pem").read_text() == pem


def test_default_user_data_offers_no_gpus_and_features_the_group_lacks(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    """``--gpus 0``, so the agent does not offer the GPUs it finds; no ``--features``."""
    small = ResourceVector(cpus=2, memory_bytes=1 << 30)
    group = replace(make_group(**settings), features=(), resources=small, gpu_model="")
    script = Ec2Provider(group, cluster).render("burst1", launch)
    assert "--features" not in script and "--gpu-type" not in script
    assert script.endswith("--cpus 2 --memory 1024M --gpus 0\n")


def test_a_user_data_template_is_filled_in(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    template = "#!/bin/bash\nrun {node} {gpu_type} {gpus} {features} {token} {{literal}}\n"
    provider = Ec2Provider(make_group(**settings, user_data=template), cluster)
    [instance] = provider.create(["burst1"], launch)
    try:
        assert _user_data(ec2, instance.id) == (
            "#!/bin/bash\nrun burst1 nvidia_a100 1 cloud,c7i agent-token-123 {literal}\n"
        )
    finally:
        provider.remove([instance])


def test_a_bad_placeholder_is_refused(
    make_group: MakeGroup, settings: dict[str, str], cluster: str
) -> None:
    with pytest.raises(InvalidRequest, match=r"user_data.*'nodes'.*\{node\}"):
        Ec2Provider(make_group(**settings, user_data="hal agent --name {nodes}"), cluster)


def test_instances_without_this_clusters_and_groups_tags_are_not_listed(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    def run(tags: dict[str, str]) -> str:
        spec = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
        reply = ec2.run_instances(
            ImageId=settings["image_id"], MinCount=1, MaxCount=1, TagSpecifications=spec
        )
        return str(reply["Instances"][0]["InstanceId"])

    strangers = [
        run({"hal:cluster": cluster, "hal:node": "burst1"}),  # no group
        run({"hal:group": "burst", "hal:node": "burst1"}),  # no cluster
        run({"hal:cluster": cluster.upper(), "hal:group": "burst", "hal:node": "burst1"}),
        run({"Name": "burst1"}),
    ]
    provider = Ec2Provider(make_group(**settings), cluster)
    try:
        [mine] = provider.create(["burst1"], launch)
        seen = wait_for(provider, lambda seen: len(seen) >= 1, 30)
        assert [i.id for i in seen] == [mine.id]
        provider.remove(seen)
    finally:
        ec2.terminate_instances(InstanceIds=strangers)


def test_a_stopped_instance_is_listed_as_stopping(
    make_group: MakeGroup, ec2: Any, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    provider = Ec2Provider(make_group(**settings), cluster)
    [instance] = provider.create(["burst1"], launch)
    try:
        ec2.stop_instances(InstanceIds=[instance.id])
        [seen] = wait_for(provider, lambda seen: [i.state for i in seen] == [STOPPING], 30)
        assert seen.id == instance.id
    finally:
        provider.remove([instance])
    wait_for(provider, lambda seen: not seen, 30, "a stopped instance terminated")


def test_removing_a_mix_of_live_and_gone_ids_removes_the_live(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    provider = Ec2Provider(make_group(**settings), cluster)
    live = provider.create(["burst1", "burst2"], launch)
    gone = _instance("i-0123456789abcdef0")  # never was
    provider.remove([live[0], gone, live[1]])
    wait_for(provider, lambda seen: not seen, 30, "the live ones removed")


def test_an_unknown_image_is_a_provider_error(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    provider = Ec2Provider(make_group(**{**settings, "image_id": "ami-00000000deadbeef0"}), cluster)
    with pytest.raises(
        ProviderError,
        match=r"^EC2 eu-west-1 \(group burst\): could not start node burst1: "
        r"InvalidAMIID\.NotFound: .*ami-00000000deadbeef0",
    ):
        provider.create(["burst1", "burst2"], launch)
    assert provider.instances() == []


def test_when_a_later_launch_fails_the_started_ones_are_returned(
    make_group: MakeGroup,
    ec2: Any,
    settings: dict[str, str],
    cluster: str,
    launch: Launch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The instance profile is deleted after the first launch (as an operator might):
    the first instance is returned, the failure logged, the third name not tried."""
    iam = boto3.client("iam", region_name="eu-west-1", endpoint_url=settings["endpoint_url"])
    iam.create_instance_profile(InstanceProfileName=cluster)
    group = make_group(**settings, iam_instance_profile=cluster)
    provider = Ec2Provider(group, cluster)

    def delete_profile(**_: Any) -> None:
        provider.client.meta.events.unregister("after-call.ec2.RunInstances", delete_profile)
        iam.delete_instance_profile(InstanceProfileName=cluster)

    provider.client.meta.events.register("after-call.ec2.RunInstances", delete_profile)
    with caplog.at_level(logging.WARNING, logger="hal.cloud.ec2"):
        started = provider.create(["burst1", "burst2", "burst3"], launch)
    assert [i.node for i in started] == ["burst1"]
    profile = _described(ec2, started[0].id)["IamInstanceProfile"]["Arn"]
    assert profile.endswith(f"instance-profile/{cluster}")
    assert "burst2: NoSuchEntity: Instance profile" in caplog.text
    assert "1 of 3 started" in caplog.text
    [seen] = wait_for(provider, lambda seen: len(seen) == 1, 30)
    provider.remove([seen])


def test_an_unreachable_endpoint_is_a_provider_error(
    make_group: MakeGroup, aws: None, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    provider = Ec2Provider(make_group(**{**settings, "endpoint_url": url}), cluster)
    # (a create lists first: a name with an instance gets it back)
    with pytest.raises(
        ProviderError, match=r"could not list .*Could not connect.*" + re.escape(url)
    ):
        provider.create(["burst1"], launch)
    with pytest.raises(ProviderError, match=r"could not list instances.*Could not connect"):
        provider.instances()
    with pytest.raises(ProviderError, match="Could not connect"):
        provider.remove([_instance("i-0123456789abcdef0")])


def _instance(instance_id: str) -> Instance:
    return Instance(id=instance_id, node="burst1", group="burst", state="running", created_at=0.0)


def test_missing_credentials_are_a_provider_error(
    make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch, settings: dict[str, str], cluster: str
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    provider = Ec2Provider(make_group(**settings), cluster)
    with pytest.raises(ProviderError, match=r"NoCredentialsError.*AWS_ACCESS_KEY_ID"):
        provider.instances()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"imageid": "ami-1"},
            r"'burst'.*unknown setting 'imageid' \(did you mean 'image_id'\?\).*region, image_id",
        ),
        (
            {"image_id": None},
            r"'burst'.*'image_id' is required.*required: region, image_id, instance_type",
        ),
        ({"region": ""}, r"'burst'.*'region' is required"),
    ],
)
def test_unknown_or_missing_settings_are_refused(
    make_group: MakeGroup, change: dict[str, str | None], message: str, cluster: str
) -> None:
    settings = {"region": "eu-west-1", "image_id": "ami-1", "instance_type": "t3.micro"}
    for key, value in change.items():
        if value is None:
            del settings[key]
        else:
            settings[key] = value
    with pytest.raises(InvalidRequest, match=message) as refused:
        Ec2Provider(make_group(**settings), cluster)
    assert refused.value.field == f"cloud.groups.burst.ec2.{next(iter(change))}"


def test_a_group_of_another_provider_is_refused(make_group: MakeGroup, cluster: str) -> None:
    with pytest.raises(InvalidRequest, match="provider 'local', not ec2"):
        Ec2Provider(make_group(provider="local"), cluster)


def test_default_user_data_gives_the_groups_gpu_type(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, launch: Launch
) -> None:
    """A job's ``--gres=gpu:a100:1`` must match the node made for it, whatever NVML
    calls the GPU: the agent is told the group's type."""
    group = replace(make_group(**settings), gpu_model="nvidia_a100")
    script = Ec2Provider(group, cluster).render("burst1", launch)
    argv = shlex.split(script.splitlines()[-1])[2:]  # (after `exec hal`)
    args = build_parser(argv).parse_args(argv)
    assert (args.gpus, args.gpu_type) == (1, "nvidia_a100")
