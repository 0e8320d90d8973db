"""The Lambda Cloud provider against Prism's mock of Lambda's published API contract:
every request it sends is checked against the contract (``prism_client`` fails a test
on a violation), and it must parse the contract's example answers (and the named
examples the tests' copy of the contract adds: conftest.ERROR_EXAMPLES, LISTING).
Prism keeps no state (a launch is not listed afterwards), so the conformance checks
that need state skip, saying so; docs/admin/cloud.md has the table of what each
stand-in proves."""

from __future__ import annotations

import json
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from hal.cloud.lambda_cloud import LambdaProvider
from hal.cloud.provider import CapacityError, Instance, Launch, Provider, ProviderError
from hal.cloud.providers import make_provider
from hal.core.errors import InvalidRequest
from hal.core.node_groups import NodeGroup
from hal.testing.cloud import (
    CHECKS,
    FAILURE_CHECKS,
    GROUP_CHECKS,
    STATE,
    StandIn,
    limit,
)
from hal.testing.live import free_port

MakeGroup = Callable[..., NodeGroup]
Client = Callable[..., tuple[httpx.Client, Any]]
NO_STATE = (
    STATE,
    "Prism answers each call with the contract's example and keeps no state: "
    "an instance launched is not listed afterwards",
)


def _stand_in(
    make_group: MakeGroup, settings: dict[str, str], cluster: str, client: Client
) -> StandIn:
    def provider(**more: str) -> Provider:
        return LambdaProvider(
            make_group(provider="lambda", **{**settings, **more}), cluster, client()[0]
        )

    return StandIn(
        name="Prism (Lambda's contract)",
        provider=provider,
        # the contract's example type has capacity in us-tx-1 only
        full=lambda: provider(regions="us-az-1"),
        lacks=(NO_STATE,),
    )


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_conformance(
    make_group: MakeGroup,
    check: Any,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    stand_in = _stand_in(make_group, lambda_settings, cluster, prism_client)
    if (reason := limit(check, stand_in)) is not None:
        pytest.skip(reason)
    check(stand_in.provider(), launch)


@pytest.mark.parametrize("check", GROUP_CHECKS, ids=lambda c: c.__name__)
def test_group_conformance(
    make_group: MakeGroup,
    check: Any,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    stand_in = _stand_in(make_group, lambda_settings, cluster, prism_client)
    if (reason := limit(check, stand_in)) is not None:
        pytest.skip(reason)

    def make(group: NodeGroup, cluster: str) -> Provider:
        return LambdaProvider(group, cluster, prism_client()[0])

    check(make, make_group(provider="lambda", **lambda_settings), cluster, launch)


@pytest.mark.parametrize("check", FAILURE_CHECKS, ids=lambda c: c.__name__)
def test_failure_conformance(
    make_group: MakeGroup,
    check: Any,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    stand_in = _stand_in(make_group, lambda_settings, cluster, prism_client)
    if (reason := limit(check, stand_in)) is not None:
        pytest.skip(reason)
    check(stand_in, launch)


def test_launch_speaks_the_contract(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    """A create reads the instance types, lists, then launches in the first region the
    types say has room (us-az-1 has none for the example type), naming the instance so
    it is found again; Prism's answer (the example id) becomes the instance."""
    client, traffic = prism_client()
    group = make_group(provider="lambda", **lambda_settings)
    provider = LambdaProvider(group, cluster, client)
    [made] = provider.create(["burst2"], launch)
    calls = [(method, path) for method, path, _ in traffic.requests]
    assert calls == [
        ("GET", "/instance-types"),
        ("GET", "/instances"),
        ("POST", "/instance-operations/launch"),
    ]
    body = traffic.requests[-1][2]
    assert body["region_name"] == "us-tx-1"
    assert body["instance_type_name"] == "gpu_1x_a100"
    assert body["ssh_key_names"] == ["hal"]
    assert body["quantity"] == 1
    assert body["name"] == f"hal/{cluster}/burst/burst2/{int(made.created_at)}"
    assert len(body["name"]) <= 64
    assert made.node == "burst2" and made.group == "burst"
    assert made.id == "0920582c7ff041399e34823a0be62549"  # the contract's example id


def test_listing_keeps_this_clusters_and_groups_instances_by_their_names(
    make_group: MakeGroup, lambda_settings: dict[str, str], prism_client: Client
) -> None:
    """The tests' listing (conftest.LISTING, checked by Prism against the contract's
    instance schema): of cluster "prism", group burst's instances not terminated, with
    their states and launch times from their names; not another group's, another
    cluster's, or one HAL did not name."""
    client, traffic = prism_client()
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), "prism", client)
    seen = provider.instances()
    launched = 1_760_000_000
    assert [(i.id[-1], i.node, i.group, i.state, i.created_at) for i in seen] == [
        ("1", "burst1", "burst", "running", launched),
        ("2", "burst2", "burst", "pending", launched + 1),
        ("3", "burst3", "burst", "stopping", launched + 2),
    ]
    assert [(m, p) for m, p, _ in traffic.requests] == [("GET", "/instances")]
    assert [a for a in traffic.answers if "/instances" in a] == []
    other = LambdaProvider(make_group(provider="lambda", **lambda_settings), "elsewhere", client)
    assert other.instances() == []


def test_a_create_retried_for_a_name_listed_launches_nothing(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    launch: Launch,
    prism_client: Client,
) -> None:
    """burst1 is listed (its create's answer was lost): a create of burst1 and burst3
    gives burst1's instance back and launches burst3 only (its listed instance is
    being terminated)."""
    client, traffic = prism_client()
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), "prism", client)
    [kept] = [i for i in provider.instances() if i.node == "burst1"]
    traffic.requests.clear()
    made = provider.create(["burst1", "burst3"], launch)
    assert made[0] == kept
    assert made[1].node == "burst3" and made[1].state == "pending"
    launched = [b["name"] for _, p, b in traffic.requests if p.endswith("/launch")]
    assert launched == [f"hal/prism/burst/burst3/{int(made[1].created_at)}"]


def test_remove_terminates_in_one_call(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    client, traffic = prism_client()
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), cluster, client)
    made = provider.create(["burst1"], launch)
    traffic.requests.clear()
    provider.remove(made)
    provider.remove([])  # nothing: no call
    assert traffic.requests == [
        ("POST", "/instance-operations/terminate", {"instance_ids": [made[0].id]})
    ]


def test_instances_lambda_knows_no_more_are_skipped_on_removal(
    make_group: MakeGroup, lambda_settings: dict[str, str], cluster: str, prism_client: Client
) -> None:
    """Terminating answered 404 (an id Lambda knows no more): each id is tried alone,
    and those answered 404 too are taken as gone."""
    client, traffic = prism_client(prefer="code=404", only="/instance-operations/terminate")
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), cluster, client)
    gone = [Instance(f"{i}" * 32, f"burst{i}", "burst", "running", 0.0) for i in (1, 2)]
    provider.remove(gone)
    assert [b["instance_ids"] for _, _, b in traffic.requests] == [
        ["1" * 32, "2" * 32],
        ["1" * 32],
        ["2" * 32],
    ]
    client, _ = prism_client(prefer="code=500", only="/instance-operations/terminate")
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), cluster, client)
    with pytest.raises(ProviderError, match=r"could not remove 1+: HTTP 500"):
        provider.remove(gone[:1])


def test_prices_come_from_the_instance_types(
    make_group: MakeGroup, lambda_settings: dict[str, str], cluster: str, prism_client: Client
) -> None:
    """The price is the instance type's ``price_cents_per_hour`` in dollars, read now;
    the contract's example writes the cents as a string, which is parsed too."""
    client, _ = prism_client()
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), cluster, client)
    before = time.time()
    [price] = provider.prices()
    offers = provider.offers()
    assert price.price_per_hour == offers["gpu_1x_a100"].cents_per_hour / 100 > 0
    assert price.currency == "USD"
    assert price.source == "lambda instance types (gpu_1x_a100)"
    assert before <= price.observed_at <= time.time()
    assert offers["gpu_4x_a6000"].regions == ("us-az-1",)


def test_capacity_in_no_region_raises_a_capacity_error(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    """Where none of the group's regions has capacity for its type, nothing is launched
    and the error names the regions tried and those that have capacity."""
    client, traffic = prism_client()
    settings = {**lambda_settings, "regions": "us-az-1,us-east-1"}
    provider = LambdaProvider(make_group(provider="lambda", **settings), cluster, client)
    with pytest.raises(CapacityError) as caught:
        provider.create(["burst1", "burst2"], launch)
    assert caught.value.capacity
    assert "us-az-1 (none listed), us-east-1 (none listed)" in str(caught.value)
    assert "capacity in us-tx-1" in str(caught.value)
    assert ("POST", "/instance-operations/launch") not in [(m, p) for m, p, _ in traffic.requests]


def test_an_error_answer_is_parsed_and_not_capacity(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    """A 400 answer other than insufficient capacity is a ProviderError with the code,
    message and suggestion, not a capacity error: the group rests, and no other region
    is tried for it."""
    client, traffic = prism_client(prefer="code=400", only="/instance-operations/launch")
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), cluster, client)
    with pytest.raises(ProviderError) as caught:
        provider.create(["burst1"], launch)
    assert not caught.value.capacity
    text = str(caught.value)
    assert "could not launch node burst1 in us-tx-1: HTTP 400 global/invalid-parameters" in text
    assert "Invalid instance type name (Check GET /instance-types for the names)" in text
    launches = [b for m, p, b in traffic.requests if p == "/instance-operations/launch"]
    assert [b["region_name"] for b in launches] == ["us-tx-1"]
    # the example fits the contract's error schema
    assert [a for a in traffic.answers if "/launch" in a] == []


def test_a_region_answering_insufficient_capacity_is_a_capacity_error(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    """us-tx-1 has capacity by the instance types, and answers the launch with
    insufficient capacity (it went meanwhile); us-az-1 has none listed: a capacity
    error naming both. (Moving on to the next region that has capacity is
    ``test_launch_speaks_the_contract``'s: the contract's example lists one region per
    type.)"""
    client, traffic = prism_client(
        prefer="code=400, example=insufficient-capacity", only="/instance-operations/launch"
    )
    settings = {**lambda_settings, "regions": "us-tx-1,us-az-1"}
    provider = LambdaProvider(make_group(provider="lambda", **settings), cluster, client)
    with pytest.raises(CapacityError) as caught:
        provider.create(["burst1", "burst2"], launch)
    assert "tried us-tx-1 (insufficient capacity), us-az-1 (none listed)" in str(caught.value)
    launches = [b["region_name"] for _, p, b in traffic.requests if p.endswith("/launch")]
    assert launches == ["us-tx-1"]  # burst2 is not tried once burst1 found no room
    assert [a for a in traffic.answers if "/launch" in a] == []


def test_unauthorized_says_where_the_key_comes_from(
    make_group: MakeGroup, lambda_settings: dict[str, str], cluster: str, prism_client: Client
) -> None:
    client, _ = prism_client(prefer="code=401")
    provider = LambdaProvider(make_group(provider="lambda", **lambda_settings), cluster, client)
    with pytest.raises(ProviderError, match=r"HTTP 401 .*LAMBDA_API_KEY or api_key_file"):
        provider.instances()


def test_an_unknown_instance_type_is_named(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    cluster: str,
    launch: Launch,
    prism_client: Client,
) -> None:
    client, _ = prism_client()
    settings = {**lambda_settings, "instance_type": "gpu_1x_a10O"}
    provider = LambdaProvider(make_group(provider="lambda", **settings), cluster, client)
    with pytest.raises(ProviderError, match=r"no instance type 'gpu_1x_a10O'.*gpu_1x_a100"):
        provider.create(["burst1"], launch)


def test_a_silent_endpoint_times_out(
    make_group: MakeGroup, lambda_settings: dict[str, str], cluster: str
) -> None:
    """A server that accepts and never answers: a ProviderError within the timeout."""
    with socket.socket() as quiet:
        quiet.bind(("127.0.0.1", 0))
        quiet.listen()
        url = f"http://127.0.0.1:{quiet.getsockname()[1]}"
        settings = {**lambda_settings, "endpoint_url": url, "timeout_seconds": "0.5"}
        provider = LambdaProvider(make_group(provider="lambda", **settings), cluster)
        with pytest.raises(ProviderError, match=r"no answer within 0.5 s \(GET /instances"):
            provider.instances()


def test_an_unreachable_endpoint_is_said(
    make_group: MakeGroup, lambda_settings: dict[str, str], cluster: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    settings = {**lambda_settings, "endpoint_url": url}
    provider = LambdaProvider(make_group(provider="lambda", **settings), cluster)
    with pytest.raises(ProviderError, match=f"{url} unreachable"):
        provider.instances()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"regions": ""}, "'regions' is required: write regions = "),
        ({"instance_type": " "}, "'instance_type' is required"),
        ({"ssh_key_names": "a,b"}, "exactly one key"),
        ({"region": "us-tx-1"}, "unknown setting 'region' \\(did you mean 'regions'"),
        ({"timeout_seconds": "soon"}, "timeout_seconds must be a number"),
        ({"api_key_file": "/nonexistent/key"}, "cannot read api_key_file"),
    ],
)
def test_bad_settings_are_refused(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    tmp_path: Any,
    settings: dict[str, str],
    message: str,
) -> None:
    group = make_group(provider="lambda", **{**lambda_settings, **settings})
    with pytest.raises(InvalidRequest, match=message):
        make_provider(group, "hal", tmp_path)


def test_the_key_is_a_bearer_token_from_the_environment_or_a_file(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    prism_client: Client,
) -> None:
    client, traffic = prism_client()
    LambdaProvider(make_group(provider="lambda", **lambda_settings), "hal", client).instances()
    assert traffic.auth == {"Bearer secret-test-key"}
    monkeypatch.delenv("LAMBDA_API_KEY")
    group = make_group(provider="lambda", **lambda_settings)
    with pytest.raises(InvalidRequest, match="set LAMBDA_API_KEY"):
        LambdaProvider(group, "hal")
    (tmp_path / "key").write_text("from-a-file\n")
    client, traffic = prism_client()
    group = make_group(provider="lambda", **lambda_settings, api_key_file=str(tmp_path / "key"))
    LambdaProvider(group, "hal", client).instances()
    assert traffic.auth == {"Bearer from-a-file"}


def test_names_too_long_for_lambda_are_refused(
    make_group: MakeGroup, lambda_settings: dict[str, str]
) -> None:
    group = make_group(provider="lambda", **lambda_settings)
    with pytest.raises(InvalidRequest, match="at most 64 characters"):
        LambdaProvider(group, "a-cluster-name-" + "x" * 30)


def test_the_bootstrap_starts_each_active_instances_agent_once(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    launch: Launch,
    prism_client: Client,
    tmp_path: Path,
) -> None:
    """A bootstrap program (here: one writing its environment down) runs for burst1,
    the listing's only active instance with an address, once, also after a restart
    (a new provider on the same folder, the launch read back from it); not for the
    booting or terminating ones."""
    seen = tmp_path / "seen"
    seen.mkdir()
    program = tmp_path / "join.py"
    program.write_text(
        "import json, os, sys\n"
        "path = os.path.join(sys.argv[1], os.environ['HAL_NODE'] + '-' + str(os.getpid()))\n"
        "json.dump(dict(os.environ), open(path, 'w'))\n"
    )
    command = shlex.join([sys.executable, str(program), str(seen)])
    group = make_group(provider="lambda", **lambda_settings, bootstrap=command)
    state = tmp_path / "state"
    client, _ = prism_client()
    provider = LambdaProvider(group, "prism", client, state_dir=state)
    provider.instances()  # no launch known yet: nothing is run
    assert provider.bootstrap is not None
    provider.bootstrap.wait()
    assert list(seen.iterdir()) == []
    provider.create(["burst1"], launch)  # listed already: the launch is kept, no launch
    provider.instances()
    provider.bootstrap.wait()
    [ran] = list(seen.iterdir())
    env = json.loads(ran.read_text())
    assert env["HAL_NODE"] == "burst1" and env["HAL_INSTANCE_IP"] == "10.10.10.1"
    assert env["HAL_INSTANCE_ID"] == f"{1:032x}"
    assert (env["HAL_SERVER_URL"], env["HAL_TOKEN"]) == (launch.server_url, launch.token)
    agent = shlex.split(env["HAL_AGENT_ARGS"])
    assert agent[:4] == ["--server", launch.server_url, "--name", "burst1"]
    assert agent[4:] == [
        "--cpus", "4", "--memory", "16384M", "--gpus", "1",
        "--features", "cloud,c7i", "--gpu-type", "nvidia_a100",
    ]  # fmt: skip
    assert (state / "launch.json").stat().st_mode & 0o777 == 0o600
    provider.instances()  # once
    again = LambdaProvider(group, "prism", prism_client()[0], state_dir=state)
    again.instances()  # a restarted server: once still
    assert again.bootstrap is not None
    again.bootstrap.wait()
    assert list(seen.iterdir()) == [ran]
    assert sorted(p.name for p in (state / "bootstrapped").iterdir()) == [f"{1:032x}"]


def test_a_failing_bootstrap_is_logged_with_its_log(
    make_group: MakeGroup,
    lambda_settings: dict[str, str],
    launch: Launch,
    prism_client: Client,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    command = shlex.join(["sh", "-c", "echo no route to $HAL_INSTANCE_IP; exit 3"])
    group = make_group(provider="lambda", **lambda_settings, bootstrap=command)
    provider = LambdaProvider(group, "prism", prism_client()[0], state_dir=tmp_path)
    provider.create(["burst1"], launch)
    provider.instances()
    assert provider.bootstrap is not None
    provider.bootstrap.wait()
    log = tmp_path / "bootstrap" / "burst1.log"
    assert log.read_text() == "no route to 10.10.10.1\n"
    assert f"bootstrap of node burst1 exited 3; see {log}" in caplog.text


def test_a_bootstrap_needs_a_program(
    make_group: MakeGroup, lambda_settings: dict[str, str], tmp_path: Path
) -> None:
    group = make_group(provider="lambda", **lambda_settings, bootstrap="'unclosed")
    with pytest.raises(InvalidRequest, match=r"lambda\.bootstrap: No closing quotation"):
        make_provider(group, "hal", tmp_path)
