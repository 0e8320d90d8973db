"""Shared set-up for the cloud providers' tests: moto's real EC2 server in this process
on a free port, Prism's mock of Lambda Cloud's API contract, fake credentials, and node
groups of three nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
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


ROOT = Path(__file__).resolve().parents[3]
PRISM = ROOT / "tools" / "prism" / "node_modules" / ".bin" / "prism"
CONTRACT = "lambda-cloud.openapi.yaml"


def _contract() -> Path | None:
    """Lambda's API contract: ``$HAL_LAMBDA_CONTRACT``, else ``shared/spec`` beside the
    checkout or one of its parents (it is not redistributed with HAL)."""
    if os.environ.get("HAL_LAMBDA_CONTRACT"):
        return Path(os.environ["HAL_LAMBDA_CONTRACT"])
    for parent in ROOT.parents:
        if (parent / "shared" / "spec" / CONTRACT).is_file():
            return parent / "shared" / "spec" / CONTRACT
    return None


# Named examples of error answers the contract defines (``errorResponseBody``, codes of
# its ``errorCode`` enum) but gives no example of, so that a test can ask Prism for one
# (``Prefer: example=NAME``). Prism checks them against the contract's schema like any
# answer. The first is Prism's answer to ``Prefer: code=400``.
ERROR_EXAMPLES = {
    "invalid-parameters": {
        "code": "global/invalid-parameters",
        "message": "Invalid instance type name",
        "suggestion": "Check GET /instance-types for the names",
    },
    "insufficient-capacity": {
        "code": "instance-operations/launch/insufficient-capacity",
        "message": "Not enough capacity to fulfill launch request.",
        "suggestion": None,
    },
}


# An example listing (``GET /instances``) with instances HAL named, of the cluster
# "prism": group burst's burst1 (active), burst2 (booting), burst3 (terminating) and an
# old burst1 (terminated); another group's, another cluster's, and the contract's own
# example instance. Prism's default answer to the listing, as the first example.
LAUNCHED = 1_760_000_000


def _listed(name: str, status: str, n: int) -> dict[str, Any]:
    return {
        "id": f"{n:032x}",
        "name": name,
        "ip": f"10.10.10.{n}",
        "status": status,
        "ssh_key_names": ["hal"],
        "file_system_names": [],
    }


LISTING = {
    "data": [
        _listed(f"hal/prism/burst/burst1/{LAUNCHED}", "active", 1),
        _listed(f"hal/prism/burst/burst2/{LAUNCHED + 1}", "booting", 2),
        _listed(f"hal/prism/burst/burst3/{LAUNCHED + 2}", "terminating", 3),
        _listed(f"hal/prism/burst/burst1/{LAUNCHED - 600}", "terminated", 4),
        _listed(f"hal/prism/burst_other/burst_other1/{LAUNCHED}", "active", 5),
        _listed(f"hal/prism-other/burst/burst1/{LAUNCHED}", "active", 6),
        _listed("training-node-1", "active", 7),
    ]
}


def _with_examples(contract: Path, folder: Path) -> Path:
    """A copy of the contract whose 400 answer carries ``ERROR_EXAMPLES`` and whose
    listing answer ``LISTING``; nothing else changes (the schemas the requests, and these
    answers, are checked against are the contract's)."""
    import yaml

    doc = yaml.safe_load(contract.read_text())
    responses = doc["components"]["responses"]
    content = responses["badRequest"]["content"]["application/json"]
    content["examples"] = {
        name: {"value": {"error": error}} for name, error in ERROR_EXAMPLES.items()
    }
    responses["instances"]["content"]["application/json"]["examples"] = {"hal": {"value": LISTING}}
    path = folder / CONTRACT
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def prism_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``prism mock`` of Lambda Cloud's contract on a free port. Static mode: each answer
    is the contract's example (or one built from its schema); a request the contract
    does not allow is answered 400/422 with an ``sl-violations`` header (``prism_client``
    fails the test on it). Not ``--errors``: that turns the contract's own example of
    ``GET /instance-types`` (a price written as a string) into a 500."""
    found = _contract()
    if found is None or not found.is_file():
        pytest.skip(
            f"Lambda Cloud's API contract ({CONTRACT}) is neither beside the checkout "
            "(../shared/spec) nor at $HAL_LAMBDA_CONTRACT"
        )
    if not PRISM.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed: the Lambda tests run Prism from npm")
        pytest.fail(f"Prism is not installed ({PRISM}): run `make prism`")
    folder = tmp_path_factory.mktemp("prism")
    contract = _with_examples(found, folder)
    port = free_port()
    log = folder / "prism.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(PRISM), "mock", "--host", "127.0.0.1", "--port", str(port), str(contract)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while b"Prism is listening" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Prism did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class PrismTraffic:
    """What a provider sent Prism: each request (method, path, JSON body) and the
    contract violations Prism found in the requests."""

    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # in the requests
    answers: list[str] = field(default_factory=list)  # violations in Prism's answers
    auth: set[str] = field(default_factory=set)  # the Authorization headers sent

    def hook(self, reply: httpx.Response) -> None:
        request = reply.request
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        self.auth.add(request.headers.get("Authorization", ""))
        for found in json.loads(reply.headers.get("sl-violations", "[]")):
            where = f"{request.method} {request.url.path}: {found}"
            if found.get("location", [""])[0] == "request":
                self.violations.append(where)
            else:
                self.answers.append(where)


@pytest.fixture
def prism_client(prism_url: str) -> Iterator[Callable[..., tuple[httpx.Client, PrismTraffic]]]:
    """``prism_client(prefer=None, only="", times=0)``: an httpx client for the Lambda
    provider that records what it sends. ``prefer``: Prism's ``Prefer`` header choosing
    the answer (e.g. "code=400", "example=insufficient-capacity"), on the requests to
    the path ``only`` (all where ""), the first ``times`` of them (all where 0). The
    test fails if Prism found any request against the contract."""
    made: list[tuple[httpx.Client, PrismTraffic]] = []

    def make(
        prefer: str | None = None, only: str = "", times: int = 0
    ) -> tuple[httpx.Client, PrismTraffic]:
        traffic = PrismTraffic()
        sent = [0]

        def choose(request: httpx.Request) -> None:
            if prefer and (not only or request.url.path == only):
                sent[0] += 1
                if not times or sent[0] <= times:
                    request.headers["Prefer"] = prefer

        client = httpx.Client(event_hooks={"request": [choose], "response": [traffic.hook]})
        made.append((client, traffic))
        return client, traffic

    yield make
    for client, traffic in made:
        client.close()
        assert traffic.violations == [], "requests against the contract"


@pytest.fixture
def lambda_settings(prism_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A Lambda group's settings that reach Prism: the contract's example type
    gpu_1x_a100 has capacity in us-tx-1 only."""
    monkeypatch.setenv("LAMBDA_API_KEY", "secret-test-key")
    return {
        "instance_type": "gpu_1x_a100",
        "regions": "us-az-1,us-tx-1",
        "ssh_key_names": "hal",
        "endpoint_url": prism_url,
    }
