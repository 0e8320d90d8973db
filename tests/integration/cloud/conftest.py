"""Shared set-up for the cloud providers' tests: moto's real EC2 server in this process
on a free port, fake credentials, and node groups of three nodes."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hal.cloud.provider import Launch
from hal.core.node_groups import NodeGroup
from hal.core.resources import ResourceVector
from hal.testing.live import free_port

REGION = "eu-west-1"


def _group(name: str = "burst", provider: str = "ec2", **settings: str) -> NodeGroup:
    return NodeGroup(
        name=name,
        provider=provider,
        nodes=tuple(f"{name}{i}" for i in (1, 2, 3)),
        resources=ResourceVector(cpus=4, memory_bytes=16 << 30, gpus=1),
        features=("cloud", "c7i"),
        gpu_model="nvidia_a100",
        settings=settings,
    )


@pytest.fixture
def make_group() -> Callable[..., NodeGroup]:
    """``make_group(name="burst", provider="ec2", **settings)``: a group of three 4-CPU,
    16 GiB, 1-GPU nodes ``{name}1`` .. ``{name}3`` (a fixture: test modules here do not
    import this file, which would clash with the other folders' conftest modules)."""
    return _group


@pytest.fixture
def cluster() -> str:
    """A cluster name of this test's own: moto's server is shared by all tests."""
    return "test-" + uuid.uuid4().hex[:8]


@pytest.fixture
def launch() -> Launch:
    return Launch(server_url="http://head.example:8080", token="agent-token-123")


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto's EC2 server on a free port, refusing unknown image ids as EC2 does."""
    server = pytest.importorskip(
        "moto.server", reason="moto is not installed: pip install -e '.[dev]' (moto[server])"
    )
    import moto.settings

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(moto.settings, "ENABLE_AMI_VALIDATION", True)
        port = free_port()
        moto = server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        moto.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            moto.stop()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Fake credentials in the environment, and no way to the real ones."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ec2(moto_url: str, aws: None) -> Any:
    """A boto3 EC2 client of moto's server, to look behind the provider's back."""
    import boto3

    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_url)


@pytest.fixture(scope="session")
def image_id(moto_url: str) -> str:
    """One of the images moto knows (it ships Amazon's public ones; listing them takes
    a second, so once)."""
    import boto3

    ec2 = boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=moto_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


@pytest.fixture
def settings(aws: None, moto_url: str, image_id: str) -> dict[str, str]:
    """An EC2 group's settings that reach moto."""
    return {
        "region": REGION,
        "image_id": image_id,
        "instance_type": "c7i.xlarge",
        "endpoint_url": moto_url,
    }
