"""``scontrol update PartitionName=P State=|MaxTime=|DefaultTime=...`` against a live
server, as an administrator's maintenance runbook uses it on Slurm 22.05.8
(docs/slurm-checks.md): DOWN keeps new jobs waiting (``PartitionDown``),
DRAIN refuses new jobs and starts the queued ones, INACTIVE refuses them and starts none
(``PartitionInactive``); the change outlives a server restart and ``scontrol
reconfigure`` puts hal.toml's partition back. And A7: a user raises the time limit of
a pending job up to its partition's MaxTime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

CONFIG = """
[[partitions]]
name = "debug"
default = true

[[partitions]]
name = "other"
max_time = 30
default_time = 10
nodes = "ghost"   # no such node: its jobs stay pending
"""
REFUSED = "Batch job submission failed: Required partition not available (inactive or drain)"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("hal")
    (data / "hal.toml").write_text(CONFIG)
    server = LiveServer(data, config_file=data / "hal.toml")
    with server:
        yield server


def _ok(live: LiveServer, *args: str, token: str | None = None) -> str:
    out = live.cli(*args, token=token)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _field(live: LiveServer, what: str, name: str, key: str) -> str:
    text = _ok(live, "scontrol", "show", what, name)
    return text.split(f"{key}=", 1)[1].split()[0]


def _reason(live: LiveServer, job: str) -> str:
    return _ok(live, "squeue", "-h", "-j", job, "-o", "%r").strip()


def test_states_outlive_a_restart_and_go_at_reconfigure(live: LiveServer, tmp_path: Path) -> None:
    alice = live.add_users("alice")["alice"]
    user = live.cli("scontrol", "update", "PartitionName=debug", "State=DOWN", token=alice)
    assert user.returncode == 1 and "slurm_update error: Invalid user id" in user.stderr

    _ok(live, "scontrol", "update", "PartitionName=debug", "State=DOWN")
    waiting = _ok(live, "sbatch", "--parsable", "-D", str(tmp_path), "--wrap", "true").strip()
    wait_until(lambda: _reason(live, waiting) == "PartitionDown", message="PartitionDown")
    assert _ok(live, "sinfo", "-h", "-o", "%R %a").split() == ["debug", "down", "other", "up"]

    _ok(live, "scontrol", "update", "PartitionName=debug", "State=inact")
    wait_until(lambda: _reason(live, waiting) == "PartitionInactive", message="Inactive")
    assert _ok(live, "sinfo", "-h", "-o", "%R %a").split()[:2] == ["debug", "inact"]
    for state in ("INACTIVE", "DRAIN"):
        _ok(live, "scontrol", "update", "partitionname=debug", f"state={state}")
        out = live.cli("sbatch", "-D", str(tmp_path), "--wrap", "true")
        assert out.returncode == 1 and REFUSED in out.stderr, out.stderr
    assert _field(live, "partition", "debug", "State") == "DRAIN"
    assert _ok(live, "sinfo", "-h", "-o", "%R %a").split()[:2] == ["debug", "drain"]
    with live.agents(1, cpus=1, memory="1G"), live.client() as admin:  # DRAIN starts it
        wait_until(lambda: admin.job(int(waiting)).state == "COMPLETED", 60, message="run")
    _ok(live, "scontrol", "update", "PartitionName=debug", "MaxTime=1:00:00", "DefaultTime=5")

    live.stop()  # a restart keeps them (as slurmctld -R)
    live.start()
    assert _field(live, "partition", "debug", "State") == "DRAIN"
    assert _field(live, "partition", "debug", "MaxTime") == "01:00:00"
    assert _field(live, "partition", "debug", "DefaultTime") == "00:05:00"

    _ok(live, "scontrol", "reconfigure")  # hal.toml's again, as Slurm's reconfigure
    assert _field(live, "partition", "debug", "State") == "UP"
    assert _field(live, "partition", "debug", "MaxTime") == "UNLIMITED"


def test_bad_updates_say_what_to_write(live: LiveServer) -> None:
    cases = [
        (["State=FOO"], "Acceptable State values are UP, DOWN, DRAIN and INACTIVE"),
        (["MaxTime=10", "DefaultTime=20"], "DefaultTime would exceed MaxTime"),
        (["MaxTime=0"], "write MaxTime=UNLIMITED"),
        (["Nodes=n1"], "hal.toml's [[partitions]]"),
        ([], "No changes specified"),
    ]
    for words, said in cases:
        out = live.cli("scontrol", "update", "PartitionName=other", *words)
        assert out.returncode == 1 and said in out.stderr, (words, out.stderr)
    out = live.cli("scontrol", "update", "PartitionName=nope", "State=UP")
    assert out.returncode == 1 and "Invalid partition name specified" in out.stderr


def test_owner_raises_a_pending_limit_up_to_max_time(live: LiveServer, tmp_path: Path) -> None:
    """A7: Slurm 22.05.8 lets the owner raise a pending job's limit to MaxTime; above
    it: "Access/permission denied for job N" (checked on the peer)."""
    bob = live.add_users("bob")["bob"]
    job = _ok(
        live,
        "sbatch",
        "--parsable",
        "-p",
        "other",
        "-t",
        "10",
        "-D",
        str(tmp_path),
        "--wrap",
        "true",
        token=bob,
    ).strip()
    _ok(live, "scontrol", "update", f"JobId={job}", "TimeLimit=20", token=bob)
    assert _field(live, "job", job, "TimeLimit") == "00:20:00"
    for too_long in ("40", "UNLIMITED"):
        out = live.cli("scontrol", "update", f"JobId={job}", f"TimeLimit={too_long}", token=bob)
        assert out.returncode == 1, out.stderr
        assert f"Access/permission denied for job {job}" in out.stderr
    _ok(live, "scontrol", "update", f"JobId={job}", "TimeLimit=30", token=bob)
    assert _field(live, "job", job, "TimeLimit") == "00:30:00"
    _ok(live, "scancel", job)
