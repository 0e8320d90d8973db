"""``[cloud]`` of hal.toml (hal.config.cloud): its groups, and clear refusals."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from hal.config import cloud
from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest
from hal.core.resources import GiB


def example() -> dict[str, Any]:
    """The module docstring's example, so the documented config is the tested one."""
    doc = cloud.__doc__ or ""
    block = []
    for line in doc.split("::", 1)[1].splitlines()[1:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    return tomllib.loads("\n".join(block))


def test_the_documented_example_reads() -> None:
    config = config_from_dict(example()).cloud
    assert (config.interval_seconds, config.pending_seconds, config.server_url) == (10, 10, "")
    (burst,) = config.groups
    assert burst.name == "burst" and burst.provider == "ec2"
    assert burst.nodes == tuple(f"burst{i}" for i in range(1, 9))
    assert (burst.resources.cpus, burst.resources.memory_bytes) == (4, 16 * GiB)
    assert burst.features == ("cloud",) and burst.price_per_hour == 0.17
    assert burst.settings == {
        "region": "eu-west-1",
        "image_id": "ami-0abc",
        "instance_type": "c7i.xlarge",
    }
    assert burst.template("burst3").resources == burst.resources


def test_no_cloud_section_means_no_groups() -> None:
    assert config_from_dict({}).cloud.groups == ()


def refusal(table: dict[str, Any]) -> str:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"cloud": table})
    return err.value.message


def group(**changes: Any) -> dict[str, Any]:
    base = {"name": "g", "provider": "local", "nodes": "g[1-2]", "cpus": 2, "memory": "4G"}
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"groups": [group(cpu=2)]}, "cloud.groups[0].cpu: unknown key (did you mean 'cpus'?)"),
        ({"intervall_seconds": 1}, "cloud.intervall_seconds: unknown key"),
        ({"groups": [group(memory=None)]}, "cloud.groups[0].memory: is required"),
        ({"groups": [group(provider="gcp")]}, "must be one of local, ec2, lambda (got 'gcp')"),
        ({"groups": [group(market="preemptible")]}, "market: must be one of on_demand, spot"),
        (
            {"groups": [group(provider="lambda", market="spot")]},
            "provider 'lambda' lends no spot capacity (spot: ec2, local); "
            'write market = "on_demand"',
        ),
        (
            {"groups": [group(provider="ec2", market="spot", max_price="1")]},
            "max_price: must be a number",
        ),
        (
            {"groups": [group(provider="ec2", max_price=0.5)]},
            'applies to spot groups only: add market = "spot"',
        ),
        (
            {"groups": [group(ec2={"region": "x"}, provider="ec2", market="spot", max_price=-1)]},
            "max_price: must be a number >= 0",
        ),
        (
            {"groups": [group(local={"agent_args": ["a", 1]})]},
            "local.agent_args: must be a string, a number or a list of strings",
        ),
        ({"groups": [group(memory="lots")]}, "invalid --memory value 'lots'"),
        ({"groups": [group(cpus=0)]}, "cloud.groups[0].cpus: must be a whole number >= 1"),
        ({"groups": [group(features=["a b"])]}, "cloud.groups[0].features"),
        ({"groups": [group(price_per_hour=-1)]}, "must be a number >= 0"),
        ({"groups": [group(ec2={"region": "x"})]}, "the group's provider is 'local'"),
        ({"groups": [group(), group()]}, "group 'g' is named twice"),
        (
            {"groups": [group(), group(name="h", nodes="g2,h1")]},
            "node g2 is also in group 'g'",
        ),
        ({"server_url": "head:8080"}, 'must be a URL like "http://head:8080"'),
        ({"server_url": "https://a:1,b:2"}, "or several separated by commas"),
        ({"ca_file": "/nonexistent/ca.pem"}, "cannot read /nonexistent/ca.pem"),
        ({"ca_file": 3}, "must be a file's path"),
        ({"pending_seconds": -1}, "must be a number of seconds > 0"),
        ({"groups": {"name": "g"}}, "write each group as a [[cloud.groups]] table"),
    ],
)
def test_bad_groups_are_refused_saying_what_to_write(table: dict[str, Any], says: str) -> None:
    assert says in refusal(table)


def test_zero_waits_and_a_url_are_taken() -> None:
    config = config_from_dict(
        {
            "cloud": {
                "pending_seconds": 0,
                "server_url": "http://head:8080/",
                "groups": [group(idle_seconds=0)],
            }
        }
    ).cloud
    assert config.pending_seconds == 0 and config.server_url == "http://head:8080"
    assert config.groups[0].idle_seconds == 0


def test_burst_settings_read() -> None:
    from hal.core.patience import NEVER, Patience

    config = config_from_dict(
        {
            "cloud": {
                "burst_after": "0.5x",
                "burst_after_by_qos": {"scavenger": "never", "urgent": 0},
                "burst_after_by_partition": {"gpu": "1h"},
                "groups": [
                    group(
                        boot_seconds=90,
                        interruption_rate=0.02,
                        data_cache="leaf-eu",
                        egress_per_gb=0.09,
                    )
                ],
            }
        }
    ).cloud
    assert config.burst_after == Patience(0.0, 0.5)
    assert config.burst_after_by_qos == {"scavenger": Patience(NEVER), "urgent": Patience()}
    assert config.burst_after_by_partition == {"gpu": Patience(3600.0)}
    (g,) = config.groups
    assert (g.boot_seconds, g.interruption_rate, g.data_cache, g.egress_per_gb) == (
        90.0,
        0.02,
        "leaf-eu",
        0.09,
    )
    assert config_from_dict({"cloud": {"groups": [group()]}}).cloud.groups[0].boot_seconds == 120


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"burst_after": "soon"}, "cloud.burst_after: cloud.burst_after takes a duration"),
        ({"burst_after_by_qos": "never"}, "cloud.burst_after_by_qos: must be a table"),
        ({"burst_after_by_qos": {"low": True}}, "cloud.burst_after_by_qos.low: must be seconds"),
        ({"groups": [group(interruption_rate="often")]}, "interruption_rate: must be a number"),
        ({"groups": [group(egress_per_gb=-1)]}, "egress_per_gb: must be a number >= 0"),
        ({"groups": [group(data_cache=3)]}, "data_cache: must be a name"),
        ({"groups": [group(boot_seconds=-5)]}, "boot_seconds: must be a number of seconds"),
    ],
)
def test_bad_burst_settings_are_refused(table: dict[str, Any], says: str) -> None:
    assert says in refusal(table)


def test_a_spot_group_and_list_settings_are_taken() -> None:
    spot = group(provider="ec2", market="spot", max_price=0.25, ec2={"region": "r"})
    lam = group(name="h", nodes="h1", provider="lambda", **{"lambda": {"regions": ["a", "b"]}})
    groups = config_from_dict({"cloud": {"groups": [spot, lam]}}).cloud.groups
    assert (groups[0].market, groups[0].max_price) == ("spot", 0.25)
    assert (groups[1].market, groups[1].max_price) == ("on_demand", 0.0)
    assert groups[1].settings == {"regions": "a,b"}


def test_several_urls_and_a_ca_file_are_taken(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    table = {"server_url": "https://a:8470/, https://b:8470", "ca_file": str(ca)}
    config = config_from_dict({"cloud": table}).cloud
    assert config.server_url == "https://a:8470,https://b:8470"
    assert config.ca_file == str(ca)


def test_a_ca_file_without_a_certificate_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    assert "holds no PEM certificate" in refusal({"ca_file": str(key)})
