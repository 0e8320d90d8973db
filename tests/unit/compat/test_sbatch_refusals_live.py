"""``hal sbatch`` naming a QoS, an account or a GPU type that does not exist is refused
with Slurm's line, against a real control plane (a node registered through the agent
channel, as an agent with two A100s would; nothing runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.core.priority import Account, PriorityPolicy, Qos, UserAccount
from hal.testing import http
from hal.testing.live import LiveServer

FAILED = "sbatch: error: Batch job submission failed: "
POLICY = PriorityPolicy(
    accounts=(Account("physics"), Account("chemistry")),
    users=(UserAccount("alice", "physics", default=True),),
    qos=(Qos("normal", max_jobs_per_user=1), Qos("high", priority=10)),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("srv"), config_overrides={"priority": POLICY}) as live:
        registered = http.post(
            live.url + "/v1/agent/register",
            headers={"Authorization": f"Bearer {live.token}"},
            json={"node": "a1", "cpus": 8, "memory_bytes": 2**34, "gpus": 2, "gpu_model": "a100"},
            timeout=10,
        )
        assert registered.status_code == 200, registered.text
        yield live


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> str:
    return server.add_users("alice")["alice"]


def sbatch(server: LiveServer, token: str, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    done = server.cli("sbatch", *args, "--wrap", "true", token=token, cwd=tmp_path)
    return done.returncode, done.stdout, done.stderr


def test_an_unknown_qos_is_slurms_invalid_qos(
    server: LiveServer, alice: str, tmp_path: Path
) -> None:
    rc, out, err = sbatch(server, alice, tmp_path, "--qos=nope")
    assert (rc, out) == (1, "")
    assert err == (
        FAILED + "Invalid qos specification: 'nope' is not a QoS (known: high, normal)\n"
    )
    rc, out, _ = sbatch(server, alice, tmp_path, "--qos=high", "--hold")
    assert rc == 0 and out.startswith("Submitted batch job ")


def test_an_account_not_the_users_is_slurms_invalid_account(
    server: LiveServer, alice: str, tmp_path: Path
) -> None:
    for account in ("nope", "chemistry"):
        rc, _, err = sbatch(server, alice, tmp_path, "-A", account)
        assert rc == 1
        assert err == (
            FAILED + "Invalid account or account/partition combination specified: user "
            f"alice may not use account {account!r} (their accounts: physics)\n"
        )
    rc, _, _ = sbatch(server, alice, tmp_path, "-A", "physics", "--hold")
    assert rc == 0


def test_a_gpu_type_no_node_has_is_slurms_invalid_gres(
    server: LiveServer, alice: str, tmp_path: Path
) -> None:
    for option in ("--gres=gpu:h100:1", "--gpus=h100:1"):
        rc, _, err = sbatch(server, alice, tmp_path, option)
        assert rc == 1
        assert err == (
            FAILED + "Invalid generic resource (gres) specification: no node has GPU type "
            "'h100' (the cluster's types: a100)\n"
        )
    rc, _, _ = sbatch(server, alice, tmp_path, "--gres=gpu:a100:2", "--hold")
    assert rc == 0
